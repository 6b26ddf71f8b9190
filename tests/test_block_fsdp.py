"""FSDP2 as verl's engine applies it (``apply_fsdp2``, the model's ``_no_split_modules``) wraps every decoder layer of
the block-diffusion families, the mixture-of-experts ones with their experts and router inside: one gloo process."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

from diffugrpo_plugin.models.native.llada2 import LLaDA2MoeConfig, LLaDA2MoeModelLM, LLaDA2MoeSparseMoeBlock
from diffugrpo_plugin.models.native.sdar import SDARMoeConfig, SDARMoeForCausalLM, SDARSparseMoeBlock

SHAPE = dict(
    vocab_size=64,
    hidden_size=32,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    intermediate_size=64,
    moe_intermediate_size=16,
    tie_word_embeddings=False,
    pad_token_id=0,
)


def llada2():
    config = LLaDA2MoeConfig(
        **SHAPE,
        num_experts=4,
        num_experts_per_tok=2,
        n_group=2,
        topk_group=1,
        num_shared_experts=1,
        first_k_dense_replace=1,
    )
    return LLaDA2MoeModelLM(config), "LLaDA2MoeDecoderLayer", LLaDA2MoeSparseMoeBlock


def sdar_moe():
    config = SDARMoeConfig(**SHAPE, num_experts=4, num_experts_per_tok=2)
    return SDARMoeForCausalLM(config), "SDARDecoderLayer", SDARSparseMoeBlock


@pytest.fixture
def one_process(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("build", [llada2, sdar_moe], ids=["llada2", "sdar_moe"])
def test_fsdp2_wraps_each_moe_decoder_layer(build, one_process):
    from torch.distributed.device_mesh import init_device_mesh

    from verl.utils.fsdp_utils import apply_fsdp2

    model, layer_class, moe_class = build()
    assert set(model._no_split_modules) == {layer_class}
    apply_fsdp2(model, {"mesh": init_device_mesh("cpu", (1,))}, {})
    wrapped = [name for name, module in model.named_modules() if isinstance(module, FSDPModule)]
    layers = [f"model.layers.{i}" for i in range(3)]
    embedding = "model.word_embeddings" if layer_class.startswith("LLaDA2") else "model.embed_tokens"
    # each decoder layer its own unit (the dense first one and the MoE ones), the untied embedding and head, the root
    assert sorted(wrapped) == sorted(["", *layers, embedding, "lm_head"]), wrapped
    moe_layers = [name for name, module in model.named_modules() if isinstance(module, moe_class)]
    assert moe_layers and all(name.rsplit(".", 1)[0] in layers for name in moe_layers), moe_layers
    # the experts and router are sharded parameters of their layer's unit, not units of their own
    experts = dict(model.named_parameters())
    assert all(isinstance(p, DTensor) for name, p in experts.items() if ".experts." in name or ".gate." in name)
    assert not any(isinstance(m, FSDPModule) for name, m in model.named_modules() if ".experts" in name)
    out = model(input_ids=torch.randint(0, 64, (2, 8))).logits
    assert out.shape == (2, 8, 64) and torch.isfinite(out).all()

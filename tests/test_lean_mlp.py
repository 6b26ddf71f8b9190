"""Lean SwiGLU blocks: two of four activations saved, values and gradients those of the model's own code."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from conftest import MASK_ID, build_tiny_module
from diffugrpo_plugin.core.logprobs import coupled_token_logprobs
from diffugrpo_plugin.core.masking import make_coupled
from diffugrpo_plugin.models.dlm import DiffusionLM
from diffugrpo_plugin.models.families import BIDIRECTIONAL, DREAM, LLADA
from diffugrpo_plugin.models.lean_mlp import SwiGLUBlocks, make_lean, swiglu_down
from family_standins import dream_standin, llada_standin, load_remote  # noqa: F401  (fixtures)


def stock(gate, up, weight, bias=None):
    """The block as the models write it, op by op."""
    return F.linear(F.silu(gate) * up, weight, bias)


def leaves(*shapes, dtype=torch.float32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=generator).to(dtype).requires_grad_() for shape in shapes]


def values_and_gradients(function, tensors, upstream):
    out = function(*tensors)
    out.backward(upstream)
    grads = [t.grad.clone() for t in tensors]
    for t in tensors:
        t.grad = None
    return out.detach(), grads


def test_by_hand():
    # silu(0) = 0, silu(1) = s = sigmoid(1); out = 2 * 0 + 3 * s = 3s
    gate = torch.tensor([[0.0, 1.0]], requires_grad=True)
    up = torch.tensor([[2.0, 3.0]], requires_grad=True)
    weight = torch.tensor([[1.0, 1.0]], requires_grad=True)
    out = swiglu_down(gate, up, weight)
    s = 1 / (1 + math.exp(-1))
    assert out.item() == pytest.approx(3 * s)
    out.sum().backward()
    # d/d up = silu(gate); d/d gate = up * silu'(gate), silu'(x) = sigmoid(x) (1 + x (1 - sigmoid(x))); d/d W = product
    assert up.grad[0].tolist() == pytest.approx([0.0, s])
    assert gate.grad[0].tolist() == pytest.approx([2 * 0.5, 3 * s * (1 + (1 - s))])
    assert weight.grad[0].tolist() == pytest.approx([0.0, 3 * s])


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_values_and_gradients_are_the_stock_ops_bit_for_bit(dtype, with_bias):
    tensors = leaves((2, 5, 24), (2, 5, 24), (8, 24), *([(8,)] if with_bias else []), dtype=dtype)
    upstream = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(1)).to(dtype)
    lean_out, lean_grads = values_and_gradients(swiglu_down, tensors, upstream)
    stock_out, stock_grads = values_and_gradients(stock, tensors, upstream)
    assert lean_out.dtype == dtype and torch.equal(lean_out, stock_out)
    assert [g.dtype for g in lean_grads] == [dtype] * len(tensors)
    assert torch.equal(lean_grads[0], stock_grads[0]) and torch.equal(lean_grads[1], stock_grads[1])  # gate, up
    # the down projection's: the same products summed in the order of the folded or batched matmul autograd picks
    for lean_grad, stock_grad in zip(lean_grads[2:], stock_grads[2:]):
        torch.testing.assert_close(lean_grad, stock_grad)


def test_under_autocast_the_backward_runs_in_the_forwards_dtype():
    # fp32 weight, bf16 activations: autocast casts the weight for the matmuls and the weight's gradient comes
    # back in fp32, as for the unfused linear
    gate, up = leaves((3, 16), (3, 16), dtype=torch.bfloat16)
    weight, bias = leaves((4, 16), (4,), seed=2)
    upstream = torch.randn(3, 4).to(torch.bfloat16)
    results = []
    for function in (swiglu_down, stock):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            results.append(values_and_gradients(function, [gate, up, weight, bias], upstream))
    (lean_out, lean_grads), (stock_out, stock_grads) = results
    assert lean_out.dtype == torch.bfloat16 and torch.equal(lean_out, stock_out)
    assert [g.dtype for g in lean_grads] == [torch.bfloat16, torch.bfloat16, torch.float32, torch.float32]
    for lean_grad, stock_grad in zip(lean_grads, stock_grads):
        assert torch.allclose(lean_grad, stock_grad, rtol=1e-2, atol=1e-3)


def test_a_frozen_down_projection_gets_no_gradient_and_the_rest_is_unchanged():
    gate, up = leaves((4, 12), (4, 12))
    weight = torch.randn(6, 12)  # frozen: no gradient asked
    upstream = torch.randn(4, 6)
    swiglu_down(gate, up, weight).backward(upstream)
    lean = gate.grad.clone(), up.grad.clone()
    gate.grad = up.grad = None
    stock(gate, up, weight).backward(upstream)
    assert torch.equal(lean[0], gate.grad) and torch.equal(lean[1], up.grad)


def test_gate_and_up_of_different_dtypes_are_refused():
    with pytest.raises(ValueError, match="gate and up projections must agree"):
        swiglu_down(torch.randn(2, 4), torch.randn(2, 4).to(torch.bfloat16), torch.randn(3, 4))


def saved_bytes(block: nn.Module, x: torch.Tensor) -> int:
    """Bytes autograd keeps for the backward of one block (parameters and the block's input not counted)."""
    excluded = {p.untyped_storage().data_ptr() for p in block.parameters()} | {x.untyped_storage().data_ptr()}
    kept: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in excluded:
            kept[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        block(x)
    return sum(kept.values())


def test_a_lean_block_saves_two_of_the_four_intermediate_activations():
    module = build_tiny_module("dream")  # Qwen2: hidden 32, intermediate 64
    block = module.model.layers[0].mlp
    x = torch.randn(3, 10, 32, requires_grad=True)
    activation = 3 * 10 * 64 * 4  # one [tokens, intermediate] fp32 tensor
    assert saved_bytes(block, x) == 4 * activation  # gate, up, silu(gate), their product
    assert make_lean(module, BIDIRECTIONAL.swiglu).installed == 2
    assert saved_bytes(block, x) == 2 * activation  # gate and up
    again = make_lean(module, BIDIRECTIONAL.swiglu)  # a second call finds them lean already
    assert (again.installed, again.skipped) == (2, {})


def coupled_pass(lm: DiffusionLM, seed: int = 3):
    """The training pass's log-probs and every parameter's gradient of their sum."""
    input_ids = torch.randint(0, MASK_ID, (2, 12), generator=torch.Generator().manual_seed(seed))
    completion = torch.zeros_like(input_ids, dtype=torch.bool)
    completion[:, 5:] = True
    views = make_coupled().views(input_ids, completion, lm.mask_token_id, torch.tensor([seed, seed + 1]))
    logp = coupled_token_logprobs(lm, views, input_ids, torch.ones_like(input_ids)).logp
    logp.sum().backward()
    grads = [p.grad.clone() for p in lm.module.parameters()]
    lm.module.zero_grad(set_to_none=True)
    return logp.detach(), grads


def assert_lean_changes_nothing(build, family, blocks: int, checkpointing: bool = False):
    """The coupled pass on a lean copy of a model gives the stock model's log-probs and gradients, bit for bit."""
    models = [build(), build()]
    if checkpointing:
        for model in models:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            model.train()
    assert make_lean(models[1], family.swiglu).installed == blocks
    (stock_logp, stock_grads), (lean_logp, lean_grads) = (
        coupled_pass(DiffusionLM.wrap(m, family=family.name)) for m in models
    )
    assert torch.equal(stock_logp, lean_logp)
    for stock_grad, lean_grad in zip(stock_grads, lean_grads):
        assert torch.equal(stock_grad, lean_grad)


@pytest.mark.parametrize("style", ["dream", "llada"])  # Qwen2MLP and LlamaMLP
def test_stock_transformers_models(style):
    assert_lean_changes_nothing(lambda: build_tiny_module(style), BIDIRECTIONAL, blocks=2)


def test_under_gradient_checkpointing():
    assert_lean_changes_nothing(lambda: build_tiny_module("dream"), BIDIRECTIONAL, blocks=2, checkpointing=True)


def test_our_native_llada_block():
    from diffugrpo_plugin.models.native import LLaDAConfig, LLaDAModelLM

    def build():
        torch.manual_seed(0)
        return LLaDAModelLM(
            LLaDAConfig(
                d_model=32,
                n_heads=4,
                n_kv_heads=2,
                n_layers=2,
                mlp_hidden_size=48,
                block_type="llama",
                layer_norm_type="rms",
                activation_type="silu",
                rope=True,
                bias_for_layer_norm=False,
                include_bias=True,
                vocab_size=64,
                embedding_size=64,
                max_sequence_length=64,
                mask_token_id=MASK_ID,
            )
        ).eval()

    assert_lean_changes_nothing(build, LLADA, blocks=2)


def test_dreams_published_code(dream_standin):
    assert_lean_changes_nothing(lambda: load_remote(dream_standin), DREAM, blocks=2)  # its DreamMLP


def test_llada_published_code_computes_its_feed_forward_inline_and_is_left_as_it_is(llada_standin):
    report = make_lean(load_remote(llada_standin), LLADA.swiglu)
    assert report.installed == 0
    assert report.skipped == {
        "LLaDALlamaBlock has no feed_forward() of its own (its code computes the feed-forward inline)": 2
    }


class LoraLikeLinear(nn.Linear):
    """A layer that adds to a plain linear's output, as LoRA's does: its own forward must run."""

    def forward(self, x):
        return super().forward(x) + 1.0


@pytest.mark.parametrize(
    "change, reason",
    [
        (
            lambda mlp: setattr(mlp, "down_proj", LoraLikeLinear(64, 32, bias=False)),
            "Qwen2MLP.down_proj is a LoraLikeLinear, not a plain nn.Linear",
        ),
        (lambda mlp: setattr(mlp, "act_fn", nn.GELU()), "Qwen2MLP.act_fn is GELU, not SiLU"),
        (
            lambda mlp: setattr(mlp, "forward", lambda x: 2 * mlp.down_proj(F.silu(mlp.gate_proj(x)) * mlp.up_proj(x))),
            "Qwen2MLP.forward was already replaced on the instance",
        ),
    ],
)
def test_blocks_that_are_not_stock_keep_their_own_code(change, reason):
    module = build_tiny_module("dream")
    changed = module.model.layers[0].mlp
    change(changed)
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        before = changed(x)
    report = make_lean(module, BIDIRECTIONAL.swiglu)
    assert report.installed == 1 and len(report.skipped) == 1
    assert next(iter(report.skipped)).startswith(reason)
    assert reason.split(" ")[0] in report.summary()
    with torch.no_grad():
        assert torch.equal(changed(x), before)


def test_a_family_without_swiglu_blocks_changes_nothing():
    module = build_tiny_module("dream")
    assert make_lean(module, None).installed == 0
    assert make_lean(module, SwiGLUBlocks(classes=("SomeOtherMLP",))).installed == 0
    assert "forward" not in vars(module.model.layers[0].mlp)

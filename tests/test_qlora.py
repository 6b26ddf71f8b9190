"""QLoRA: LoRA adapters on a frozen 4-bit base (bitsandbytes, whose CPU kernels run here), through verl's FSDP2
engine, the rollout's sync and verl's checkpoints. The 4-bit model is checked against its own dequantized weights
written out as a plain checkpoint: the formula ``dequantize(W4) + alpha/r * B @ A`` on an ordinary model."""

from __future__ import annotations

import asyncio

import pytest
import torch

from conftest import ray_cluster  # noqa: F401  (fixture)
from engine_support import (
    FOUR_BIT,
    build_worker_group,
    coupled_grpo_actor_config,
    direct_response_logprobs,
    four_bit_model,
    make_batch,
    ppo_batch,
    release,
    response_logprobs,
    saved_dequantized,
    saved_merged_model,
    saved_random_adapter,
    tensordict_for,
    weight_sums,
)
from rollout_support import tiny_rollout

pytest.importorskip("bitsandbytes", reason="QLoRA needs the qlora extra: pip install 'diffugrpo[qlora]'")


def test_settings_take_d1s_defaults_and_refuse_what_bitsandbytes_lacks():
    from diffugrpo_plugin.models.family import ModelConfigError
    from diffugrpo_plugin.models.quantization import bitsandbytes_config, quantization_settings

    assert quantization_settings({}) is None and quantization_settings({"load_in_4bit": False}) is None
    settings = quantization_settings({"load_in_4bit": True, "dropout": 0.05})
    assert settings["bnb_4bit_quant_type"] == "nf4" and settings["bnb_4bit_use_double_quant"] is True
    config = bitsandbytes_config(settings, torch.bfloat16, head="model.transformer.ff_out")
    assert config.bnb_4bit_compute_dtype == torch.bfloat16 and config.llm_int8_skip_modules == [
        "model.transformer.ff_out"
    ]
    named = quantization_settings({"load_in_4bit": True, "bnb_4bit_compute_dtype": "float16"})
    assert bitsandbytes_config(named, torch.float32, head=None).bnb_4bit_compute_dtype == torch.float16
    with pytest.raises(ModelConfigError, match="bnb_4bit_compute_dtype=half_float: name a torch dtype"):
        quantization_settings({"load_in_4bit": True, "bnb_4bit_compute_dtype": "half_float"})


def test_the_4bit_model_is_its_dequantized_weights_and_checkpoints_leave_the_base_out(tiny_model_path, tmp_path):
    """Loaded in 4 bits, every linear layer but the vocabulary head is quantized, and the model computes what its
    dequantized weights compute in an ordinary model (which differs from the original checkpoint). Its state dict (what
    verl's checkpoints save) holds no 4-bit weight, and loading it back is complete; a submodule's state dict, what
    verl's first weight sync reads, still has them."""
    from diffugrpo_plugin.models.dlm import load_pretrained
    from diffugrpo_plugin.models.quantization import leave_out_of_state_dict, quantized_parameters

    model = four_bit_model(tiny_model_path).eval()
    assert len(quantized_parameters(model)) == 14  # 2 layers x (q, k, v, o, gate, up, down)
    assert type(model.lm_head.weight) is torch.nn.Parameter
    dequantized = load_pretrained(saved_dequantized(tiny_model_path, tmp_path / "dequantized")).eval()
    original = load_pretrained(tiny_model_path).eval()
    ids = torch.randint(5, 60, (2, 11))
    with torch.no_grad():
        logits = model(input_ids=ids).logits
        torch.testing.assert_close(logits, dequantized(input_ids=ids).logits, rtol=0, atol=1e-4)
        assert (logits - original(input_ids=ids).logits).abs().max() > 1e-3

    leave_out_of_state_dict(model)
    state = model.state_dict()
    assert "model.layers.0.self_attn.q_proj.bias" in state and "lm_head.weight" in state
    assert not any(".self_attn.q_proj.weight" in name or "absmax" in name for name in state)
    assert not model.load_state_dict(state).missing_keys
    assert "layers.0.self_attn.q_proj.weight.absmax" in model.model.state_dict()


@pytest.mark.parametrize("tied", [False, True])
def test_every_llada_block_is_4bit_and_its_vocabulary_head_is_not(tmp_path, tied):
    """LLaDA's head (``model.transformer.ff_out``) shares its last name with every block's down projection (``ff_out``):
    the head stays full precision, and the blocks' projections are all 4-bit. Tied, the head is the embedding."""
    from diffugrpo_plugin.models.quantization import quantized_parameters
    from family_standins import save_standin

    model = four_bit_model(str(save_standin("llada", tmp_path / "llada", tied=tied)))
    quantized = {id(parameter) for parameter in quantized_parameters(model)}
    four_bit = {name for name, parameter in model.named_parameters() if id(parameter) in quantized}
    blocks = model.model.transformer.blocks
    assert len(four_bit) == 7 * len(blocks)  # q, k, v, attn_out, ff_proj, up_proj, ff_out in each block
    assert {name.rsplit(".", 2)[-2] for name in four_bit} == {
        "q_proj", "k_proj", "v_proj", "attn_out", "ff_proj", "up_proj", "ff_out"
    }  # fmt: skip
    assert not any(name.startswith("model.transformer.ff_out") for name in four_bit)
    if not tied:
        assert type(model.model.transformer.ff_out.weight) is torch.nn.Parameter


def test_rollout_checks_the_trainers_4bit_base_and_samples_through_its_adapters(tiny_model_path):
    """verl's LoRA sync from a 4-bit trainer: the base (its 4-bit codes and scales under ``base_layer`` names), then
    the adapters. The rollout quantized the same checkpoint itself: it checks the codes instead of copying them, and
    then computes the trainer's logits exactly. A base whose codes differ is refused."""
    from peft import LoraConfig, TaskType, get_peft_model

    from verl.utils.fsdp_utils import collect_lora_params, replace_lora_wrapper

    from diffugrpo_plugin.models.lora import accept_causal_lm_wrapper

    rollout = tiny_rollout(tiny_model_path, lora=FOUR_BIT)
    policy = get_peft_model(
        accept_causal_lm_wrapper(four_bit_model(tiny_model_path)),
        LoraConfig(task_type=TaskType.CAUSAL_LM, r=4, lora_alpha=8, target_modules=["q_proj", "up_proj"]),
    ).eval()
    with torch.no_grad():
        for name, parameter in policy.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.3)
    settings = policy.peft_config["default"]
    base = collect_lora_params(policy, layered_summon=False, base_sync_done=False)
    base = {replace_lora_wrapper(name, settings): tensor for name, tensor in base.items()}
    assert "model.layers.0.self_attn.q_proj.weight.absmax" in base
    asyncio.run(rollout.update_weights(iter(base.items()), peft_config=settings.to_dict(), base_sync_done=False))
    adapters = collect_lora_params(policy, layered_summon=False, base_sync_done=True)
    asyncio.run(rollout.update_weights(iter(adapters.items()), peft_config=settings.to_dict(), base_sync_done=True))
    ids = torch.randint(5, 60, (3, 12))
    with torch.no_grad():
        assert torch.equal(rollout.lm.module(input_ids=ids).logits, policy(input_ids=ids).logits)

    name = "model.layers.1.mlp.down_proj.base_layer.weight"  # verl names a base weight by its wrapper
    tampered = {**base, name: base[name] ^ 1}  # one bit of every byte: other 4-bit codes
    with pytest.raises(RuntimeError, match=f"4-bit weight '{name}' differs from the rollout's"):
        asyncio.run(
            rollout.update_weights(iter(tampered.items()), peft_config=settings.to_dict(), base_sync_done=False)
        )


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.usefixtures("ray_cluster")
def test_qlora_engine_scores_the_dequantized_formula_trains_adapters_only_and_resumes(tiny_model_path, tmp_path):
    """QLoRA through verl's FSDP2 engine on 2 workers (adapters sharded, the 4-bit base whole on each): the coupled
    log-probs equal the formula on the dequantized base with the adapter merged, and verl's ``no_lora_adapter`` gives
    the dequantized base's. A PPO step on 2 workers equals the step on 1 and changes the adapters only. verl's
    checkpoint, saved after the step and loaded into a fresh group, gives back the trained model."""
    from functools import partial

    import ray

    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.losses import ppo_loss

    adapter = saved_random_adapter(tiny_model_path, tmp_path / "adapter")
    dequantized = saved_dequantized(tiny_model_path, tmp_path / "dequantized")
    merged = saved_merged_model(dequantized, adapter, tmp_path / "merged")
    prompts, responses, seeds = make_batch(vocab=64)
    want_policy = direct_response_logprobs(merged, prompts, responses, seeds)
    want_reference = direct_response_logprobs(dequantized, prompts, responses, seeds)
    lora = {"lora_rank": 4, "lora_alpha": 8, "lora_adapter_path": adapter, "lora": dict(FOUR_BIT)}
    loss_fn = partial(ppo_loss, config=coupled_grpo_actor_config())
    results = {}
    for workers in (2, 1):
        group = build_worker_group(tiny_model_path, workers=workers, lora=lora, lr=1e-2)
        try:
            policy = response_logprobs(group.infer_batch(tensordict_for(prompts, responses, seeds, 1)).get(), responses)
            base_batch = tensordict_for(prompts, responses, seeds, 1)
            tu.assign_non_tensor(base_batch, no_lora_adapter=True)
            reference = response_logprobs(group.infer_batch(base_batch).get(), responses)
            if workers == 2:
                for got, want in ((policy, want_policy), (reference, want_reference)):
                    for g, w in zip(got, want):
                        torch.testing.assert_close(g, w, rtol=0, atol=1e-4)
                before = ray.get([worker.__ray_call__.remote(weight_sums) for worker in group.workers])
            group.set_loss_fn(loss_fn)
            metrics = group.train_batch(ppo_batch(prompts, responses, seeds, policy, reference)).get()["metrics"]
            after = response_logprobs(group.infer_batch(tensordict_for(prompts, responses, seeds, 1)).get(), responses)
            if workers == 2:
                moved = ray.get([worker.__ray_call__.remote(weight_sums) for worker in group.workers])
                group.save_checkpoint(str(tmp_path / "saved"), global_step=1)
        finally:
            release(group)
        results[workers] = (metrics["loss"], metrics["grad_norm"], after)
    for sums_before, sums_after in zip(before, moved):
        changed = {name for name in sums_before if sums_before[name] != sums_after[name]}
        assert changed and all("lora_" in name for name in changed), sorted(changed)[:5]
    (loss2, grad2, after2), (loss1, grad1, after1) = results[2], results[1]
    assert loss1 == pytest.approx(loss2, rel=1e-4, abs=1e-6)
    assert grad1 == pytest.approx(grad2, rel=1e-4)
    for a, b in zip(after1, after2):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)

    saved = tmp_path / "saved"
    assert (saved / "lora_adapter" / "adapter_model.safetensors").is_file()
    shard = torch.load(saved / "model_world_size_2_rank_0.pt", weights_only=False)
    assert not any("absmax" in name for name in shard)  # the 4-bit base is rebuilt from the model path, not saved
    group = build_worker_group(tiny_model_path, workers=2, lora=lora, lr=1e-2)
    try:
        group.load_checkpoint(str(saved))
        resumed = response_logprobs(group.infer_batch(tensordict_for(prompts, responses, seeds, 1)).get(), responses)
    finally:
        release(group)
    for a, b in zip(resumed, after2):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_qlora_sft_trains_adapters_on_the_4bit_base_and_saves_the_adapter_alone(tiny_model_path, tmp_path):
    """Masked SFT with ``load_in_4bit``: only adapters train, the validation loss falls, and the checkpoint is the
    adapter (no merged model, which would round it into 4-bit weights). Applied to the 4-bit base again, the saved
    adapter gives the run's last validation loss."""
    from transformers import AutoTokenizer

    from diffugrpo_plugin.core.masking import make_sft
    from diffugrpo_plugin.data import prepare, write_parquet
    from diffugrpo_plugin.models.dlm import load_diffusion_lm, load_pretrained
    from diffugrpo_plugin.models.quantization import quantization_settings
    from diffugrpo_plugin.training import sft

    start = load_pretrained(tiny_model_path)  # a head scaled up, so the frozen head leaves the adapters something to do
    with torch.no_grad():
        start.get_output_embeddings().weight.mul_(40)
    start.save_pretrained(tmp_path / "start")
    AutoTokenizer.from_pretrained(tiny_model_path).save_pretrained(tmp_path / "start")
    data = write_parquet(prepare("synthetic", "train")[:32], tmp_path / "train.parquet")
    config = sft.SFTConfig(
        train_files=(str(data),),
        val_files=(str(data),),
        output_dir=str(tmp_path / "out"),
        model_path=str(tmp_path / "start"),
        steps=20,
        batch_size=8,
        lr=3e-2,
        warmup_steps=2,
        log_every=10,
        lora_rank=8,
        lora_alpha=16,
        load_in_4bit=True,
    )
    lm, tokenizer = sft.load_model_and_tokenizer(config)
    assert all("lora_" in name for name, p in lm.module.named_parameters() if p.requires_grad)
    examples = sft.load_examples(config.val_files, tokenizer, 48, 160).examples
    args = (config, tokenizer.pad_token_id, tokenizer.eos_token_id, make_sft())
    before = sft.validation_loss(lm, examples, *args)
    result = sft.train(config, echo=lambda line: None)
    assert result.val_losses[-1][1] < 0.9 * before, (before, result.val_losses)
    output = tmp_path / "out"
    assert (output / "lora_adapter" / "adapter_config.json").is_file() and not list(output.glob("*.safetensors"))
    import json

    saved = json.loads((output / "lora_adapter" / "adapter_config.json").read_text())
    assert saved["base_model_name_or_path"] == config.model_path  # what the adapter must be applied to
    reloaded, _ = load_diffusion_lm(
        config.model_path, "cpu", adapter=str(output / "lora_adapter"), quantization=quantization_settings(FOUR_BIT)
    )
    assert sft.validation_loss(reloaded, examples, *args) == pytest.approx(result.val_losses[-1][1], rel=1e-4)
    with pytest.raises(sft.SFTError, match="--load-in-4bit trains LoRA adapters on a frozen 4-bit base"):
        sft.SFTConfig(train_files=("x",), output_dir="y", load_in_4bit=True)
    with pytest.raises(sft.SFTError, match="holds a model, which a 4-bit run .* choose an empty directory"):
        sft.SFTConfig(train_files=("x",), output_dir=config.model_path, lora_rank=4, load_in_4bit=True)


def test_the_memory_models_bytes_per_4bit_weight_are_what_bitsandbytes_stores():
    """``step_memory.FOUR_BIT_BYTES`` (0.5 + 1/64 + 4/16384) against the tensors bitsandbytes keeps for a quantized
    256 x 1024 weight with d1's settings: the packed codes, the 8-bit block scales and the float32 scales of those,
    besides two fixed code tables (16 and 256 floats) that do not grow with the weight."""
    import bitsandbytes.functional as bnb_functional

    from diffugrpo_plugin.tools.step_memory import FOUR_BIT_BYTES

    weight = torch.randn(256, 1024)
    packed, state = bnb_functional.quantize_4bit(weight, quant_type="nf4", compress_statistics=True)
    tensors = [packed, state.absmax, state.state2.absmax]
    stored = sum(tensor.numel() * tensor.element_size() for tensor in tensors)
    assert stored == pytest.approx(FOUR_BIT_BYTES * weight.numel(), rel=1e-9)


def test_d1s_fits_table_counts_the_4bit_base():
    """``examples/d1_llada/fits.py``: with d1's 4-bit base the recipe's step on LLaDA-8B drops from 55 to 23 GiB
    (6.98B of its 8.02B weights in 4 bits), which fits a 40 GB card."""
    import subprocess
    import sys
    from pathlib import Path

    done = subprocess.run(
        [sys.executable, "examples/d1_llada/fits.py"],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {
        line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[2:-1]]
        for line in done.stdout.splitlines()
        if line.startswith("| ")
    }
    recipe, qlora = (
        rows["the recipe: LoRA, fp32 base and adapters, checkpointing"],
        rows["QLoRA as d1: 4-bit base, fp32 adapters, checkpointing"],
    )
    assert float(qlora[0]) < 0.5 * float(recipe[0])
    assert qlora[5:] == ["no", "yes", "yes"] and recipe[5:] == ["no", "no", "yes"]  # 24, 40, 80 GB
    assert "6.98B weights in 4 bits" in done.stdout


@pytest.mark.slow
def test_bitsandbytes_hub_kernel_warning_stays_quiet():
    """bitsandbytes' import-time warning about an optional hub kernel (for a weight packing never used here) does not
    reach users of the package: peft imported after it leaves stderr without it."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", "import diffugrpo_plugin, peft.tuners.lora, bitsandbytes"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "gemm_4bit_forward" not in done.stderr
    import logging

    import diffugrpo_plugin  # noqa: F401

    assert logging.getLogger("bitsandbytes.backends.cpu.ops").level == logging.ERROR

"""What d1's RL recipe needs per GPU on LLaDA-8B, with LoRA as d1 configures it: which GPUs it fits.

    python examples/d1_llada/fits.py

Arithmetic, not a measurement (diffugrpo_plugin/tools/step_memory.py, the model ``diffugrpo check-model`` prints):
LLaDA-8B is built on the meta device from ``llada_8b_config.json`` (the published config's shape fields),
d1's adapters are placed by peft exactly as the training engine places them, and one training step of
d1's per-GPU batch is costed term by term, on one GPU (no sharding).
"""

from __future__ import annotations

import json
from pathlib import Path

from diffugrpo_plugin.config import training_default
from diffugrpo_plugin.models.families import LLADA
from diffugrpo_plugin.models.lean_mlp import make_lean
from diffugrpo_plugin.models.lora import (
    adapted_copy,
    adapted_inputs_per_layer,
    adapted_module_names,
    adapter_parameters,
    target_report,
)
from diffugrpo_plugin.models.native.llada import LLaDAConfig, LLaDAModelLM
from diffugrpo_plugin.models.quantization import four_bit_weight_count
from diffugrpo_plugin.models.weights import meta_model
from diffugrpo_plugin.tools import step_memory

D1_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj", "gate_proj"]
D1_RANK = 128
D1_DROPOUT = 0.05
GPUS_GB = (24, 40, 80)
ALLOCATOR_MARGIN = 0.15
CONTEXT_GIB = 1.0


def fits_on(total_gib: float, card_gb: int) -> bool:
    return total_gib * (1 + ALLOCATOR_MARGIN) + CONTEXT_GIB <= card_gb * 1e9 / 2**30


def llada_8b():
    config = LLaDAConfig(**json.loads((Path(__file__).with_name("llada_8b_config.json")).read_text()))
    model = meta_model(LLaDAModelLM, config)
    hidden, vocab = config.d_model, config.embedding_size
    shape = step_memory.ModelShape(
        parameters=sum(p.numel() for p in model.parameters()),
        vocab=vocab,
        hidden=hidden,
        layers=config.n_layers,
        intermediate=config.mlp_hidden_size,
        kv_dim=hidden // config.n_heads * config.n_kv_heads,
        embedding_parameters=vocab * hidden,
        head_parameters=0 if config.weight_tying else vocab * hidden,
    )
    return model, shape


def d1_setup(lean_mlp: bool, **changes) -> step_memory.StepSetup:
    """The recipe per GPU (d1's train.yaml): 6 completions per device batch, prompts 200 and completions 256 tokens,
    its one-view masker, bf16 compute, the sampler denoising the 6 completions together; weights stored in fp32
    (verl's default, so the adapters train in fp32 as d1's do), and so gradient checkpointing on (d1: off)."""
    settings = dict(
        batch=6,
        prompt_length=200,
        completion_length=256,
        gpus=1,
        gradient_checkpointing=True,
        chunk_rows=training_default("actor_rollout_ref.model.diffusion.chunk_rows"),
        param_dtype="bf16",
        rollout_dtype="bf16",
        rollout_micro_batch=6,
        views=1,
        scored_rows_per_token=1,
        logits_shift=False,
        sampler_kv_cache=False,
        model_dtype="fp32",
        reference_dtype="bf16",
        lean_mlp=lean_mlp,
    )
    settings.update(changes)
    return step_memory.StepSetup(**settings)


def main() -> None:
    model, shape = llada_8b()
    adapted = adapted_copy(model, D1_RANK, D1_TARGETS)
    adapters = adapter_parameters(adapted)
    lean = make_lean(adapted, LLADA.swiglu)  # lean unless a down projection (ff_out) carries an adapter
    stock = lean.installed == 0
    dropped = adapted_inputs_per_layer(adapted, shape.layers) if D1_DROPOUT else 0  # lora_dropout 0.05
    four_bit = four_bit_weight_count(model, LLADA.head_module(model))  # lora.load_in_4bit: every linear but the head
    matched, unmatched = target_report([name for name, _ in model.named_modules()], D1_TARGETS)
    print(
        f"LLaDA-8B: {shape.parameters / 1e9:.2f}B parameters. d1's LoRA, rank {D1_RANK}, targets "
        f"{', '.join(D1_TARGETS)}: in LLaDA's module names only {', '.join(matched)} exist "
        f"({', '.join(unmatched)} adapt nothing), so {len(adapted_module_names(adapted))} modules carry "
        f"{adapters / 1e6:.0f}M adapter parameters ({100 * adapters / shape.parameters:.1f}% of the model); "
        f"{'blocks with an adapter keep their own SwiGLU code (all their activations)' if stock else 'lean MLP'}.\n"
    )
    rows = [
        (
            "the recipe: LoRA, fp32 base and adapters, checkpointing",
            d1_setup(not stock, lora_parameters=adapters, lora_dropout_inputs=dropped),
        ),
        (
            "... without checkpointing (d1's setting)",
            d1_setup(not stock, lora_parameters=adapters, lora_dropout_inputs=dropped, gradient_checkpointing=False),
        ),
        (
            "... 1 completion per micro-batch and sampler batch",
            d1_setup(not stock, lora_parameters=adapters, lora_dropout_inputs=dropped, batch=1, rollout_micro_batch=1),
        ),
        (
            "... bf16 base (adapters in bf16 too: too coarse for lr 3e-6)",
            d1_setup(not stock, lora_parameters=adapters, lora_dropout_inputs=dropped, model_dtype="bf16"),
        ),
        (
            "QLoRA as d1: 4-bit base, fp32 adapters, checkpointing",
            d1_setup(not stock, lora_parameters=adapters, lora_dropout_inputs=dropped, four_bit_parameters=four_bit),
        ),
        (
            "... without checkpointing (d1's setting)",
            d1_setup(
                not stock,
                lora_parameters=adapters,
                lora_dropout_inputs=dropped,
                four_bit_parameters=four_bit,
                gradient_checkpointing=False,
            ),
        ),
        ("full fine-tuning, fp32 states, bf16 reference", d1_setup(True)),
    ]
    width = max(len(name) for name, _ in rows)
    print(
        f"| {'setting (one GPU, one training step)':<{width}} | GiB | held | update | rollout | host | "
        + " | ".join(f"{gb} GB" for gb in GPUS_GB)
        + " |"
    )
    print(
        f"|{'-' * (width + 2)}|-----|------|--------|---------|------|"
        + "|".join("-" * (len(str(gb)) + 5) for gb in GPUS_GB)
        + "|"
    )
    for name, setup in rows:
        estimate = step_memory.memory_estimate(shape, setup)
        total = estimate.total_gib
        fits = " | ".join(f"{'yes' if fits_on(total, gb) else 'no':<{len(str(gb)) + 3}}" for gb in GPUS_GB)
        phases = " | ".join(f"{estimate.phase_bytes(phase) / 2**30:.1f}" for phase in step_memory.PHASES)
        print(f"| {name:<{width}} | {total:.1f} | {phases} | {fits} |")
    print(
        f"\n'yes': the estimate plus {ALLOCATOR_MARGIN:.0%} (allocator, terms not counted) and {CONTEXT_GIB} GiB of CUDA "
        f"context fit the card (GB = 10^9 bytes, as cards are sold). QLoRA rows: "
        f"++actor_rollout_ref.model.lora.load_in_4bit=true, {four_bit / 1e9:.2f}B weights in 4 bits."
    )


if __name__ == "__main__":
    main()

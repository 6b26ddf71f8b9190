"""What d1's RL recipe needs per GPU on LLaDA-8B, with LoRA as d1 configures it: which GPUs it fits.

    python examples/d1_llada/fits.py

Arithmetic, not a measurement (diffugrpo_plugin/step_cost.py, the model ``diffugrpo check-model`` prints):
LLaDA-8B is built on the meta device from ``llada_8b_config.json`` (the published config's shape fields),
d1's adapters are placed by peft exactly as the training engine places them, and one training step of
d1's per-GPU batch is costed term by term, on one GPU (no sharding).
"""

from __future__ import annotations

import json
from pathlib import Path

from diffugrpo_plugin import step_cost
from diffugrpo_plugin.lora import adapted_copy, adapted_module_names, adapter_parameters, target_report
from diffugrpo_plugin.native.llada import LLaDAConfig, LLaDAModelLM
from diffugrpo_plugin.weights import meta_model

D1_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj", "gate_proj"]
D1_RANK = 128
GPUS_GB = (24, 40, 80)
ALLOCATOR_MARGIN = 0.15
CONTEXT_GIB = 1.0


def fits_on(total_gib: float, card_gb: int) -> bool:
    return total_gib * (1 + ALLOCATOR_MARGIN) + CONTEXT_GIB <= card_gb * 1e9 / 2**30


def llada_8b():
    config = LLaDAConfig(**json.loads((Path(__file__).with_name("llada_8b_config.json")).read_text()))
    model = meta_model(LLaDAModelLM, config)
    hidden, vocab = config.d_model, config.embedding_size
    shape = step_cost.ModelShape(
        parameters=sum(p.numel() for p in model.parameters()), vocab=vocab, hidden=hidden, layers=config.n_layers,
        intermediate=config.mlp_hidden_size, kv_dim=hidden // config.n_heads * config.n_kv_heads,
        embedding_parameters=vocab * hidden, head_parameters=0 if config.weight_tying else vocab * hidden)
    return model, shape


def d1_setup(**changes) -> step_cost.StepSetup:
    """d1's train.yaml per GPU: 6 completions per device batch, prompts 200 and completions 256 tokens, its
    one-view masker, bf16, no gradient checkpointing, the sampler denoising the 6 completions together."""
    settings = dict(batch=6, prompt_length=200, completion_length=256, gpus=1, gradient_checkpointing=False,
                    param_dtype="bf16", rollout_dtype="bf16", rollout_micro_batch=6, views=1,
                    scored_rows_per_token=1, logits_shift=False, sampler_kv_cache=False, model_dtype="bf16",
                    reference_dtype="bf16")
    settings.update(changes)
    return step_cost.StepSetup(**settings)


def main() -> None:
    model, shape = llada_8b()
    adapted = adapted_copy(model, D1_RANK, D1_TARGETS)
    adapters = adapter_parameters(adapted)
    matched, unmatched = target_report([name for name, _ in model.named_modules()], D1_TARGETS)
    print(f"LLaDA-8B: {shape.parameters / 1e9:.2f}B parameters. d1's LoRA, rank {D1_RANK}, targets "
          f"{', '.join(D1_TARGETS)}: in LLaDA's module names only {', '.join(matched)} exist "
          f"({', '.join(unmatched)} adapt nothing), so {len(adapted_module_names(adapted))} modules carry "
          f"{adapters / 1e6:.0f}M adapter parameters ({100 * adapters / shape.parameters:.1f}% of the model).\n")
    rows = [
        ("d1 as configured: LoRA, bf16 base, no checkpointing", d1_setup(lora_parameters=adapters)),
        ("... with gradient checkpointing", d1_setup(lora_parameters=adapters, gradient_checkpointing=True)),
        ("... checkpointing, 1 completion per micro-batch", d1_setup(lora_parameters=adapters, batch=1,
                                                                      gradient_checkpointing=True)),
        ("... fp32 base (verl's default model_dtype)", d1_setup(lora_parameters=adapters, model_dtype="fp32",
                                                                gradient_checkpointing=True)),
        ("full fine-tuning, bf16 states, bf16 reference, checkpointing", d1_setup(gradient_checkpointing=True)),
    ]
    width = max(len(name) for name, _ in rows)
    print(f"| {'setting (one GPU, one training step)':<{width}} | GiB | " + " | ".join(f"{gb} GB" for gb in GPUS_GB)
          + " |")
    print(f"|{'-' * (width + 2)}|-----|" + "|".join("-" * (len(str(gb)) + 5) for gb in GPUS_GB) + "|")
    for name, setup in rows:
        total = step_cost.memory_estimate(shape, setup).total_gib
        fits = " | ".join(f"{'yes' if fits_on(total, gb) else 'no':<{len(str(gb)) + 3}}" for gb in GPUS_GB)
        print(f"| {name:<{width}} | {total:.1f} | {fits} |")
    print(f"\n'yes': the estimate plus {ALLOCATOR_MARGIN:.0%} (allocator, terms not counted) and {CONTEXT_GIB} GiB of CUDA "
          f"context fit the card (GB = 10^9 bytes, as cards are sold). 4-bit base weights (d1's load_in_4bit) are "
          f"not supported yet.")


if __name__ == "__main__":
    main()

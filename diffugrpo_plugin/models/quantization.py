"""4-bit base weights for LoRA training (QLoRA, as d1 trains LLaDA): bitsandbytes' ``Linear4bit`` under the adapters.

The settings live beside the other LoRA settings, in ``actor_rollout_ref.model.lora`` (keys named as transformers'
``BitsAndBytesConfig`` names them)::

    lora:
      load_in_4bit: true
      bnb_4bit_quant_type: nf4          # d1's
      bnb_4bit_use_double_quant: true   # d1's
      bnb_4bit_compute_dtype: null      # null: the dtype the layers compute in (the engine's param dtype)

The trainer, the reference (the same base with its adapters off) and the rollout each quantize the same checkpoint
with the same settings, so all three see the same 4-bit weights: quantization is deterministic, and the rollout
checks it against the trainer's at the first weight sync (``integration/rollout/``).

Plain torch, transformers and bitsandbytes (imported when used): no verl.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from diffugrpo_plugin.models.family import ModelConfigError

SETTING_KEYS = ("load_in_4bit", "bnb_4bit_quant_type", "bnb_4bit_use_double_quant", "bnb_4bit_compute_dtype")
D1_SETTINGS = {"bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True}
QUANT_TYPES = ("nf4", "fp4")
# the entries bitsandbytes writes beside a 4-bit weight in a state dict: its quantization state, not parameters
QUANT_RECORD = ".quant_state."  # a packed record of the state: quant type, block size, shape, dtype
QUANT_STATE_PARTS = (".absmax", ".quant_map", ".nested_absmax", ".nested_quant_map", QUANT_RECORD)


def wants_4bit(lora_settings: Mapping[str, Any] | None) -> bool:
    """Whether ``actor_rollout_ref.model.lora`` asks for a 4-bit base."""
    return bool((lora_settings or {}).get("load_in_4bit", False))


def quantization_settings(lora_settings: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The 4-bit settings of ``actor_rollout_ref.model.lora`` with d1's defaults filled in; ``None`` without
    ``load_in_4bit``. A bad value is a one-line error naming the key."""
    if not wants_4bit(lora_settings):
        return None
    chosen = {**D1_SETTINGS, **{key: lora_settings[key] for key in SETTING_KEYS if lora_settings.get(key) is not None}}
    if chosen["bnb_4bit_quant_type"] not in QUANT_TYPES:
        raise ModelConfigError(
            f"actor_rollout_ref.model.lora.bnb_4bit_quant_type={chosen['bnb_4bit_quant_type']}: "
            f"bitsandbytes quantizes to {' or '.join(QUANT_TYPES)}"
        )
    compute = chosen.get("bnb_4bit_compute_dtype")
    if compute is not None and not isinstance(getattr(torch, str(compute), None), torch.dtype):
        raise ModelConfigError(
            f"actor_rollout_ref.model.lora.bnb_4bit_compute_dtype={compute}: name a torch dtype "
            f"(bfloat16, float16, float32) or leave it null"
        )
    return chosen


def bitsandbytes_config(settings: Mapping[str, Any], compute_dtype: torch.dtype, head: str | None):
    """transformers' ``BitsAndBytesConfig`` for :func:`quantization_settings`' result; the layers compute in
    ``compute_dtype`` unless the settings name one. The vocabulary ``head`` (the family's dotted path) stays in full
    precision: the coupled log-probs and the samplers project with its weight matrix directly."""
    from transformers import BitsAndBytesConfig

    named = settings.get("bnb_4bit_compute_dtype")
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type=settings["bnb_4bit_quant_type"],
        bnb_4bit_use_double_quant=bool(settings["bnb_4bit_use_double_quant"]),
        bnb_4bit_compute_dtype=getattr(torch, str(named)) if named is not None else compute_dtype,
        # the whole dotted path: transformers skips every module whose name ends with the entry, and LLaDA's head
        # (model.transformer.ff_out) shares its last name with each block's down projection
        llm_int8_skip_modules=[head] if head else None,  # None: transformers' own (lm_head)
    )


def loading_kwargs(
    settings: Mapping[str, Any], compute_dtype: torch.dtype, device: str | torch.device, head: str | None
) -> dict:
    """What ``from_pretrained`` takes to load a checkpoint's linear layers in 4 bits on ``device`` (bitsandbytes
    quantizes where the weights land), after checking that bitsandbytes can."""
    device = torch.device(device)
    require_bitsandbytes(device)
    return {
        "quantization_config": bitsandbytes_config(settings, compute_dtype, head),
        "device_map": {"": device.index if device.type == "cuda" and device.index is not None else device.type},
    }


def require_bitsandbytes(device: str | torch.device) -> None:
    """One-line error unless the installed bitsandbytes quantizes and dequantizes on ``device`` (CUDA, and CPU from
    bitsandbytes 0.50): tried on a small tensor, so a missing kernel shows here, not in the first step."""
    try:
        import bitsandbytes.functional as bnb_functional
    except ImportError:
        raise ModelConfigError(
            "actor_rollout_ref.model.lora.load_in_4bit needs bitsandbytes: pip install 'diffugrpo[qlora]'"
        ) from None
    import bitsandbytes

    try:
        weight = torch.linspace(-1, 1, 128, device=device).reshape(2, 64)
        packed, state = bnb_functional.quantize_4bit(weight, quant_type="nf4")
        bnb_functional.dequantize_4bit(packed, state)
    except Exception as error:  # a backend without 4-bit kernels raises whatever its dispatcher raises
        raise ModelConfigError(
            f"bitsandbytes {bitsandbytes.__version__} cannot quantize to 4 bits on {torch.device(device).type} "
            f"({type(error).__name__}: {' '.join(str(error).split())[:160]}); run on a CUDA GPU, or install "
            f"bitsandbytes>=0.50 for its CPU kernels"
        ) from None


def quantized_parameters(module: torch.nn.Module) -> set[torch.nn.Parameter]:
    """The 4-bit weights of ``module`` (bitsandbytes' ``Params4bit``): frozen, and left out of FSDP's sharding,
    which would turn them into plain sharded tensors without their quantization state."""
    try:
        from bitsandbytes.nn import Params4bit
    except ImportError:
        return set()
    return {parameter for parameter in module.parameters() if isinstance(parameter, Params4bit)}


def quantized_parameter_names(module: torch.nn.Module) -> set[str]:
    """Names of ``module``'s 4-bit weights, as ``named_parameters`` gives them."""
    quantized = {id(parameter) for parameter in quantized_parameters(module)}
    return {name for name, parameter in module.named_parameters() if id(parameter) in quantized}


def four_bit_weight_count(module: torch.nn.Module, head: torch.nn.Module | None) -> int:
    """How many weights loading ``module`` in 4 bits stores in 4 bits: every linear layer's but the vocabulary
    ``head``'s (works on a meta-device model; for the memory model)."""
    return sum(
        layer.weight.numel() for layer in module.modules() if isinstance(layer, torch.nn.Linear) and layer is not head
    )


def keep_canonical_packing(module: torch.nn.Module) -> torch.nn.Module:
    """Keep every 4-bit weight in bitsandbytes' portable packing. On a CPU with AVX512-BF16, ``Linear4bit`` repacks
    its weight in place for a faster kernel at its first no-grad forward in eval mode: the weight would then differ
    from the trainer's (the rollout's sync check), from checkpoints, and from the layout a CPU layer narrower than one
    quantization block (64 inputs) can be repacked into at all."""
    from bitsandbytes.nn import Linear4bit

    for layer in module.modules():
        if isinstance(layer, Linear4bit):
            layer.support_avx512bf16_for_cpu = False
    return module


def leave_out_of_state_dict(module: torch.nn.Module) -> torch.nn.Module:
    """``module``'s state dict (what verl's checkpoints save and resume) without its 4-bit weights and their
    quantization state, and loading one without them complete: the frozen base is quantized again from the model path
    at every start (deterministically), so a checkpoint holds the adapters, the full-precision weights and nothing a
    resume could not rebuild. ``state_dict()`` of a submodule (verl's first weight sync) still has them all."""
    names = quantized_parameter_names(module)

    def is_quantized(name: str) -> bool:
        return name in names or is_quant_state(name)

    def drop(_module, state, prefix, _metadata):
        for name in [name for name in state if name.startswith(prefix) and is_quantized(name[len(prefix) :])]:
            del state[name]

    def complete(_module, incompatible):
        incompatible.missing_keys[:] = [name for name in incompatible.missing_keys if not is_quantized(name)]

    module.register_state_dict_post_hook(drop)
    module.register_load_state_dict_post_hook(complete)
    return module


def is_quant_state(name: str) -> bool:
    """Whether a state-dict name is bitsandbytes' quantization state of a 4-bit weight (``...weight.absmax``)."""
    return any(part in name for part in QUANT_STATE_PARTS)

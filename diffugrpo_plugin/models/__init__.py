"""Checkpoints as diffusion LMs: loading (:mod:`.dlm`), model families and their detection, weight fit, the fused
head's autograd kernels (:mod:`.kernels`), LoRA, our native Dream/LLaDA, the memory-lean MLP, and the tiny models
and tokenizer built in code.

``from diffugrpo_plugin.models import X`` still works for the names the module ``diffugrpo_plugin.models`` had
before it became a package, when its code moved to :mod:`.dlm`; they are loaded when first asked for.
"""

from __future__ import annotations

import importlib
from typing import Any

_FROM_DLM = (
    "DiffusionLM",
    "LoadPlan",
    "ModelConfigError",
    "align_logits",
    "load_diffusion_lm",
    "load_model_config",
    "load_pretrained",
    "plan_loading",
    "position_ids_from_mask",
    "read_model_config",
    "remote_classes",
    "is_hub_id",
    "planned_meta_model",
    "refuse_unloaded_weights",
    "resolve_mask_token",
    "supports_attention",
    "tokenizer_without_remote_code",
)


def __getattr__(name: str) -> Any:
    if name in _FROM_DLM:
        return getattr(importlib.import_module(f"{__name__}.dlm"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""The built-in samplers, registered through the same plugin hook a third party uses."""

from __future__ import annotations

import diffugrpo_plugin
from diffugrpo_plugin.sampling.samplers import (
    BlockDiffusionSampler,
    DreamSampler,
    EntropySampler,
    LLaDASampler,
    MaskGitPlusSampler,
    OriginSampler,
    TopKMarginSampler,
)


@diffugrpo_plugin.hookimpl
def diffugrpo_samplers() -> dict[str, type]:
    """Name -> factory; each factory is the sampler's option class."""
    return {
        "dream": DreamSampler,
        "entropy": EntropySampler,
        "maskgit_plus": MaskGitPlusSampler,
        "topk_margin": TopKMarginSampler,
        "origin": OriginSampler,
        "llada": LLaDASampler,
        "block": BlockDiffusionSampler,
    }

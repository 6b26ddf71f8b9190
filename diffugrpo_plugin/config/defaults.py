"""The defaults of the diffusion training pass (``actor_rollout_ref.model.diffusion``), written once.

The packaged config reads them (``${diffugrpo.default:chunk_rows}``), and so do the engine, the trainer, the rollout,
preflight, the memory model and the log-prob functions' own defaults. ``tests/test_defaults_once.py`` fails where one of
these values is written again as a literal. The sampler's options keep their defaults on the option objects
(``sampling/samplers.py``), the masker's on the masker (``core/masking.py``): each is a plugin's own.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class DiffusionDefaults:
    """``actor_rollout_ref.model.diffusion``'s defaults (docs/reference/config.md lists them with the yaml)."""

    masker: str = "coupled"  # DiffuCoder's coupled sampling (core/masking.py)
    block_origin: str = "sequence"  # block-diffusion grids start at the sample's first token (SDAR's layout)
    random_masking: bool = True  # fresh masks every step and iteration; false: the reference's fixed seed
    mask_seed: int = 42  # the masks' base seed (each step and iteration derives its own from it)
    record_trace: bool = False  # the rollout records each token's decoding step (trace-reading maskers need it)
    chunk_rows: int = 1024  # the fused head holds at most chunk_rows x vocabulary logits at a time
    lean_mlp: bool = True  # SwiGLU blocks keep 2 of their 4 activations for the backward


DIFFUSION_DEFAULTS = DiffusionDefaults()
DIFFUSION_KEYS = frozenset(field.name for field in fields(DiffusionDefaults))


def diffusion_default(key: str) -> Any:
    """The default of ``actor_rollout_ref.model.diffusion.<key>`` (the ``diffugrpo.default`` config resolver)."""
    if key not in DIFFUSION_KEYS:
        raise KeyError(f"diffugrpo.default knows {sorted(DIFFUSION_KEYS)}, not {key!r}")
    return getattr(DIFFUSION_DEFAULTS, key)


def register_resolver() -> None:
    """Makes ``${diffugrpo.default:KEY}`` resolve in OmegaConf configs (idempotent)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("diffugrpo.default"):
        OmegaConf.register_new_resolver("diffugrpo.default", diffusion_default, use_cache=True)

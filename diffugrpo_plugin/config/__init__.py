"""The Hydra configs (``diffugrpo.yaml`` and ``algorithm/coupled_grpo.yaml``) and what other tools read from them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

TRAINING_CONFIG = Path(__file__).with_name("algorithm") / "coupled_grpo.yaml"


def training_default(key: str) -> Any:
    """A setting of the training default (``algorithm=coupled_grpo``), by its dotted key, so that tools estimating a
    run (``check-model``, the benchmarks) use the value a run would."""
    from omegaconf import OmegaConf

    from diffugrpo_plugin.config.defaults import register_resolver

    register_resolver()
    value = OmegaConf.select(OmegaConf.load(TRAINING_CONFIG), key, throw_on_missing=True)
    if value is None:
        raise KeyError(f"{key} is not set in {TRAINING_CONFIG}")
    return value

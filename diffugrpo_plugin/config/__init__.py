"""The Hydra configs (``diffugrpo.yaml``, ``algorithm/`` and ``job/cpu_demo.yaml``) and what other tools read from them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ALGORITHM_CONFIG = Path(__file__).with_name("algorithm") / "coupled_grpo.yaml"
DEFAULT_JOB_CONFIG = Path(__file__).with_name("job") / "cpu_demo.yaml"


def training_default(key: str) -> Any:
    """A setting of the default job (``algorithm=coupled_grpo`` with ``job=cpu_demo`` over it), by its dotted key, so
    that the tools beside training (the CLIs' defaults, ``check-model``, the warm start, the benchmarks) use the
    value a run of it would."""
    from omegaconf import OmegaConf

    from diffugrpo_plugin.config.defaults import register_resolver

    register_resolver()
    job = OmegaConf.merge(OmegaConf.load(ALGORITHM_CONFIG), OmegaConf.load(DEFAULT_JOB_CONFIG))
    value = OmegaConf.select(job, key, throw_on_missing=True)
    if value is None:
        raise KeyError(f"{key} is not set in {ALGORITHM_CONFIG} or {DEFAULT_JOB_CONFIG}")
    return value

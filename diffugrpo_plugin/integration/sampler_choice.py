"""Which sampler the rollout runs, from the config: the driver's start-up line, the preflight and the rollout
resolve ``engine_kwargs.diffusion`` the same way (:func:`diffugrpo_plugin.sampling.fast_path.resolve_sampler`)."""

from __future__ import annotations

import json
import os


def is_default_model(path: str | None) -> bool:
    """Whether ``path`` is the tiny default model (the only one the sampler's fast path was measured on)."""
    from diffugrpo_plugin.training.warm_start import warm_model_dir

    return bool(path) and os.path.realpath(os.path.expanduser(str(path))) == os.path.realpath(warm_model_dir())


def family_sampler(config) -> str:
    """The sampler ``sampler: auto`` means for the configured model: its family's ``default_sampler``. The family is
    ``diffusion.family``, else the one a local checkpoint's ``config.json`` names; a hub id not yet downloaded, or a
    config no family matches (the model check says which), counts as a full-canvas model here, and the rollout,
    which loads the model, resolves ``auto`` again."""
    from diffugrpo_plugin.models.detection import detect_family, family_named

    model = config.actor_rollout_ref.model
    default = "entropy"
    named = (model.get("diffusion") or {}).get("family")
    try:
        if named:
            return family_named(str(named)).default_sampler
        path = model.get("path")
        stored = os.path.join(os.path.expanduser(str(path)), "config.json") if path else ""
        if is_default_model(path) or not os.path.isfile(stored):
            return default
        with open(stored) as handle:
            return detect_family(json.load(handle)).default_sampler
    except (OSError, ValueError):  # ModelConfigError is a ValueError
        return default


def sampler_choice(config) -> tuple[str, dict, str]:
    """The rollout's sampler name (``auto`` resolved), its settings with ``fast_path`` resolved, and the phrase
    saying which it runs (:func:`~diffugrpo_plugin.sampling.fast_path.resolve_sampler`), from the whole config."""
    from diffugrpo_plugin.sampling.fast_path import resolve_sampler

    settings = dict((config.actor_rollout_ref.rollout.get("engine_kwargs", {}) or {}).get("diffusion", {}) or {})
    return resolve_sampler(
        settings, family_sampler(config), is_default_model(config.actor_rollout_ref.model.get("path"))
    )

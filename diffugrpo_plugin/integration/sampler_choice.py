"""Which sampler the rollout runs, from the config: the driver's start-up line, the preflight and the rollout
resolve ``engine_kwargs.diffusion.fast_path`` the same way (:mod:`diffugrpo_plugin.sampling.fast_path`)."""

from __future__ import annotations

import os


def is_default_model(path: str | None) -> bool:
    """Whether ``path`` is the tiny default model (the only one the sampler's fast path was measured on)."""
    from diffugrpo_plugin.training.warm_start import warm_model_dir

    return bool(path) and os.path.realpath(os.path.expanduser(str(path))) == os.path.realpath(warm_model_dir())


def sampler_choice(config) -> tuple[str, dict, str]:
    """The rollout's sampler name, its settings with ``fast_path`` resolved, and the phrase saying which it runs
    (:func:`~diffugrpo_plugin.sampling.fast_path.resolve_fast_path`), from the whole config."""
    from diffugrpo_plugin.sampling.fast_path import resolve_fast_path

    settings = dict((config.actor_rollout_ref.rollout.get("engine_kwargs", {}) or {}).get("diffusion", {}) or {})
    name = settings.pop("sampler", "entropy")
    settings, phrase = resolve_fast_path(settings, is_default_model(config.actor_rollout_ref.model.get("path")))
    return name, settings, phrase

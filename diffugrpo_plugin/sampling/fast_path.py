"""Which sampler the rollout runs: the reference loop, or the approximate fast path (no torch import).

The fast path's approximate levers (a prefix KV cache refreshed every 2 forwards, every position above 0.99
unmasked at once) kept the task reward on the tiny default model (docs/guides/samplers.md), and that is all they
were measured on. So ``engine_kwargs.diffusion.fast_path: auto`` turns them on for the tiny default only; any other
checkpoint samples as the family's reference code does until the user opts in with ``fast_path=true``. A lever set
explicitly (``kv_cache``, ``cache_refresh``, ``threshold`` not null) is kept whatever ``fast_path`` says. The exact
levers (``compact``, ``reuse_logits``, ``head_on_masked``: outputs unchanged, tested bit for bit) are not part of
this choice.
"""

from __future__ import annotations

from typing import Any

from diffugrpo_plugin.sampling.contract import SamplerOptionError

FAST_PATH_LEVERS = {"kv_cache": True, "cache_refresh": 2, "threshold": 0.99}
REFERENCE_LEVERS = {"kv_cache": False, "cache_refresh": None, "threshold": None}
FAST_PATH_CHOICES = ("auto", True, False)


def resolve_fast_path(settings: dict[str, Any], tiny_default: bool) -> tuple[dict[str, Any], str]:
    """The sampler settings with ``fast_path`` resolved into the levers left null, and a phrase saying which
    sampler that is (for the start-up line).

    ``settings``: ``engine_kwargs.diffusion`` without ``sampler``; ``tiny_default``: the model is the tiny default.
    """
    settings = dict(settings)
    choice = settings.pop("fast_path", "auto")
    if choice not in FAST_PATH_CHOICES:
        raise SamplerOptionError(
            f"actor_rollout_ref.rollout.engine_kwargs.diffusion.fast_path={choice!r} is invalid: use auto, true or false"
        )
    fast = tiny_default if choice == "auto" else choice
    levers = FAST_PATH_LEVERS if fast else REFERENCE_LEVERS
    explicit = {key: settings[key] for key in levers if settings.get(key) is not None}
    for key, value in levers.items():
        if settings.get(key) is None:
            settings[key] = value
    if settings.get("cache_refresh") is not None and "cache_refresh" not in explicit:
        # the fast path's refresh belongs to its cache: a cache turned off explicitly takes it along
        if not (settings.get("kv_cache") or settings.get("dual_cache")):
            settings["cache_refresh"] = None
    resolved = {key: settings[key] for key in levers}
    why = "the tiny default model" if choice == "auto" and fast else "fast_path=true"
    if not fast:
        why = "fast_path=false" if choice is False else "not the tiny default model; fast_path=true opts in"
    if resolved == FAST_PATH_LEVERS:
        phrase = f"fast path (prefix cache refreshed every 2 forwards, threshold 0.99; approximate) for {why}"
    elif resolved == REFERENCE_LEVERS:
        phrase = f"reference sampler (no prefix cache, no threshold) for {why}"
    else:
        shown = ", ".join(f"{key}={value}" for key, value in resolved.items())
        phrase = f"{shown} ({', '.join(sorted(explicit))} set explicitly; the rest from fast_path for {why})"
    return settings, phrase

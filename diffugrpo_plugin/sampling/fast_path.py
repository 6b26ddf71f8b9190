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

from functools import cache
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


SAMPLER_AUTO = "auto"
BLOCK_ONLY = ("block_origin",)  # the block grid: nothing to a sampler that decodes without blocks
SETTINGS_KEY = "actor_rollout_ref.rollout.engine_kwargs.diffusion"


@cache
def shipped_settings() -> dict[str, Any]:
    """``engine_kwargs.diffusion`` as the shipped config sets it (written for the full-canvas samplers)."""
    from omegaconf import OmegaConf

    from diffugrpo_plugin.config import training_default

    return OmegaConf.to_container(training_default(SETTINGS_KEY), resolve=False)


def takes_fast_path(name: str) -> bool:
    """Whether the sampler registered as ``name`` takes the fast path's levers: a full-canvas sampler (the loop of
    :mod:`diffugrpo_plugin.sampling.denoising`, or a plugin's with the same options)."""
    from diffugrpo_plugin.plugins import factory_options, lookup

    return set(FAST_PATH_LEVERS) <= {option.name for option in factory_options(lookup("sampler", name).obj)}


def resolve_sampler(
    settings: dict[str, Any], family_sampler: str, tiny_default: bool
) -> tuple[str, dict[str, Any], str]:
    """The sampler the rollout builds, its options and the start-up phrase, from ``engine_kwargs.diffusion``.

    ``sampler: auto`` is the model family's (``family_sampler``: ``entropy``, or ``block`` for SDAR / LLaDA2).
    A sampler that takes the fast path's levers gets :func:`resolve_fast_path`'s settings. One that does not (the
    ``block`` sampler: exact, no fast path) is handed only what was set for it: a value the shipped config holds
    (written for the full-canvas samplers: ``steps: 32`` counts forwards over the whole completion) leaves the
    option at the sampler's own default, any other value of an option it does not take is refused, and so is
    ``fast_path=true``. ``block_origin`` reaches only the samplers that take it.
    """
    import inspect

    from diffugrpo_plugin.plugins import factory_options, lookup

    settings = dict(settings)
    name = settings.pop("sampler", SAMPLER_AUTO) or SAMPLER_AUTO
    if name == SAMPLER_AUTO:
        name = family_sampler
    factory = lookup("sampler", name).obj
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in inspect.signature(factory).parameters.values()):
        return name, *resolve_fast_path(settings, tiny_default)
    accepted = {option.name for option in factory_options(factory)}
    for option in BLOCK_ONLY:
        if option not in accepted:
            settings.pop(option, None)
    if takes_fast_path(name):
        return name, *resolve_fast_path(settings, tiny_default)
    if settings.get("fast_path", "auto") is True:
        raise SamplerOptionError(
            f"{SETTINGS_KEY}.fast_path=true: the {name} sampler has no fast path (its levers "
            f"{', '.join(FAST_PATH_LEVERS)} are the full-canvas samplers'); set fast_path=auto or false"
        )
    settings.pop("fast_path", None)
    shipped = shipped_settings()
    kept = {}
    for option, value in settings.items():
        if option in shipped and value == shipped[option]:
            continue
        if option not in accepted:
            raise SamplerOptionError(
                f"{SETTINGS_KEY}.{option}={value!r}: sampler '{name}' has no option {option} (its options: "
                f"{', '.join(sorted(accepted))}); remove it"
            )
        kept[option] = value
    shown = ", ".join(f"{option}={value}" for option, value in sorted(kept.items())) or "its defaults"
    return name, kept, f"exact, no fast path ({shown}; the rest its own defaults)"

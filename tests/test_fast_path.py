"""Which sampler the rollout runs: the fast path for the tiny default only, the reference sampler otherwise."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_module

from diffugrpo_plugin.integration.resolvers import default_model
from diffugrpo_plugin.integration.sampler_choice import is_default_model, sampler_choice
from diffugrpo_plugin.sampling import SamplerOptionError, build_sampler
from diffugrpo_plugin.sampling.fast_path import resolve_fast_path

NULL_LEVERS = {"kv_cache": None, "cache_refresh": None, "threshold": None, "compact": True}


def levers(settings: dict) -> tuple:
    return settings["kv_cache"], settings["cache_refresh"], settings["threshold"]


@pytest.mark.parametrize(
    "choice, tiny, want, phrase",
    [
        (
            "auto",
            True,
            (True, 2, 0.99),
            "fast path (prefix cache refreshed every 2 forwards, threshold 0.99; "
            "approximate) for the tiny default model",
        ),
        (
            "auto",
            False,
            (False, None, None),
            "reference sampler (no prefix cache, no threshold) for not the tiny default model; fast_path=true opts in",
        ),
        (True, False, (True, 2, 0.99), "for fast_path=true"),
        (False, True, (False, None, None), "reference sampler (no prefix cache, no threshold) for fast_path=false"),
    ],
)
def test_fast_path_fills_the_levers_left_null(choice, tiny, want, phrase):
    settings, said = resolve_fast_path({**NULL_LEVERS, "fast_path": choice}, tiny_default=tiny)
    assert levers(settings) == want and "fast_path" not in settings and settings["compact"] is True
    assert phrase in said
    build_sampler("entropy", **settings)  # every resolution is a valid sampler


def test_a_lever_set_explicitly_wins_and_a_cache_turned_off_takes_its_refresh_along():
    settings, said = resolve_fast_path({**NULL_LEVERS, "threshold": 0.9}, tiny_default=False)
    assert levers(settings) == (False, None, 0.9)
    assert said == (
        "kv_cache=False, cache_refresh=None, threshold=0.9 (threshold set explicitly; the rest from fast_path for "
        "not the tiny default model; fast_path=true opts in)"
    )
    settings, _ = resolve_fast_path({**NULL_LEVERS, "fast_path": True, "kv_cache": False}, tiny_default=False)
    assert levers(settings) == (False, None, 0.99)
    build_sampler("entropy", **settings)


def test_an_unknown_fast_path_value_names_the_key():
    with pytest.raises(SamplerOptionError, match=r"engine_kwargs\.diffusion\.fast_path='yes' is invalid: use auto"):
        resolve_fast_path({"fast_path": "yes"}, tiny_default=True)


def test_only_the_tiny_default_path_counts_as_the_tiny_default(tmp_path):
    assert is_default_model(default_model()) and is_default_model(default_model() + "/")
    assert not is_default_model(str(tmp_path)) and not is_default_model(None)


def composed(*overrides: str):
    with initialize_config_module(config_module="diffugrpo_plugin.config", version_base=None):
        return compose(config_name="diffugrpo", overrides=list(overrides))


def test_the_default_config_says_which_sampler_runs():
    name, settings, phrase = sampler_choice(composed())
    assert name == "entropy" and levers(settings) == (True, 2, 0.99) and phrase.startswith("fast path")
    name, settings, phrase = sampler_choice(composed("actor_rollout_ref.model.path=/models/dream-7b"))
    assert levers(settings) == (False, None, None) and phrase.startswith("reference sampler")

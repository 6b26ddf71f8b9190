"""Block-diffusion misconfigurations stop in the preflight, before Ray starts, each with one line naming the key;
the rollout's block grid and sampler follow the model's unless set otherwise."""

from __future__ import annotations

import re

import pytest

from diffugrpo_plugin.integration.preflight import ConfigError, check_config
from diffugrpo_plugin.integration.sampler_choice import sampler_choice
from diffugrpo_plugin.models.tiny import TinySpec, save_tiny_model
from test_preflight import composed

pytestmark = pytest.mark.sandbox  # the preflight's reward check runs code in the sandbox

ROLLOUT = "actor_rollout_ref.rollout.engine_kwargs.diffusion"
MODEL = "actor_rollout_ref.model.diffusion"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from diffugrpo_plugin.data import prepare_to_parquet

    folder = tmp_path_factory.mktemp("data")
    prepare_to_parquet("synthetic", ["train", "validation"], folder)
    return [f"data.train_files={folder}/train.parquet", f"data.val_files={folder}/validation.parquet"]


@pytest.fixture(scope="module")
def sdar(tmp_path_factory, data):
    """A tiny SDAR-style checkpoint (blocks of 4) and the data: a valid block-diffusion job's overrides."""
    spec = TinySpec(family="sdar", hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2, intermediate_size=64)
    return [f"actor_rollout_ref.model.path={save_tiny_model(tmp_path_factory.mktemp('sdar') / 'sdar', spec)}", *data]


def test_the_default_config_samples_a_block_model_block_by_block_on_the_trained_grid(sdar):
    config = composed(*sdar, f"{MODEL}.block_origin=response")
    check_config(config)
    name, settings, phrase = sampler_choice(config)
    # steps: 32 and the fast path's levers are the full-canvas samplers' settings: left out, not refused
    assert (name, settings) == ("block", {"block_origin": "response"}), (name, settings)
    assert "exact, no fast path" in phrase


def test_the_default_config_keeps_the_full_canvas_sampler_for_dream(tiny_model_path, data):
    name, settings, _ = sampler_choice(composed(f"actor_rollout_ref.model.path={tiny_model_path}", *data))
    assert name == "entropy" and "block_origin" not in settings and settings["steps"] == 32


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            [f"{ROLLOUT}.block_origin=response"],
            f"{ROLLOUT}.block_origin=response differs from {MODEL}.block_origin=sequence",
        ),
        ([f"{MODEL}.block_origin=global"], f"{MODEL}.block_origin='global': choose sequence or response"),
        ([f"{ROLLOUT}.sampler=entropy"], f"{ROLLOUT}.sampler=entropy decodes the whole canvas"),
        (
            [f"{ROLLOUT}.sampler=llada", f"+{ROLLOUT}.block_length=4"],
            f"{ROLLOUT}.sampler=llada decodes the whole canvas",
        ),
        (
            [f"+{ROLLOUT}.block_size=8"],
            f"{ROLLOUT}.sampler=block: block sampler: option block_size=8 is invalid; the model attends in blocks of 4",
        ),
        ([f"{ROLLOUT}.steps=8"], "block sampler: option steps=8 is invalid; use at most block_size (4)"),
        (
            [f"+{ROLLOUT}.rule=llada2", f"{ROLLOUT}.steps=2"],
            "block sampler: option steps=2 is invalid; the llada2 rule",
        ),
        ([f"{ROLLOUT}.fast_path=true"], f"{ROLLOUT}.fast_path=true: the block sampler has no fast path"),
        ([f"{ROLLOUT}.kv_cache=true"], f"{ROLLOUT}.kv_cache=True: sampler 'block' has no option kv_cache"),
        ([f"{ROLLOUT}.compact=false"], f"{ROLLOUT}.compact=False: sampler 'block' has no option compact"),
        (
            [f"{MODEL}.masker=d1", f"~{MODEL}.masker_kwargs.t_range"],
            "masker 'd1' does not mask per block",
        ),
        (
            [f"{MODEL}.loss_terms={{sft: {{weight: 0.1}}}}"],
            f"score the canvas without the block-diffusion layout, which a sdar model needs: set {MODEL}.loss_terms",
        ),
    ],
)
def test_each_block_mistake_names_its_key(sdar, overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        check_config(composed(*sdar, *overrides))


def test_the_block_sampler_on_a_full_canvas_model_is_refused(tiny_model_path, data):
    with pytest.raises(
        ConfigError, match=r"sampler=block: block sampler: family bidirectional attends over the whole canvas"
    ):
        check_config(composed(f"actor_rollout_ref.model.path={tiny_model_path}", *data, f"{ROLLOUT}.sampler=block"))

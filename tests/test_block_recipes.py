"""examples/sdar_8b and examples/llada2_mini: each published setting on the verl key that carries it."""

from __future__ import annotations

import os

import pytest
from hydra import compose, initialize_config_dir

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def recipe(name: str):
    with initialize_config_dir(config_dir=os.path.join(REPO, "examples", name), version_base=None):
        return compose(config_name=name, overrides=["data.train_files=t.parquet", "data.val_files=v.parquet"])


def carried(job) -> dict:
    model, actor, rollout = job.actor_rollout_ref.model, job.actor_rollout_ref.actor, job.actor_rollout_ref.rollout
    diffusion = rollout.engine_kwargs.diffusion
    return {
        "family, native": (model.diffusion.family, model.diffusion.implementation, model.trust_remote_code),
        "block grid, rollout = training": (model.diffusion.block_origin, diffusion.block_origin),
        "block sampler": (
            diffusion.sampler,
            diffusion.block_size,
            diffusion.steps,
            diffusion.rule,
            diffusion.threshold,
        ),
        "sampling": (rollout.n, rollout.temperature, rollout.top_k, rollout.top_p),
        "prompts a step, lengths": (
            job.data.train_batch_size,
            job.data.max_prompt_length,
            job.data.max_response_length,
        ),
        "clip, kl": ((actor.clip_ratio_low, actor.clip_ratio_high), actor.use_kl_loss, actor.kl_loss_coef),
        "lr": actor.optim.lr,
        "masker": (model.diffusion.masker, model.diffusion.masker_kwargs.p_mask_prompt),
    }


PUBLISHED = {
    # DARE run_bgpo_sdar_8b_chat.sh (lmdeploy: block 4, 4 steps, low_confidence_dynamic 0.9; n 8, temperature 1.0,
    # top_k 50, lr 5e-7, 16 prompts, response 2048); dLLM-RL rl_trado.yaml (prompt 784, clip 0.2, beta 0.01)
    "sdar_8b": {
        "family, native": ("sdar", "native", False),
        "block grid, rollout = training": ("sequence", "sequence"),
        "block sampler": ("block", 4, 4, "dynamic", 0.9),
        "sampling": (8, 1.0, 50, 1.0),
        "prompts a step, lengths": (16, 784, 2048),
        "clip, kl": ((0.2, 0.2), True, 0.01),
        "lr": 5e-7,
        "masker": ("coupled", 0.0),
    },
    # LLaDA2 generate() / SGLang LowConfidence (block 32, threshold 0.95); DARE's LLaDA2-mini runs (temperature 0.6)
    "llada2_mini": {
        "family, native": ("llada2", "native", False),
        "block grid, rollout = training": ("sequence", "sequence"),
        "block sampler": ("block", 32, 32, "llada2", 0.95),
        "sampling": (8, 0.6, -1, 1.0),
        "prompts a step, lengths": (16, 784, 2048),
        "clip, kl": ((0.2, 0.2), True, 0.01),
        "lr": 5e-7,
        "masker": ("coupled", 0.0),
    },
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_block_recipe_carries_the_published_settings(name):
    assert carried(recipe(name)) == PUBLISHED[name]


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_block_recipe_builds_its_block_sampler(name):
    """The recipe's rollout settings, merged with the shipped full-canvas defaults, build the block sampler (the
    shipped kv_cache / compact / steps: 32 are left out, not handed to it)."""
    from diffugrpo_plugin.integration.sampler_choice import sampler_choice
    from diffugrpo_plugin.sampling import build_sampler

    sampler, settings, _ = sampler_choice(recipe(name))
    built = build_sampler(sampler, **settings)
    size = PUBLISHED[name]["block sampler"][1]
    plan = built.plan(PUBLISHED[name]["family, native"][0], size)
    assert (sampler, plan.block_size, plan.rule, plan.block_origin) == (
        "block",
        size,
        PUBLISHED[name]["block sampler"][3],
        "sequence",
    )

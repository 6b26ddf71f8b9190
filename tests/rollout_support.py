"""The diffusion rollout as verl builds it, on a small checkpoint: what the rollout tests share."""

from __future__ import annotations

import pytest


def tiny_rollout(model_path: str, sampler: dict | None = None, **model_settings):
    """Our rollout with verl's config for 8-token completions of 32-token prompts in float32 (seed 7), sampling with
    ``sampler`` (default: the entropy sampler, 8 steps), and our model config for ``model_path`` with SDPA plus
    ``model_settings`` (``trust_remote_code``, ``diffusion``, ``lora``, ...)."""
    from verl.workers.config import RolloutConfig

    from diffugrpo_plugin.integration.engine import DiffusionModelConfig
    from diffugrpo_plugin.integration.rollout import DiffusionRollout

    config = RolloutConfig(
        name="diffusion",
        engine_kwargs={"diffusion": sampler or {"sampler": "entropy", "steps": 8}},
        response_length=8,
        prompt_length=32,
        dtype="float32",
        tensor_model_parallel_size=1,
        seed=7,
    )
    model_config = DiffusionModelConfig(
        path=model_path, model_type="diffusion_lm", override_config={"attn_implementation": "sdpa"}, **model_settings
    )
    return DiffusionRollout(config, model_config, device_mesh=None)


@pytest.fixture
def rollout(tiny_model_path):
    return tiny_rollout(tiny_model_path)


def requests(rollout, texts, temperature=1.0):
    tokenizer = rollout.tokenizer
    return [
        {
            "prompt_ids": tokenizer.encode(text),
            "sampling_params": {"temperature": temperature, "top_p": 1.0, "top_k": -1},
        }
        for text in texts
    ]


class CountingRollout:
    """Stands in for DiffusionRollout in the worker's threads: answers each request with its prompt's length."""

    def __init__(self, fail_with: BaseException | None = None):
        self.fail_with = fail_with
        self.batches = []

    def generate_batch(self, requests):
        if self.fail_with is not None:
            raise self.fail_with
        self.batches.append(len(requests))
        return [
            {
                "token_ids": [len(r["prompt_ids"])],
                "global_steps": 1,
                "generation_batch": "0:1",
                "generation_seconds": 0.0,
            }
            for r in requests
        ]

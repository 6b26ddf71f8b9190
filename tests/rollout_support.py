"""The diffusion rollout as verl builds it, on a small checkpoint: what the rollout tests share."""

from __future__ import annotations


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

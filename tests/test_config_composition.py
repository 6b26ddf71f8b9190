"""The three entry points compose the same job; the DiffuCoder-7B example composes to the recipe; both
spellings of the rewards compose from the command line; the CLIs' completion length is training's."""

from __future__ import annotations

import concurrent.futures
import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir, initialize_config_module
from omegaconf import OmegaConf

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.cache
def composed_job(*args: str) -> str:
    """What ``python <args> --cfg job`` composes (each command line run once per session)."""
    result = subprocess.run([sys.executable, *args, "--cfg", "job"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.slow
def test_the_three_commands_compose_the_same_job():
    commands = [
        ("-m", "diffugrpo_plugin.main"),
        ("-m", "verl.trainer.main", "algorithm=coupled_grpo"),
        ("-m", "verl.trainer.main_ppo", "+algorithm=coupled_grpo", "+job=cpu_demo"),
    ]
    with concurrent.futures.ThreadPoolExecutor(len(commands)) as pool:  # three interpreters importing verl at once
        canonical, through_main, through_main_ppo = pool.map(lambda args: composed_job(*args), commands)
    assert through_main == canonical
    assert through_main_ppo == canonical
    job = OmegaConf.create(canonical)
    assert job.algorithm.adv_estimator == "coupled_grpo"
    assert job.actor_rollout_ref.actor.policy_loss.loss_mode == "coupled_grpo"
    assert job.actor_rollout_ref.model.model_type == "diffusion_lm"
    assert job.actor_rollout_ref.rollout.name == "diffusion"
    assert job.trainer.v1.trainer_mode == "diffugrpo"
    assert job.reward.reward_manager.name == "diffugrpo"


def diffucoder_recipe(job) -> dict:
    """DiffuCoder's coupled-GRPO hyper-parameters (apple/ml-diffucoder, config_coupled_code.yaml), each as
    (what ``job`` composes, the reference's value)."""
    actor, rollout = job.actor_rollout_ref.actor, job.actor_rollout_ref.rollout
    diffusion = rollout.engine_kwargs.diffusion
    return {
        "learning rate": (actor.optim.lr, 1e-6),
        "cosine schedule down to 0.1": ((actor.optim.lr_scheduler_type, actor.optim.min_lr_ratio), ("cosine", 0.1)),
        "beta": (actor.kl_loss_coef, 0.01),
        "epsilon low/high": ((actor.clip_ratio_low, actor.clip_ratio_high), (0.5, 0.5)),
        "num_generations": (rollout.n, 10),
        "num_iterations": (actor.ppo_epochs, 2),
        "diffusion_steps": (diffusion.steps, 256),
        "effective top_k (diffusion_generate without top_k)": (rollout.top_k, 50),
        "mask token not suppressed": (diffusion.suppress_mask_token, False),
        "completions per optimizer step": (actor.ppo_mini_batch_size * rollout.n, 5 * 2 * 8),
        "max prompt / completion": ((job.data.max_prompt_length, job.data.max_response_length), (200, 256)),
        "adam betas": (list(actor.optim.betas), [0.9, 0.99]),
        "weight decay": (actor.optim.weight_decay, 0.1),
        "max grad norm": (actor.optim.clip_grad, 0.2),
        "ref model sync": (
            (job.diffugrpo.ref_sync.enable, job.diffugrpo.ref_sync.steps, job.diffugrpo.ref_sync.alpha),
            (True, 64, 0.6),
        ),
        "gradient checkpointing": (job.actor_rollout_ref.model.enable_gradient_checkpointing, True),
        "bf16 weights in the passes": (
            (actor.fsdp_config.mixed_precision.param_dtype, rollout.dtype),
            ("bf16", "bfloat16"),
        ),
        "greedy validation, one per task": (
            (rollout.val_kwargs.n, rollout.val_kwargs.temperature, rollout.val_kwargs.do_sample),
            (1, 0.0, False),
        ),
    }


def test_diffucoder_7b_example_composes_to_the_reference_recipe():
    with initialize_config_dir(config_dir=os.path.join(REPO, "examples", "diffucoder_7b"), version_base=None):
        job = compose(config_name="diffucoder_7b", overrides=["data.train_files=t.parquet", "data.val_files=v.parquet"])
    recipe = diffucoder_recipe(job) | {
        "model": (job.actor_rollout_ref.model.path, "apple/DiffuCoder-7B-Instruct"),
        "sampler": (job.actor_rollout_ref.rollout.engine_kwargs.diffusion.sampler, "entropy"),
        "family, loaded without remote code": (
            (job.actor_rollout_ref.model.diffusion.family, job.actor_rollout_ref.model.trust_remote_code),
            ("dream", False),
        ),
        "rewards": (list(job.diffugrpo.rewards.reward_funcs), ["code", "code_format"]),
        "reward weights": (list(job.diffugrpo.rewards.reward_weights), [2.0, 0.5]),
        "GPUs": (job.trainer.n_gpus_per_node * job.trainer.nnodes, 8),
    }
    wrong = {name: got for name, (got, want) in recipe.items() if got != want}
    assert not wrong, wrong


def test_the_algorithm_config_without_the_cpu_demo_is_the_reference_recipe():
    """``~job`` leaves coupled_grpo's own config: the recipe, with no CPU switch and no tiny default in it."""
    with initialize_config_module(config_module="diffugrpo_plugin.config", version_base=None):
        job = compose(config_name="diffugrpo", overrides=["~job"])
    wrong = {name: got for name, (got, want) in diffucoder_recipe(job).items() if got != want}
    assert not wrong, wrong
    algorithm_files = sorted((Path(REPO) / "diffugrpo_plugin" / "config" / "algorithm").glob("*.yaml"))
    for text in (path.read_text() for path in algorithm_files):
        assert "diffugrpo.on_cpu" not in text and "diffugrpo.default_model" not in text
        assert "diffugrpo.default_data" not in text


def test_a_run_without_the_demo_that_names_no_model_stops_with_the_override_to_add():
    result = subprocess.run(
        [sys.executable, "-m", "diffugrpo_plugin.main", "~job"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode != 0
    assert "actor_rollout_ref.model.path is not set: add actor_rollout_ref.model.path=..." in result.stderr
    assert "Traceback" not in result.stderr, result.stderr[-2000:]


def test_llada_8b_example_names_the_family_and_llada_generation():
    with initialize_config_dir(config_dir=os.path.join(REPO, "examples", "llada_8b"), version_base=None):
        job = compose(config_name="llada_8b", overrides=["data.train_files=t.parquet", "data.val_files=v.parquet"])
    model, rollout = job.actor_rollout_ref.model, job.actor_rollout_ref.rollout
    diffusion = rollout.engine_kwargs.diffusion
    expected = {
        "model": (model.path, "GSAI-ML/LLaDA-8B-Instruct"),
        "family and loading": (
            (model.diffusion.family, model.diffusion.implementation, model.trust_remote_code),
            ("llada", "native", False),
        ),
        "mask id and shift": ((model.diffusion.mask_token_id, model.diffusion.logits_shift), (126336, False)),
        "sampler": (
            (diffusion.sampler, diffusion.remasking, diffusion.block_length, diffusion.steps),
            ("llada", "low_confidence", 32, 128),
        ),
        "no top-k (LLaDA's generate has none)": ((rollout.top_k, rollout.val_kwargs.top_k), (-1, -1)),
        "completion length": (job.data.max_response_length, 256),
        "greedy validation, one per task": (
            (rollout.val_kwargs.n, rollout.val_kwargs.temperature, rollout.val_kwargs.do_sample),
            (1, 0.0, False),
        ),
    }
    wrong = {name: got for name, (got, want) in expected.items() if got != want}
    assert not wrong, wrong


def composed_rewards(*overrides: str) -> dict:
    """``diffugrpo.rewards`` of the default job composed with ``overrides``, as the reward workers read it."""
    with initialize_config_module(config_module="diffugrpo_plugin.config", version_base=None):
        job = compose(config_name="diffugrpo", overrides=list(overrides))
    return OmegaConf.to_container(job.diffugrpo.rewards, resolve=True)


@pytest.mark.sandbox
@pytest.mark.parametrize(
    "overrides, weights",
    [
        ((), {"code": 2.0, "code_format": 0.5}),  # DiffuCoder's
        (("diffugrpo.rewards.reward_funcs={code: 1.0}",), {"code": 1.0}),
        (("diffugrpo.rewards.reward_funcs={syntax: 0.5, code: 3.0}",), {"syntax": 0.5, "code": 3.0}),
        (
            ("diffugrpo.rewards.reward_funcs=[code,syntax]", "diffugrpo.rewards.reward_weights=[2.0,0.5]"),
            {"code": 2.0, "syntax": 0.5},
        ),
        (("diffugrpo.rewards.reward_funcs=[code_format]",), {"code_format": 1.0}),
    ],
)
def test_either_spelling_of_the_rewards_composes_on_the_command_line(overrides, weights):
    from diffugrpo_plugin.rewards.spec import RewardSpec

    assert RewardSpec.from_config(composed_rewards(*overrides)).weights == weights


def test_an_unknown_reward_on_the_command_line_is_named_with_the_known_ones():
    from diffugrpo_plugin.plugins import PluginError
    from diffugrpo_plugin.rewards.spec import RewardSpec

    with pytest.raises(
        PluginError,
        match=r"^unknown reward 'nope'\. Known rewards: code \(diffugrpo [^)]*\), "
        r"code_format \(diffugrpo [^)]*\), ",
    ):
        RewardSpec.from_config(composed_rewards("diffugrpo.rewards.reward_funcs=[nope]"))


def test_generate_eval_and_training_agree_on_the_completion_length():
    import argparse

    from diffugrpo_plugin.cli import evaluate, generate
    from diffugrpo_plugin.cli.model_flags import DEFAULT_MAX_NEW_TOKENS
    from diffugrpo_plugin.training.warm_start import WarmStart

    job = OmegaConf.create(composed_job("-m", "diffugrpo_plugin.main"))
    parser = argparse.ArgumentParser()
    generate.add_parser(parser.add_subparsers(dest="command"))
    generated = parser.parse_args(["generate", "--prompt", "x"]).max_new_tokens
    assert (
        job.data.max_response_length,
        generated,
        evaluate.DEFAULTS["max_new_tokens"],
        WarmStart().completion_length,
    ) == (DEFAULT_MAX_NEW_TOKENS,) * 4


@pytest.mark.sandbox
def test_a_mapping_in_a_users_config_file_replaces_the_default(tmp_path):
    from diffugrpo_plugin.rewards.spec import RewardSpec

    (tmp_path / "mine.yaml").write_text(
        "hydra:\n  searchpath:\n    - pkg://verl.trainer.config\n    - pkg://diffugrpo_plugin.config\n"
        "defaults:\n  - ppo_trainer\n  - algorithm: coupled_grpo\n  - _self_\n"
        "diffugrpo:\n  rewards:\n    reward_funcs: {code: 1.0}\n"
    )
    with initialize_config_dir(config_dir=str(tmp_path), version_base=None):
        job = compose(config_name="mine")
    rewards = OmegaConf.to_container(job.diffugrpo.rewards, resolve=True)
    assert RewardSpec.from_config(rewards).weights == {"code": 1.0}  # replaced, not merged with code_format


def test_d1_example_carries_d1s_recipe_key_by_key():
    """examples/d1_llada: each of d1's train.yaml settings (dllm-reasoning/d1) on the verl key that carries it."""
    with initialize_config_dir(config_dir=os.path.join(REPO, "examples", "d1_llada"), version_base=None):
        job = compose(config_name="d1_llada", overrides=["data.train_files=t.parquet", "data.val_files=v.parquet"])
    model, actor, rollout = job.actor_rollout_ref.model, job.actor_rollout_ref.actor, job.actor_rollout_ref.rollout
    diffusion = rollout.engine_kwargs.diffusion
    from diffugrpo_plugin.plugins import build

    masker = build("masker", model.diffusion.masker, dict(model.diffusion.masker_kwargs or {}))  # as the engine does
    d1 = {
        "lora_r, lora_alpha, lora_dropout": ((model.lora_rank, model.lora_alpha, model.lora.dropout), (128, 64, 0.05)),
        "LoraConfig target_modules": (
            list(model.target_modules),
            ["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj", "gate_proj"],
        ),
        "masker, p_mask_prompt, random_masking": (
            (model.diffusion.masker, masker.p_mask_prompt, model.diffusion.random_masking),
            ("d1", 0.15, True),
        ),
        "num_iterations": (actor.ppo_epochs, 12),
        "epsilon": ((actor.clip_ratio, actor.clip_ratio_low, actor.clip_ratio_high), (0.5, 0.5, 0.5)),
        "beta": ((actor.use_kl_loss, actor.kl_loss_coef), (True, 0.04)),
        "learning rate, constant with warmup": (
            (actor.optim.lr, actor.optim.lr_scheduler_type, actor.optim.lr_warmup_steps_ratio),
            (3e-6, "constant", 1e-4),
        ),
        "adam betas, weight decay, max grad norm": (
            (list(actor.optim.betas), actor.optim.weight_decay, actor.optim.clip_grad),
            ([0.9, 0.99], 0.1, 0.2),
        ),
        "per device batch 6, accumulation 2, 8 GPUs": (
            (actor.ppo_micro_batch_size_per_gpu, actor.ppo_mini_batch_size, job.trainer.n_gpus_per_node),
            (6, 16, 8),
        ),
        "num_generations, temperature": ((rollout.n, rollout.temperature), (6, 0.9)),
        "generation": (
            (
                diffusion.sampler,
                diffusion.remasking,
                diffusion.block_length,
                diffusion.steps,
                diffusion.micro_batch_size,
            ),
            ("llada", "low_confidence", 32, 128, 6),
        ),
        "lengths": ((job.data.max_prompt_length, job.data.max_response_length), (200, 256)),
        # fp32 storage: verl casts new adapters to it, and bf16 adapters would round d1's updates away
        # d1 checkpoints nothing on its 4-bit base; on an fp32 base the step fits 80 GB only with checkpointing
        "gradient checkpointing on, bf16 compute": (
            (
                model.enable_gradient_checkpointing,
                actor.fsdp_config.model_dtype,
                actor.fsdp_config.mixed_precision.param_dtype,
            ),
            (True, "fp32", "bf16"),
        ),
        "reference: the base without adapters": (job.diffugrpo.ref_sync.enable, False),
    }
    wrong = {name: got for name, (got, want) in d1.items() if got != want}
    assert not wrong, wrong
    # 16 prompts x 6 completions over 8 GPUs divide into micro-batches of 6: the pre-flight's batch checks pass
    from diffugrpo_plugin.integration.preflight import _check_batch_sizes, _check_lora_keys

    _check_batch_sizes(job)
    _check_lora_keys(job)

"""The three entry points compose the same job; the DiffuCoder-7B example composes to the recipe."""

from __future__ import annotations

import os
import subprocess
import sys

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def composed_job(*args: str) -> str:
    result = subprocess.run([sys.executable, *args, "--cfg", "job"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_three_commands_compose_the_same_job():
    canonical = composed_job("-m", "diffugrpo_plugin.main")
    assert composed_job("-m", "verl.trainer.main", "algorithm=coupled_grpo") == canonical
    assert composed_job("-m", "verl.trainer.main_ppo", "+algorithm=coupled_grpo") == canonical
    job = OmegaConf.create(canonical)
    assert job.algorithm.adv_estimator == "coupled_grpo"
    assert job.actor_rollout_ref.actor.policy_loss.loss_mode == "coupled_grpo"
    assert job.actor_rollout_ref.model.model_type == "diffusion_lm"
    assert job.actor_rollout_ref.rollout.name == "diffusion"
    assert job.trainer.v1.trainer_mode == "diffugrpo"
    assert job.reward.reward_manager.name == "diffugrpo"


def test_diffucoder_7b_example_composes_to_the_reference_recipe():
    with initialize_config_dir(config_dir=os.path.join(REPO, "examples", "diffucoder_7b"), version_base=None):
        job = compose(config_name="diffucoder_7b", overrides=["data.train_files=t.parquet", "data.val_files=v.parquet"])
    actor, rollout = job.actor_rollout_ref.actor, job.actor_rollout_ref.rollout
    diffusion = rollout.engine_kwargs.diffusion
    recipe = {
        "model": (job.actor_rollout_ref.model.path, "apple/DiffuCoder-7B-Instruct"),
        "learning rate": (actor.optim.lr, 1e-6),
        "beta": (actor.kl_loss_coef, 0.01),
        "epsilon low/high": ((actor.clip_ratio_low, actor.clip_ratio_high), (0.5, 0.5)),
        "num_generations": (rollout.n, 10),
        "num_iterations": (actor.ppo_epochs, 2),
        "diffusion_steps": (diffusion.steps, 256),
        "sampler": (diffusion.sampler, "entropy"),
        "effective top_k (diffusion_generate without top_k)": (rollout.top_k, 50),
        "mask token not suppressed": (diffusion.suppress_mask_token, False),
        "family, loaded without remote code": ((job.actor_rollout_ref.model.diffusion.family,
                                                job.actor_rollout_ref.model.trust_remote_code), ("dream", False)),
        "rewards": (list(job.diffugrpo.rewards.reward_funcs), ["code", "code_format"]),
        "reward weights": (list(job.diffugrpo.rewards.reward_weights), [2.0, 0.5]),
        "completions per optimizer step": (actor.ppo_mini_batch_size * rollout.n, 5 * 2 * 8),
        "max prompt / completion": ((job.data.max_prompt_length, job.data.max_response_length), (200, 256)),
        "adam betas": (list(actor.optim.betas), [0.9, 0.99]),
        "weight decay": (actor.optim.weight_decay, 0.1),
        "max grad norm": (actor.optim.clip_grad, 0.2),
        "ref model sync": ((job.diffugrpo.ref_sync.enable, job.diffugrpo.ref_sync.steps,
                            job.diffugrpo.ref_sync.alpha), (True, 64, 0.6)),
        "gradient checkpointing": (job.actor_rollout_ref.model.enable_gradient_checkpointing, True),
        "GPUs": (job.trainer.n_gpus_per_node * job.trainer.nnodes, 8),
    }
    wrong = {name: got for name, (got, want) in recipe.items() if got != want}
    assert not wrong, wrong


def test_llada_8b_example_names_the_family_and_llada_generation():
    with initialize_config_dir(config_dir=os.path.join(REPO, "examples", "llada_8b"), version_base=None):
        job = compose(config_name="llada_8b", overrides=["data.train_files=t.parquet", "data.val_files=v.parquet"])
    model, rollout = job.actor_rollout_ref.model, job.actor_rollout_ref.rollout
    diffusion = rollout.engine_kwargs.diffusion
    expected = {
        "model": (model.path, "GSAI-ML/LLaDA-8B-Instruct"),
        "family and loading": ((model.diffusion.family, model.diffusion.implementation, model.trust_remote_code),
                               ("llada", "native", False)),
        "mask id and shift": ((model.diffusion.mask_token_id, model.diffusion.logits_shift), (126336, False)),
        "sampler": ((diffusion.sampler, diffusion.remasking, diffusion.block_length, diffusion.steps),
                    ("llada", "low_confidence", 32, 128)),
        "no top-k (LLaDA's generate has none)": ((rollout.top_k, rollout.val_kwargs.top_k), (-1, -1)),
        "completion length": (job.data.max_response_length, 256),
    }
    wrong = {name: got for name, (got, want) in expected.items() if got != want}
    assert not wrong, wrong

"""The main job trains tiny block-diffusion models (SDAR-style, LLaDA2-style MoE) on CPU, full and with LoRA (slow).

The rollout runs the default config's ``sampler: auto``, which for these families is the ``block`` sampler (block by
block over the exact cache of finished blocks, no fast path); the update runs the ``[x_t | x_0]`` layout. A random tiny model earns no code reward (every
advantage 0), so the LoRA runs start from a random adapter: the policy starts away from the base model, which is the
reference, and the KL's gradient through the layout's log-probs moves it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from diffugrpo_plugin.models.tiny import TinySpec, tiny_model_path
from main_e2e_support import SHORT, logged_steps, main_command, metric_by_step, random_d1_adapter

pytestmark = [pytest.mark.slow, pytest.mark.sandbox, pytest.mark.ray]


def run(tmp_path: Path, path: str, steps: int, *overrides: str, save_freq: int = -1) -> str:
    result = subprocess.run(
        main_command(
            f"actor_rollout_ref.model.path={path}",
            *overrides,
            f"trainer.total_training_steps={steps}",
            f"trainer.save_freq={save_freq}",
            *SHORT,
            "data.max_prompt_length=80",
            "data.max_response_length=32",
            f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        ),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-5000:]
    assert logged_steps(log) == list(range(1, steps + 1))
    assert "; sampler block, exact, no fast path" in log, log[:3000]  # the family's sampler, unnamed in the config
    return log


@pytest.mark.parametrize("family", ["sdar", "llada2"])
def test_the_main_job_trains_a_tiny_block_diffusion_model(family, tmp_path):
    log = run(tmp_path, tiny_model_path(TinySpec(family=family)), 2)
    entropy = metric_by_step(log, "actor/entropy")
    assert "actor/pg_loss:" in log and all(0.0 < value < 10.0 for value in entropy.values()), entropy


@pytest.mark.parametrize("family", ["sdar", "llada2"])
def test_the_main_job_trains_lora_adapters_on_a_tiny_block_diffusion_model(family, tmp_path):
    """Every advantage is 0, so the KL's gradient alone trains: it reaches every adapter through the layout's
    log-probs (that it descends the KL is tests/test_block_training.py's, on fixed sequences: across steps the KL is
    measured on new samples of a moving policy, and at these sizes it rose as often as it fell)."""
    from safetensors.torch import load_file

    from diffugrpo_plugin.models.lora import ADAPTER_WEIGHTS

    path = tiny_model_path(TinySpec(family=family))
    start = random_d1_adapter(Path(path), tmp_path / "start_adapter")
    log = run(
        tmp_path,
        path,
        3,
        "actor_rollout_ref.model.lora_rank=8",
        "actor_rollout_ref.model.lora_alpha=16",
        f"actor_rollout_ref.model.lora_adapter_path={start}",
        "actor_rollout_ref.actor.optim.lr=0.003",
        save_freq=3,
    )
    kl = metric_by_step(log, "actor/kl_loss")
    grad_norm = metric_by_step(log, "actor/grad_norm")
    print(family, "kl", kl, "grad_norm", grad_norm)
    assert all(kl[step] > 1e-4 and grad_norm[step] > 1e-4 for step in (1, 2, 3)), (kl, grad_norm)
    before = load_file(start / ADAPTER_WEIGHTS)
    after = load_file(tmp_path / "ckpt" / "global_step_3" / "actor" / "lora_adapter" / ADAPTER_WEIGHTS)
    assert before.keys() == after.keys()
    unchanged = [name for name in before if torch.equal(before[name], after[name])]
    assert not unchanged, unchanged[:5]

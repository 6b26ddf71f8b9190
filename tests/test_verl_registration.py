"""After `pip install`, a fresh `import verl` registers everything, and failures are loud."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_fresh_import_of_verl_registers_every_piece():
    result = run_python("""
        import verl
        from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, POLICY_LOSS_REGISTRY
        from verl.workers.engine.base import EngineRegistry
        from verl.workers.rollout.base import _ROLLOUT_REGISTRY, get_rollout_class
        from verl.workers.rollout.replica import RolloutReplicaRegistry
        from verl.trainer.ppo.v1.trainer_base import get_trainer_cls
        from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls
        from verl.utils.device import get_device_name, get_nccl_backend
        assert "coupled_grpo" in ADV_ESTIMATOR_REGISTRY
        assert "coupled_grpo" in POLICY_LOSS_REGISTRY
        assert get_device_name() == "cpu" and get_nccl_backend() == "gloo"
        for backend in ("fsdp", "fsdp2"):
            print(EngineRegistry.get_engine_cls("diffusion_lm", backend).__name__)
        print(get_rollout_class("diffusion", "async").__name__, RolloutReplicaRegistry.get("diffusion").__name__)
        print(get_trainer_cls("diffugrpo").__name__, get_reward_manager_cls("diffugrpo").__name__)
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "DiffusionLMEngine",
        "DiffusionLMEngine",
        "DiffusionRollout",
        "DiffusionReplica",
        "DiffuGRPOTrainer",
        "DiffugrpoRewardManager",
    ]


def test_a_failing_registration_is_reported_loudly():
    # a broken dependency of our registration, simulated by a module that cannot be imported
    result = run_python("""
        import sys
        sys.modules["diffugrpo_plugin.integration.algorithm"] = None
        import verl
        from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
        print("registered:", "coupled_grpo" in ADV_ESTIMATOR_REGISTRY)
    """)
    assert "registered: False" in result.stdout
    assert "[diffugrpo] ERROR: diffugrpo failed to register with verl" in result.stderr


def test_the_promised_module_exists_once_verl_is_imported():
    result = run_python("""
        import importlib.util
        import verl
        spec = importlib.util.find_spec("verl.trainer.main")
        print(spec.origin)
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("diffugrpo_plugin/main.py")


def test_the_main_entry_stops_in_one_line_when_registration_failed():
    result = run_python("""
        import sys
        sys.modules["diffugrpo_plugin.integration.algorithm"] = None
        sys.argv = ["main", "actor_rollout_ref.model.path=/unused"]
        from diffugrpo_plugin.main import main
        main()
    """)
    assert result.returncode == 2, result.stderr[-2000:]
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith(
        "diffugrpo: could not register with verl (ModuleNotFoundError: import of "
        "diffugrpo_plugin.integration.algorithm halted"
    ), last_line

"""The lean process layout: which layout a config gets, what it changes in the config, the light request router,
and the two stand-ins it hands verl (a reward worker's handle scored in process, a task runner run in process).
The whole job under both layouts runs in the slow suite (tests/test_main_e2e.py, tests/test_quiet_output.py)."""

from __future__ import annotations

import asyncio
import os
import pickle
import subprocess
import sys

import pytest
import yaml
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf, open_dict

from diffugrpo_plugin.integration import layout
from diffugrpo_plugin.integration.preflight import ConfigError, check_config
from diffugrpo_plugin.sampling.request_router import LeastBusyRouter
from reward_support import TEST_UID_BASE
from test_reward_manager import ADD_TESTS, CORRECT, WRONG, _row, tokenizer  # noqa: F401 - tokenizer is a fixture


@pytest.fixture()
def job():
    """The default job's config as ``python -m verl.trainer.main`` composes it."""
    with initialize_config_module(config_module="diffugrpo_plugin.config", version_base=None):
        return compose(config_name="diffugrpo")


def _with(config, **settings):
    with open_dict(config):
        for key, value in settings.items():
            OmegaConf.update(config, key, value)
    return config


@pytest.mark.parametrize(
    "chosen, nodes, device, expected",
    [
        ("auto", 1, "cpu", "lean"),
        ("auto", 2, "cpu", "verl"),
        ("auto", 1, "cuda", "verl"),  # not yet run on a GPU
        ("lean", 2, "cuda", "lean"),
        ("verl", 1, "cpu", "verl"),
    ],
)
def test_auto_is_lean_for_a_one_node_cpu_job_and_verls_otherwise(job, chosen, nodes, device, expected):
    config = _with(job, **{"diffugrpo.process_layout": chosen, "trainer.nnodes": nodes, "trainer.device": device})
    assert layout.process_layout(config) == expected


def test_an_unknown_layout_is_a_one_line_config_error(job):
    with pytest.raises(ConfigError, match=r"diffugrpo.process_layout must be one of auto, lean, verl, got 'single'"):
        check_config(_with(job, **{"diffugrpo.process_layout": "single"}))


def test_lean_settings_start_no_reward_actor_and_name_the_light_router(job):
    from verl.workers.rollout.router import _load_router_yaml, _resolve_router_class

    assert job.reward.num_workers == 1 and job.actor_rollout_ref.rollout.router_config_path is None
    layout.apply_lean_settings(job)
    assert job.reward.num_workers == 0
    assert layout.rewards_in_agent_loop(job)
    router_config = _load_router_yaml(job.actor_rollout_ref.rollout.router_config_path)  # what verl reads
    assert _resolve_router_class(router_config["router_class"]) is LeastBusyRouter


def test_lean_settings_keep_a_users_router_and_verls_reward_workers_for_a_reward_model(job, tmp_path):
    router = tmp_path / "router.yaml"
    router.write_text(yaml.safe_dump({"router_class": "my.Router"}))
    config = _with(
        job,
        **{"actor_rollout_ref.rollout.router_config_path": str(router), "reward.reward_model.enable": True},
    )
    layout.apply_lean_settings(config)
    assert config.actor_rollout_ref.rollout.router_config_path == str(router)
    assert config.reward.num_workers == 1 and not layout.rewards_in_agent_loop(config)


def test_lean_settings_keep_verls_reward_workers_for_another_reward_manager_and_warn_of_ignored_ones(job, caplog):
    config = _with(job, **{"reward.num_workers": 4})
    layout.apply_lean_settings(config)
    assert config.reward.num_workers == 0
    assert "reward.num_workers=4 is not used" in caplog.text
    config = _with(job, **{"reward.reward_manager.name": "remote", "reward.num_workers": 4})
    layout.apply_lean_settings(config)
    assert config.reward.num_workers == 4 and not layout.rewards_in_agent_loop(config)


def test_full_determinism_keeps_verls_hash_routing(job):
    config = _with(job, **{"actor_rollout_ref.rollout.full_determinism": True})
    layout.apply_lean_settings(config)
    assert config.actor_rollout_ref.rollout.router_config_path is None


def test_the_trainer_hands_the_agent_loop_the_in_process_reward_worker_under_lean_only(job):
    from diffugrpo_plugin.integration.trainer import DiffuGRPOTrainer

    class VerlTrainerStandIn:  # what get_reward_handles reads of the trainer
        config = job

    handles = DiffuGRPOTrainer.get_reward_handles(VerlTrainerStandIn())
    assert [type(handle) for handle in handles] == [layout.InProcessRewardWorker]


def test_the_task_runner_refuses_ray_options_it_cannot_apply():
    with pytest.raises(ValueError, match="diffugrpo.process_layout=verl"):
        layout.InProcessTaskRunner.options(runtime_env={"nsight": {}})


def test_verls_layout_changes_nothing(job):
    config = _with(job, **{"diffugrpo.process_layout": "verl"})
    before = OmegaConf.to_container(config)
    layout.apply_lean_settings(config)
    assert OmegaConf.to_container(config) == before
    assert not layout.rewards_in_agent_loop(config)


def test_the_router_sends_each_request_to_the_server_with_fewest_in_flight():
    router = LeastBusyRouter({"a": "handle-a", "b": "handle-b"}, {"router_class": "ignored"})
    assert router.acquire_server("r1") == ("a", "handle-a")
    assert router.acquire_server("r2") == ("b", "handle-b")
    assert router.acquire_server("r3") == ("a", "handle-a")  # a tie goes to the first added
    router.release_server("a", "r1")
    router.release_server("a", "r3")
    assert router.get_status()["servers"] == {"a": 0, "b": 1} and router.get_total_inflight() == 1
    assert router.acquire_server("r4")[0] == "a"
    router.remove_servers(["a"])
    assert router.acquire_server("r5") == ("b", "handle-b")
    assert router.get_all_servers() == ["b"]
    router.remove_servers(["b"])
    with pytest.raises(RuntimeError, match="No available servers in load balancer"):
        router.acquire_server("r6")


def test_the_router_module_imports_neither_torch_verl_nor_ray():
    """Its actor's process then stays near Ray's bare worker instead of ~430 MiB (benchmarks/processes.py)."""
    code = (
        "import sys, diffugrpo_plugin.sampling.request_router; "
        "print(sorted(m for m in ('torch', 'verl', 'ray') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.sandbox
def test_the_in_process_reward_worker_scores_as_verls_agent_loop_calls_a_reward_actor(job, tokenizer, tmp_path):
    """``await handle.compute_score.remote(data)`` (verl's agent loop, ``_compute_score``) on a handle that went
    through pickle, as it does to the agent-loop workers: verl's reward worker, built on first use, with our
    reward manager: a correct program gets code 1 (x2.0) + code_format 1 (x0.5), a wrong one the format only."""
    tokenizer.save_pretrained(tmp_path)
    config = _with(
        job,
        **{
            "actor_rollout_ref.model.path": str(tmp_path),
            "diffugrpo.rewards.sandbox": {
                "timeout_s": 2.0,
                "memory_mb": 256,
                "max_concurrency": 2,
                "uid_base": TEST_UID_BASE,
            },
        },
    )
    sent = layout.InProcessRewardWorker(config)
    assert sent.__getstate__() == {"config": config}  # the worker (tokenizer, threads) never travels
    handle = pickle.loads(pickle.dumps(sent))  # as Ray hands it to an agent-loop worker: built there

    async def score(response: str) -> dict:
        return await handle.compute_score.remote(_row(tokenizer, response, {"test_cases": ADD_TESTS}))

    correct, wrong = asyncio.run(score(CORRECT)), asyncio.run(score(WRONG))
    assert correct["reward_score"] == pytest.approx(2.5)
    assert correct["reward_extra_info"]["reward/code"] == 1.0
    assert wrong["reward_score"] == pytest.approx(0.5)
    assert wrong["reward_extra_info"]["reward/code"] == 0.0


@pytest.mark.ray
def test_the_in_process_task_runner_runs_verls_task_runner_here_with_the_workers_environment(ray_cluster, monkeypatch):
    """run_ppo's protocol: ``ray.get(task_runner_class.remote().run.remote(config))``."""
    import ray

    from verl.trainer import main_ppo

    seen = {}

    class RecordingTaskRunner:
        def run(self, config):
            seen.update(pid=os.getpid(), config=config, omp=os.environ.get("OMP_NUM_THREADS"))

    class ActorClassStandIn:  # what @ray.remote leaves under the module's name
        __ray_actor_class__ = RecordingTaskRunner

    monkeypatch.setattr(main_ppo, "TaskRunnerV1", ActorClassStandIn)
    monkeypatch.setattr(os, "environ", {name: value for name, value in os.environ.items() if name != "OMP_NUM_THREADS"})
    runner = layout.InProcessTaskRunner.remote()
    assert ray.get(runner.run.remote("the config")) is None
    assert seen == {"pid": os.getpid(), "config": "the config", "omp": "1"}  # ray_cluster's runtime_env

"""The lean process layout: which layout a config gets, what it changes in the config, the light request router,
and the two stand-ins it hands verl (a reward worker's handle scored in process, a task runner run in process).
The whole job under both layouts runs in the slow suite (tests/test_main_e2e.py, tests/test_quiet_output.py)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import subprocess
import sys
import threading
import time

import pytest
import yaml
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf, open_dict

from diffugrpo_plugin.integration import in_process, layout
from diffugrpo_plugin.integration.preflight import ConfigError, check_config
from diffugrpo_plugin.serving.request_router import LeastBusyRouter
from reward_manager_support import ADD_TESTS, CORRECT, WRONG, _row, tokenizer  # noqa: F401 - tokenizer is a fixture
from reward_support import TEST_UID_BASE


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


@pytest.mark.parametrize(
    "chosen, use_v1, expected", [("lean", True, True), ("lean", False, False), ("verl", True, False)]
)
def test_the_trainer_loop_runs_in_the_driver_under_lean_with_verls_v1_trainer_only(job, chosen, use_v1, expected):
    config = _with(job, **{"diffugrpo.process_layout": chosen, "trainer.use_v1": use_v1})
    assert layout.trainer_loop_in_driver(config) is expected


def test_an_unknown_layout_is_a_one_line_config_error(job):
    with pytest.raises(ConfigError, match=r"diffugrpo.process_layout must be one of auto, lean, verl, got 'single'"):
        check_config(_with(job, **{"diffugrpo.process_layout": "single"}))


def test_lean_settings_start_no_reward_actor_and_name_the_light_router(job):
    from verl.utils.import_utils import load_class_from_fqn
    from verl.workers.rollout.router import _load_router_yaml, _resolve_router_class

    assert job.reward.num_workers == 1 and job.actor_rollout_ref.rollout.router_config_path is None
    layout.apply_lean_settings(job)
    assert job.reward.num_workers == 0
    assert layout.rewards_in_agent_loop(job)
    router_config = _load_router_yaml(job.actor_rollout_ref.rollout.router_config_path)  # what verl reads
    assert _resolve_router_class(router_config["router_class"]) is LeastBusyRouter
    # what verl's task runner loads for its agent-loop manager (init_agent_loop_manager)
    manager_class = load_class_from_fqn(job.actor_rollout_ref.rollout.agent.agent_loop_manager_class, "manager")
    assert manager_class is in_process.InProcessAgentLoopManager


def test_lean_settings_keep_a_users_agent_loop_manager(job):
    config = _with(job, **{"actor_rollout_ref.rollout.agent.agent_loop_manager_class": "my.Manager"})
    layout.apply_lean_settings(config)
    assert config.actor_rollout_ref.rollout.agent.agent_loop_manager_class == "my.Manager"


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
    assert [type(handle) for handle in handles] == [in_process.InProcessRewardWorker]


def test_the_task_runner_refuses_ray_options_it_cannot_apply():
    with pytest.raises(ValueError, match="diffugrpo.process_layout=verl"):
        in_process.InProcessTaskRunner.options(runtime_env={"nsight": {}})


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
        "import sys, diffugrpo_plugin.serving.request_router; "
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
    sent = in_process.InProcessRewardWorker(config)
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

    from transfer_queue import client
    from transfer_queue.storage import simple_storage

    class RecordingTaskRunner:
        def run(self, config):
            seen.update(pid=os.getpid(), config=config, omp=os.environ.get("OMP_NUM_THREADS"))
            seen.update(transfer_queue_threads={client.TQ_NUM_THREADS, simple_storage.TQ_NUM_THREADS})

    class ActorClassStandIn:  # what @ray.remote leaves under the module's name
        __ray_actor_class__ = RecordingTaskRunner

    monkeypatch.setattr(main_ppo, "TaskRunnerV1", ActorClassStandIn)

    @contextlib.contextmanager
    def transfer_queue_here(config):
        seen.update(transfer_queue=config)
        yield

    monkeypatch.setattr(in_process, "transfer_queue_here", transfer_queue_here)
    for module in (client, simple_storage):  # read at import; the runner sets them from the workers' environment
        monkeypatch.setattr(module, "TQ_NUM_THREADS", 8)
    environ = {name: value for name, value in os.environ.items() if name != "OMP_NUM_THREADS"}
    monkeypatch.setattr(os, "environ", {**environ, "TQ_NUM_THREADS": "2"})
    runner = in_process.InProcessTaskRunner.remote()
    config = OmegaConf.create({"transfer_queue": {"enable": True}})
    assert ray.get(runner.run.remote(config)) is None
    # ray_cluster's runtime_env
    assert seen == {
        "pid": os.getpid(),
        "config": config,
        "omp": "1",
        "transfer_queue": config.transfer_queue,
        "transfer_queue_threads": {2},
    }


class TransferQueuePeer:
    """Another process of the job (a trainer worker) using TransferQueue as verl's code does: ``tq.init()``, then
    puts and gets."""

    def put(self, keys: list[str], values: list[float]) -> None:
        import torch
        import transfer_queue as tq
        from tensordict import TensorDict

        tq.init()
        tq.kv_batch_put(keys=keys, partition_id="train", fields=TensorDict({"x": torch.tensor(values)}, [len(keys)]))

    def get(self, keys: list[str]) -> list[float]:
        import transfer_queue as tq

        tq.init()
        return tq.kv_batch_get(keys=keys, partition_id="train")["x"].tolist()


@pytest.mark.slow
@pytest.mark.ray
def test_transfer_queue_runs_in_this_process_and_the_jobs_other_processes_find_it(ray_cluster):
    """The controller and both storage units are objects of this process: the only actor TransferQueue leaves is
    the directory, under the controller's name; another process's puts are read here and this process's there."""
    import ray
    import torch
    import transfer_queue as tq
    from tensordict import TensorDict
    from transfer_queue import interface

    def named_actors() -> set[str]:
        return {actor["name"] for actor in ray.util.list_named_actors(all_namespaces=True)}

    before = named_actors()
    config = OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 2}}})
    peer = ray.remote(TransferQueuePeer).remote()
    with in_process.transfer_queue_here(config):
        assert named_actors() - before == {"TransferQueueController"}
        client = interface._TQ_CLIENT
        tq.init(config)  # verl's own call, in this process: finds this one
        assert interface._TQ_CLIENT is client and named_actors() - before == {"TransferQueueController"}
        ray.get(peer.put.remote(["a", "b", "c"], [1.0, 2.0, 3.0]))
        assert tq.kv_batch_get(keys=["c", "a"], partition_id="train")["x"].tolist() == [3.0, 1.0]
        tq.kv_batch_put(keys=["d"], partition_id="train", fields=TensorDict({"x": torch.tensor([4.0])}, [1]))
        assert ray.get(peer.get.remote(["d", "b"])) == [4.0, 2.0]
    assert named_actors() == before  # closed: the directory is gone
    assert interface._TQ_CONTROLLER is None and interface._TQ_CLIENT is None and interface._TQ_STORAGE is None
    ray.kill(peer)


def test_the_transfer_queue_directory_module_imports_neither_torch_verl_nor_ray():
    """The directory hands out the config pickled, so its process never loads TransferQueue (which imports torch)."""
    code = (
        "import sys, pickle; from diffugrpo_plugin.serving.transfer_queue_directory import TransferQueueDirectory; "
        "d = TransferQueueDirectory(); d.store_config(pickle.dumps({'zmq_info': 'address'})); "
        "sent = pickle.dumps(d.get_config()); "
        "print(sorted(m for m in ('torch', 'verl', 'ray', 'transfer_queue', 'omegaconf') if m in sys.modules), "
        "pickle.loads(sent))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[] {'zmq_info': 'address'}"


class RecordingAgentLoopWorker:
    """Stands in for verl's ``AgentLoopWorkerTQ`` (an async actor): records where it was built and where its
    ``generate_sequences`` ran, and, as verl's does, leaves work running on its loop after it returns."""

    def __init__(self, config, llm_client, teacher_client, reward_loop_worker_handles):
        self.built_on = threading.current_thread().name
        self.reward_loop_worker_handles = reward_loop_worker_handles
        self.batches, self.background = [], []

    async def generate_sequences(self, batch) -> None:
        self.batches.append((threading.current_thread().name, batch["prompt"].tolist()))
        self.background.append(asyncio.get_running_loop().create_task(asyncio.sleep(3600)))  # a rollout in flight


@pytest.mark.ray
def test_the_agent_loop_workers_run_in_this_process_each_on_its_own_event_loop(ray_cluster):
    """verl's own ``AgentLoopManagerTQ.generate_sequences`` (chunk the batch, ``ray.get`` every worker's call)
    drives the in-process workers."""
    import ray
    import torch
    from tensordict import TensorDict

    manager = in_process.InProcessAgentLoopManager.__new__(in_process.InProcessAgentLoopManager)
    manager.rollout_config = OmegaConf.create({"agent": {"num_workers": 2}})
    manager.agent_loop_workers_class = ray.remote(RecordingAgentLoopWorker)
    manager.config, manager.llm_client, manager.teacher_client = None, None, None
    manager.reward_loop_worker_handles = ["the reward handle"]
    asyncio.run(manager._init_agent_loop_workers())
    workers = [handle.instance for handle in manager.agent_loop_workers]
    assert [worker.built_on for worker in workers] == ["agent_loop_worker_0", "agent_loop_worker_1"]
    assert workers[0].reward_loop_worker_handles == ["the reward handle"]  # handed over as is, not pickled
    manager.generate_sequences(TensorDict({"prompt": torch.arange(4)}, [4]))
    assert [worker.batches for worker in workers] == [
        [("agent_loop_worker_0", [0, 1])],
        [("agent_loop_worker_1", [2, 3])],
    ]
    threads = [thread for thread in threading.enumerate() if thread.name.startswith("agent_loop_worker_")]
    assert len(threads) == 2
    in_process.stop_agent_loops()  # what TransferQueue's close now runs first
    assert all(worker.background[0].cancelled() for worker in workers)
    assert not any(thread.is_alive() for thread in threads)


@pytest.mark.ray
def test_the_light_router_is_built_here_while_the_trainer_loop_runs_here_and_others_as_verl_builds_them(
    ray_cluster, tmp_path
):
    """What verl's ``LLMServerClient`` calls on its load balancer: ``await acquire_server.remote(...)``,
    ``release_server.remote(...)``."""
    import ray

    from verl.workers.rollout import router

    servers = {"server-a": "handle a", "server-b": "handle b"}
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"agent": {}}}})
    with in_process._light_router_here(config):
        # as in the job: the trainer's __init__ (inside this block) names the manager, verl then builds the router
        config.actor_rollout_ref.rollout.agent.agent_loop_manager_class = in_process.MANAGER_PATH
        here = router.get_router_handle(servers, router_config_path=in_process.lean_router_path())
        assert isinstance(here.instance, LeastBusyRouter)

        async def acquire(request_id: str):
            return await here.acquire_server.remote(request_id=request_id)

        assert asyncio.run(acquire("r1")) == ("server-a", "handle a")
        assert asyncio.run(acquire("r2")) == ("server-b", "handle b")
        ray.get(here.release_server.remote(server_id="server-a"))
        assert asyncio.run(acquire("r3")) == ("server-a", "handle a")
        other = tmp_path / "router.yaml"
        other.write_text(yaml.safe_dump({"router_class": "diffugrpo_plugin.serving.request_router.LeastBusyRouter"}))
        actor = router.get_router_handle(servers, router_config_path=str(other))
        assert isinstance(actor, ray.actor.ActorHandle)
        ray.kill(actor)
    assert router.get_router_handle.__module__ == "verl.workers.rollout.router"  # verl's again after the run
    # a user's agent-loop manager may run its workers in actors, to which Ray pickles the router's handle
    config.actor_rollout_ref.rollout.agent.agent_loop_manager_class = "my.Manager"
    with in_process._light_router_here(config):
        actor = router.get_router_handle(servers, router_config_path=in_process.lean_router_path())
        assert isinstance(actor, ray.actor.ActorHandle)
        ray.kill(actor)


@pytest.mark.ray
def test_a_failed_transfer_queue_start_leaves_nothing_that_a_later_start_would_find(ray_cluster, monkeypatch):
    import ray
    from transfer_queue import interface

    def broken(handles):
        raise RuntimeError("the controller did not answer")

    before = {actor["name"] for actor in ray.util.list_named_actors(all_namespaces=True)}
    config = OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}})
    with monkeypatch.context() as patched:
        patched.setattr(interface, "process_zmq_server_info", broken)
        with pytest.raises(RuntimeError, match="the controller did not answer"):
            with in_process.transfer_queue_here(config):
                pass
    assert interface._TQ_CONTROLLER is None and interface._TQ_CLIENT is None and interface._TQ_STORAGE is None
    deadline = time.monotonic() + 30
    while {actor["name"] for actor in ray.util.list_named_actors(all_namespaces=True)} != before:
        assert time.monotonic() < deadline, "the directory actor outlived the failed start"
        time.sleep(0.2)
    with in_process.transfer_queue_here(config):  # starts afresh instead of waiting on the dead directory
        assert isinstance(interface._TQ_CONTROLLER, ray.actor.ActorHandle)


class WorkerWithARollout:
    """Stands in for a trainer worker: its process has a diffusion rollout that answers each request with the
    length of its prompt, as ``DiffusionRollout`` is what the worker's pulling thread calls."""

    def __init__(self):
        from diffugrpo_plugin.integration.rollout import worker
        from rollout_support import CountingRollout

        worker._local_rollout = CountingRollout()


@pytest.mark.slow
@pytest.mark.ray
def test_the_first_rollout_replica_on_this_node_is_served_by_the_transfer_queue_directory(ray_cluster):
    """One light process less: the directory actor that the lean layout's TransferQueue starts here is also the
    rollout server of the first replica whose worker is on this node; the next replica starts a server of its own.
    That one actor then serves both: a request comes back through its worker, another process finds TransferQueue."""
    import ray
    from transfer_queue import interface

    from diffugrpo_plugin.integration.rollout import DiffusionReplica
    from diffugrpo_plugin.integration.rollout.servers import _spare_servers

    def replica(rank: int) -> DiffusionReplica:
        made = DiffusionReplica.__new__(DiffusionReplica)
        made.replica_rank, made.world_size, made.name_suffix = rank, 1, ""
        made.workers = [ray.remote(WorkerWithARollout).remote()]
        return made

    config = OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}})
    peer = ray.remote(TransferQueuePeer).remote()
    with in_process.transfer_queue_here(config):
        directory = interface._TQ_CONTROLLER
        first, second = replica(0), replica(1)
        asyncio.run(first.launch_servers())
        asyncio.run(second.launch_servers())
        assert first.servers == [directory] and second.servers[0] != directory
        assert ray.get(directory.generate.remote("r0", [7, 8, 9], {}), timeout=60).token_ids == [3]
        assert ray.get(second.servers[0].generate.remote("r1", [7], {}), timeout=60).token_ids == [1]
        ray.get(peer.put.remote(["a"], [1.0]))
        assert tq_get(["a"]) == [1.0]
        ray.kill(second.servers[0])
    assert not _spare_servers
    for made in (first, second):
        ray.kill(made.workers[0])
    ray.kill(peer)


def tq_get(keys: list[str]) -> list[float]:
    import transfer_queue as tq

    return tq.kv_batch_get(keys=keys, partition_id="train")["x"].tolist()


@pytest.mark.ray
def test_a_transfer_queue_closed_before_any_replica_leaves_no_spare_server(ray_cluster):
    from diffugrpo_plugin.integration.rollout.servers import _spare_servers

    config = OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}})
    with in_process.transfer_queue_here(config):
        assert len(_spare_servers) == 1
    assert not _spare_servers  # a later job's replica would otherwise take the killed directory as its server


_RAY_HEAD_PROCESSES = """
import json, os, sys
import ray
from omegaconf import OmegaConf
from diffugrpo_plugin.integration.in_process import ray_head_for_one_job

def tree(root):
    parents = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                parents[int(pid)] = int(stat.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                parents[int(pid)] = (parents[int(pid)], cmdline.read().replace(b"\\0", b" ").decode())
        except (OSError, IndexError):
            parents.pop(int(pid), None)
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, cmdline) in parents.items():
            if ppid == parent:
                found.append(cmdline)
                frontier.append(pid)
    return found

with ray_head_for_one_job(OmegaConf.create({"ray_kwargs": {"ray_init": {"include_dashboard": False}}})):
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
answer = ray.get(ray.remote(lambda: 6 * 7).remote())
print(json.dumps({"answer": answer, "processes": tree(os.getpid())}))
ray.shutdown()
"""


@pytest.mark.slow
@pytest.mark.ray
def test_the_ray_head_of_a_one_node_job_starts_without_the_autoscaler_monitor_and_the_api_server():
    """A head started in the block (verl's ``ray.init``) runs tasks without two of Ray's daemons."""
    import json

    run = subprocess.run(
        [sys.executable, "-c", _RAY_HEAD_PROCESSES], capture_output=True, text=True, timeout=180, cwd="/"
    )
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["answer"] == 42
    commands = " ".join(seen["processes"])
    assert "raylet" in commands and "gcs_server" in commands  # the walk finds Ray's daemons
    assert "log_monitor.py" in commands  # Ray's other daemons start
    assert "autoscaler/_private/monitor.py" not in commands and "autoscaler/v2/monitor.py" not in commands
    assert "dashboard/dashboard.py" not in commands


def test_the_ray_head_keeps_the_api_server_when_the_config_asks_for_the_dashboard_and_restores_both_after():
    from ray._private.node import Node

    starters = (Node.start_monitor, Node.start_api_server)
    with in_process.ray_head_for_one_job(OmegaConf.create({"ray_kwargs": {"ray_init": {"include_dashboard": True}}})):
        assert Node.start_api_server is starters[1] and Node.start_monitor is not starters[0]
    with in_process.ray_head_for_one_job(OmegaConf.create({})):
        assert Node.start_api_server is not starters[1] and Node.start_monitor is not starters[0]
    assert (Node.start_monitor, Node.start_api_server) == starters

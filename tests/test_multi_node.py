"""A job on a Ray cluster of several nodes, the parts that need no cluster: what reaches ``ray.init`` (CPU and GPU
counts where it starts a Ray head, none where it joins a running cluster: Ray refuses them there, each node declared its
own with ``ray start``), TransferQueue reserving no CPU, and the one line a job that lost a node stops with. The run on
two nodes is tests/test_two_nodes.py (slow)."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from diffugrpo_plugin.integration import cluster
from diffugrpo_plugin.integration.platform import physical_cores, ray_logical_cpus


class _RayInitCalled(Exception):
    pass


def ray_init_kwargs(monkeypatch, *overrides: str) -> dict:
    """The keyword arguments verl's ``run_ppo`` passes to ``ray.init`` for the default job with ``overrides``."""
    import ray

    from verl.trainer import main_ppo

    seen = {}

    def init(**kwargs):
        seen.update(kwargs)
        raise _RayInitCalled

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    with initialize_config_module(config_module="diffugrpo_plugin.config", version_base=None):
        config = compose(config_name="diffugrpo", overrides=["actor_rollout_ref.model.path=/unused", *overrides])
    with pytest.raises(_RayInitCalled):
        main_ppo.run_ppo(config, task_runner_class=None)
    return seen


@pytest.fixture
def no_cluster_here(monkeypatch, tmp_path):
    """No RAY_ADDRESS, and Ray's default temp dir (where ``ray start`` notes its cluster) is an empty one."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    return tmp_path / "ray"


def test_a_job_that_starts_ray_sizes_it(monkeypatch, no_cluster_here):
    kwargs = ray_init_kwargs(monkeypatch, "trainer.n_gpus_per_node=2")
    # this host is CPU-only (as the default suite's): 2 logical GPUs, one per trainer process, and CPUs for verl's
    # reservations (2 trainers, 1 storage unit, TransferQueue's controller, one to place the rest)
    assert kwargs["num_gpus"] == 2
    assert kwargs["num_cpus"] == ray_logical_cpus(physical_cores(), 2, 1) == max(physical_cores(), 5)
    assert kwargs["address"] is None


@pytest.mark.parametrize(
    "how",
    ["RAY_ADDRESS", "address in the config", "auto", "a cluster ray start left in the temp dir"],
)
def test_a_job_that_joins_a_running_cluster_passes_no_cpu_or_gpu_counts(monkeypatch, no_cluster_here, how):
    overrides = []
    if how == "RAY_ADDRESS":
        monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6391")
    elif how == "address in the config":
        overrides.append("ray_kwargs.ray_init.address=127.0.0.1:6391")
    elif how == "auto":  # no cluster to find: ray.init itself then says so
        overrides.append("ray_kwargs.ray_init.address=auto")
    else:
        no_cluster_here.mkdir()
        (no_cluster_here / "ray_current_cluster").write_text("127.0.0.1:6391")
    kwargs = ray_init_kwargs(monkeypatch, *overrides)
    assert kwargs["num_cpus"] is None and kwargs["num_gpus"] is None, kwargs
    assert kwargs["include_dashboard"] is False  # the rest as before


def test_an_address_named_local_starts_a_head(monkeypatch, no_cluster_here):
    kwargs = ray_init_kwargs(monkeypatch, "ray_kwargs.ray_init.address=local")
    assert kwargs["num_gpus"] == 1 and kwargs["num_cpus"] == ray_logical_cpus(physical_cores(), 1, 1)


@pytest.mark.ray
def test_transfer_queue_started_under_the_verl_layout_on_cpu_reserves_no_ray_cpu(ray_cluster):
    """Its controller and storage unit asked a CPU each: on 2-CPU nodes, the CPU a node's trainer bundle needed."""
    import ray
    import transfer_queue
    from transfer_queue import interface
    from transfer_queue.storage.bootstrap import simple_storage_bootstrap

    controller, storage = interface.TransferQueueController, simple_storage_bootstrap.SimpleStorageUnit
    before = ray.available_resources()["CPU"]
    with cluster.transfer_queue_reserving_no_cpus():
        transfer_queue.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 2}}}))
    try:
        assert len(interface._TQ_STORAGE["SimpleStorage"]) == 2  # the controller and two storage units run
        assert ray.available_resources()["CPU"] == before
    finally:
        transfer_queue.close()
    assert (interface.TransferQueueController, simple_storage_bootstrap.SimpleStorageUnit) == (controller, storage)


def lost_job_config(folder, resume_mode: str = "auto"):
    return OmegaConf.create({"trainer": {"default_local_dir": str(folder), "resume_mode": resume_mode}})


def test_the_line_a_job_that_lost_a_node_stops_with(tmp_path):
    config = lost_job_config(tmp_path / "ckpt")
    assert cluster.lost_process_message(config, "ActorDiedError", ["5d0e74c4 at 10.0.0.2"]) == (
        "a Ray process of the job was lost (ActorDiedError; node 5d0e74c4 at 10.0.0.2 died); restart what failed "
        f"(a node: ray start --address=<head>), then no checkpoint in {tmp_path / 'ckpt'} yet: the same command "
        "starts afresh"
    )
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").write_text("12\n")
    resumed = cluster.lost_process_message(config, "ActorDiedError", [])
    assert "(ActorDiedError; no node died in 30 s: a process of the job did (out of memory?))" in resumed
    assert resumed.endswith(f"the same command resumes from step 12 (trainer.resume_mode=auto, {tmp_path / 'ckpt'})")
    unknown = cluster.lost_process_message(lost_job_config(tmp_path / "ckpt", "disable"), "NodeDiedError", None)
    assert "(NodeDiedError; a process of the job or its node died)" in unknown
    assert unknown.endswith(
        "the last checkpoint is step 12 in " + str(tmp_path / "ckpt") + " (trainer.resume_mode=auto resumes from it)"
    )


def test_ray_errors_of_a_lost_process_become_the_one_line_and_others_pass(monkeypatch, tmp_path):
    import ray

    monkeypatch.setattr(cluster, "_nodes_dying", lambda: ["5d0e74c4 at 10.0.0.2"])
    config = lost_job_config(tmp_path)
    # as the driver gets it from verl's task runner actor: Ray's task error, an instance of the actor's error too
    forwarded = ray.exceptions.RayTaskError("run", "traceback", ray.exceptions.ActorUnavailableError("gone", None))
    for error, name in (
        (ray.exceptions.ActorDiedError(), "ActorDiedError"),
        (forwarded.as_instanceof_cause(), "ActorUnavailableError"),
        (ray.exceptions.NodeDiedError("x"), "NodeDiedError"),
    ):
        with pytest.raises(cluster.JobProcessLost) as lost, cluster.lost_processes_explained(config):
            raise error
        assert lost.value.__cause__ is error
        assert f"({name}; node 5d0e74c4 at 10.0.0.2 died)" in str(lost.value)
    with pytest.raises(ValueError, match="not a lost process"), cluster.lost_processes_explained(config):
        raise ValueError("not a lost process")


def test_a_workers_collective_failing_as_a_node_dies_becomes_the_one_line_and_other_task_errors_pass(
    monkeypatch, tmp_path
):
    """On two nodes, the surviving worker's all_reduce with the dead node's worker failed first (gloo's RuntimeError,
    forwarded by the task runner's actor), before Ray marked any actor dead: with a node dead it is the one line; with
    every node alive it is the worker's error as it came."""
    import ray

    gloo = RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:6367")
    in_worker = ray.exceptions.RayTaskError("forward_backward_batch", "traceback", gloo)
    forwarded = ray.exceptions.RayTaskError("run", "traceback", in_worker).as_instanceof_cause()
    config = lost_job_config(tmp_path)
    monkeypatch.setattr(cluster, "_nodes_dying", lambda: ["5d0e74c4 at 10.0.0.2"])
    with pytest.raises(cluster.JobProcessLost) as lost, cluster.lost_processes_explained(config):
        raise forwarded
    assert lost.value.__cause__ is forwarded
    assert "(RuntimeError; node 5d0e74c4 at 10.0.0.2 died)" in str(lost.value)
    for alive in ([], None):  # no node died in the notice time; one node, or the GCS gone: nothing to tell
        monkeypatch.setattr(cluster, "_nodes_dying", lambda alive=alive: alive)
        with pytest.raises(ray.exceptions.RayTaskError) as passed, cluster.lost_processes_explained(config):
            raise forwarded
        assert passed.value is forwarded


def test_placement_shortfall_names_what_verl_would_wait_for_without_end():
    two_nodes = {"head": {"CPU": 2.0, "GPU": 1.0}, "second": {"CPU": 2.0, "GPU": 1.0}}
    assert cluster.placement_shortfall([1, 1], 1, "GPU", two_nodes) is None
    # what verl met before TransferQueue reserved no CPU: its controller and storage unit held the head's two
    held = {"head": {"CPU": 0.0, "GPU": 1.0}, "second": {"CPU": 2.0, "GPU": 1.0}}
    assert (
        cluster.placement_shortfall([1, 1], 1, "GPU", held) == "a node with 1 GPU and 1 CPU free for 1 trainer workers"
    )
    # a node's group packs on one node: 8 workers x 3 CPUs (verl's reservation on a GPU host) on either node
    gpu_nodes = {"a": {"CPU": 32.0, "GPU": 8.0}, "b": {"CPU": 20.0, "GPU": 8.0}}
    assert cluster.placement_shortfall([8, 8], 3, "GPU", gpu_nodes) == (
        "a node with 8 GPU and 24 CPU free for 8 trainer workers"
    )
    assert cluster.placement_shortfall([8], 3, "GPU", gpu_nodes) is None
    # one node able to hold both groups holds both; one GPU short is short
    assert cluster.placement_shortfall([1, 1], 1, "GPU", {"big": {"CPU": 3.0, "GPU": 2.0}}) is None
    assert cluster.placement_shortfall([1, 1], 1, "GPU", {"big": {"CPU": 3.0, "GPU": 1.0}}) is not None


def test_a_cluster_too_small_for_the_job_stops_it_in_one_line(monkeypatch):
    import ray

    from verl.single_controller.ray.base import ResourcePoolManager

    free = {"5d0e74c4aa": {"CPU": 0.0, "GPU": 1.0}, "1f991b1abb": {"CPU": 2.0, "GPU": 1.0}}
    monkeypatch.setattr(ray._private.state, "available_resources_per_node", lambda: free)
    manager = ResourcePoolManager({"global_pool": [1, 1]}, mapping={}, max_colocate_count=1)
    config = OmegaConf.create({"trainer": {"nnodes": 2, "n_gpus_per_node": 1, "device": "cpu"}})
    with pytest.raises(cluster.ClusterTooSmall) as too_small:
        cluster.check_cluster_fits(config, manager)
    assert str(too_small.value) == (
        "the Ray cluster cannot place this job (trainer.nnodes=2 x trainer.n_gpus_per_node=1): it needs a node with "
        "1 GPU and 1 CPU free for 1 trainer workers; free now: 5d0e74c4: 0 CPU, 1 GPU; 1f991b1a: 2 CPU, 1 GPU. Start "
        "the nodes with more (ray start --num-cpus / --num-gpus) or ask for fewer workers"
    )
    free["5d0e74c4aa"]["CPU"] = 1.0
    cluster.check_cluster_fits(config, manager)  # fits: nothing raised


def test_a_gpu_recipe_on_a_cluster_with_no_gpu_is_told_the_cpu_settings(monkeypatch):
    import ray

    from verl.single_controller.ray.base import ResourcePoolManager

    monkeypatch.setattr(ray._private.state, "available_resources_per_node", lambda: {"1b502f0b9c": {"CPU": 0.0}})
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})
    manager = ResourcePoolManager({"global_pool": [2]}, mapping={}, max_colocate_count=1)
    config = OmegaConf.create({"trainer": {"nnodes": 1, "n_gpus_per_node": 2, "device": "cuda"}})
    with pytest.raises(cluster.ClusterTooSmall) as too_small:
        cluster.check_cluster_fits(config, manager)
    assert str(too_small.value).endswith(
        "free now: 1b502f0b: 0 CPU, 0 GPU. No node has a GPU: to train on CPUs add trainer.device=cpu "
        "+ray_kwargs.ray_init.num_gpus=2 (logical GPUs, one a trainer worker), as job=cpu_demo does"
    )

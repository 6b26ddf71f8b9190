"""What a job's Ray cluster must hold, and one line where it does not.

- verl waits without end for trainer placement groups the cluster cannot hold: :func:`check_cluster_fits` stops the
  job first, naming what is missing and what to change.
- A lost process or node (a raylet killed, an OOM kill) stops with Ray's error and its raylet log dump:
  :func:`lost_processes_explained` turns it into one line naming the node and the checkpoint a new run resumes from.
- The verl layout's task runner on a CPU host (:func:`task_runner_on_cpu`), whose TransferQueue actors reserve no
  Ray CPU, which a CPU node has few of.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from pathlib import Path

from diffugrpo_plugin.integration.verl_internals import (
    task_runner_v1_class,
    transfer_queue_actor_classes,
)

logger = logging.getLogger("diffugrpo.cluster")


class ClusterTooSmall(RuntimeError):
    """The Ray cluster has too few free resources for the job's placement groups; the message says what is missing."""


def placement_shortfall(
    process_on_nodes: list[int], cpus_per_worker: float, device: str, free: dict[str, dict[str, float]]
) -> str | None:
    """What the cluster lacks, with ``free`` resources a node (node id -> resource -> amount), for verl's trainer
    placement groups, or None where they fit. verl asks one STRICT_PACK placement group a node, of
    ``process_on_nodes[i]`` bundles of ``{CPU: cpus_per_worker, device: 1}``, and then waits for them without end.
    With identical groups, the first node that fits each is as good as any. (The actors placed next, agent-loop and
    reward workers, need no CPU left free: seen on two nodes of 1 CPU each, both held by the trainer bundles.)"""
    nodes = {node: dict(resources) for node, resources in free.items()}
    for workers in sorted(process_on_nodes, reverse=True):
        cpus, devices = workers * cpus_per_worker, workers
        fit = next((n for n, r in nodes.items() if r.get("CPU", 0) >= cpus and r.get(device, 0) >= devices), None)
        if fit is None:
            return f"a node with {devices:g} {device} and {cpus:g} CPU free for {workers} trainer workers"
        nodes[fit]["CPU"] -= cpus
        nodes[fit][device] -= devices
    return None


def check_cluster_fits(config, resource_pool_manager) -> None:
    """Raises :class:`ClusterTooSmall` where verl would wait forever for the trainer workers' placement groups (seen on
    two nodes of 2 CPUs each, before TransferQueue reserved none)."""
    import ray

    from verl.plugin.platform import get_platform

    device = get_platform().ray_resource_name()
    free = ray._private.state.available_resources_per_node()  # what verl's own GPU check reads
    for process_on_nodes in resource_pool_manager.resource_pool_spec.values():
        missing = placement_shortfall(process_on_nodes, resource_pool_manager.max_colocate_count, device, free)
        if missing is not None:
            nodes = "; ".join(
                f"{node[:8]}: {r.get('CPU', 0):g} CPU, {r.get(device, 0):g} {device}" for node, r in free.items()
            )
            raise ClusterTooSmall(
                f"the Ray cluster cannot place this job (trainer.nnodes={config.trainer.nnodes} x "
                f"trainer.n_gpus_per_node={config.trainer.n_gpus_per_node}): it needs {missing}; free now: {nodes}. "
                + remedy(config, device)
            )


def remedy(config, device: str) -> str:
    """What to change when the trainer's placement groups do not fit: a GPU recipe on a cluster with no GPU (verl's
    ``trainer.device`` is cuda wherever a recipe leaves it; a CPU-only host's Ray has no GPU unless told) needs the CPU
    settings job=cpu_demo carries; otherwise the nodes need more resources or the job fewer workers."""
    import ray

    if config.trainer.device != "cpu" and not ray.cluster_resources().get(device):
        return (
            f"No node has a {device}: to train on CPUs add trainer.device=cpu "
            f"+ray_kwargs.ray_init.num_gpus={config.trainer.n_gpus_per_node} (logical GPUs, one a trainer worker), "
            f"as job=cpu_demo does"
        )
    return "Start the nodes with more (ray start --num-cpus / --num-gpus) or ask for fewer workers"


class JobProcessLost(RuntimeError):
    """A Ray process of the job died, or its node left the cluster; the message says which nodes and how to resume."""


# how long the GCS may take to mark a node whose raylet died as dead: its health check gives up after missed
# heartbeats (seen: 15 s after a raylet was killed); the actors' errors come sooner (seen: 6 s)
NODE_DEATH_NOTICE_S = 30.0


@contextlib.contextmanager
def lost_processes_explained(config):
    """A job whose trainer worker, task runner or other actor died (a node's raylet killed or gone, an OOM kill) stops
    with Ray's error as it comes (``ActorUnavailableError: ... Socket closed``, seen 6 s after a node's raylet was
    killed mid-run) and Ray's raylet log dump; this raises :class:`JobProcessLost` from it instead, whose one line
    names the node that died and the checkpoint a new run resumes from.

    A surviving worker's own error can come first: its collective with the dead node's worker fails (gloo's
    ``RuntimeError: Connection closed by peer``, seen on two nodes 2026-12-03) and reaches the driver as Ray's task
    error before any actor is marked dead. So any other task error of a multi-node job waits for the GCS's verdict on
    the nodes (up to :data:`NODE_DEATH_NOTICE_S`): a node dead makes it the one line too; none, and the error goes
    on as it came."""
    import ray

    lost = (
        ray.exceptions.RayActorError,
        ray.exceptions.NodeDiedError,
        ray.exceptions.WorkerCrashedError,
        ray.exceptions.ObjectLostError,
        ray.exceptions.LocalRayletDiedError,
    )
    try:
        yield
    except lost as error:
        logger.error("a process of the job was lost", exc_info=error)
        # an actor's error re-raised by the task runner's actor is Ray's RayTaskError(<the actor's error>)
        cause = error.cause if isinstance(error, ray.exceptions.RayTaskError) else error
        raise JobProcessLost(lost_process_message(config, type(cause).__name__, _nodes_dying())) from error
    except ray.exceptions.RayTaskError as error:
        dead = _nodes_dying()
        if not dead:
            raise
        logger.error("a process of the job failed while a node died", exc_info=error)
        cause = error
        while isinstance(cause, ray.exceptions.RayTaskError) and cause.cause is not None:
            cause = cause.cause  # the task runner's error wraps the worker's, which wraps what the worker raised
        raise JobProcessLost(lost_process_message(config, type(cause).__name__, dead)) from error


def _nodes_dying() -> list[str] | None:
    """The nodes, alive in the GCS's view when the job's error came, that it marks dead within
    :data:`NODE_DEATH_NOTICE_S`; None where that cannot be told (one node: no other to wait for; the GCS gone)."""
    import time

    import ray

    try:
        alive = {node["NodeID"] for node in ray.nodes() if node["Alive"]}
        deadline = time.monotonic() + NODE_DEATH_NOTICE_S
        while len(alive) > 1:
            dead = [node for node in ray.nodes() if node["NodeID"] in alive and not node["Alive"]]
            if dead or time.monotonic() > deadline:
                return [f"{node['NodeID'][:8]} at {node['NodeManagerAddress']}" for node in dead]
            time.sleep(1.0)
    except Exception:  # noqa: BLE001 - the GCS itself gone with the head's node: nothing to tell
        pass
    return None


def lost_process_message(config, error_name: str, dead_nodes: list[str] | None) -> str:
    """One line: what was lost, where the last checkpoint is, and that the same command resumes from it."""
    if dead_nodes:
        what = f"node {', '.join(dead_nodes)} died"
    elif dead_nodes is None:
        what = "a process of the job or its node died"
    else:
        what = f"no node died in {NODE_DEATH_NOTICE_S:.0f} s: a process of the job did (out of memory?)"
    folder = Path(str(config.trainer.default_local_dir)).absolute()
    marker = folder / "latest_checkpointed_iteration.txt"  # verl's: the step of the last complete checkpoint
    step = marker.read_text().strip() if marker.is_file() else None
    if step is None:
        resume = f"no checkpoint in {folder} yet: the same command starts afresh"
    elif config.trainer.resume_mode == "auto":
        resume = f"the same command resumes from step {step} (trainer.resume_mode=auto, {folder})"
    else:
        resume = f"the last checkpoint is step {step} in {folder} (trainer.resume_mode=auto resumes from it)"
    return (
        f"a Ray process of the job was lost ({error_name}; {what}); restart what failed (a node: ray start "
        f"--address=<head>), then {resume}"
    )


@functools.cache
def task_runner_on_cpu():
    """verl's ``TaskRunnerV1`` actor (under its name, which Ray puts before its output), with TransferQueue's controller
    and storage units reserving no Ray CPU (:func:`transfer_queue_reserving_no_cpus`): the verl layout's task runner on
    a CPU host."""
    import ray

    class TaskRunner(task_runner_v1_class()):
        def run(self, config):
            with transfer_queue_reserving_no_cpus():
                return super().run(config)

    TaskRunner.__name__ = TaskRunner.__qualname__ = "TaskRunnerV1"
    return ray.remote(TaskRunner)


def transfer_queue_reserving_no_cpus():
    """While the block runs, the TransferQueue controller and storage units this process starts reserve no Ray CPU
    (TransferQueue asks one for each). On a CPU host Ray's CPUs are the cores, or what a ``ray start`` declared: with 2
    a node, the two that TransferQueue held left a node no CPU for its trainer worker's bundle (1 CPU, 1 GPU), and
    verl waited for that placement group without end (two nodes, seen 2026-12-02). They serve a few kB a step from
    threads that wait on their sockets; the lean layout runs them in the driver, reserving nothing either."""
    return transfer_queue_actor_classes(_ReservingNoCPU, _ReservingNoCPU)


class _ReservingNoCPU:
    """A Ray actor class whose actors reserve no CPU, whatever the class's decorator asked."""

    def __init__(self, actor_class):
        self._actor_class = actor_class

    def options(self, **options):
        return self._actor_class.options(**{**options, "num_cpus": 0})

    def remote(self, *args, **kwargs):
        return self.options().remote(*args, **kwargs)

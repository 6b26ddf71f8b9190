"""The lean layout's processes: verl's own code, run in the driver instead of in Ray actors of their own.

verl 0.9.1 runs its trainer loop (``TaskRunnerV1``), every agent-loop and reward worker, the rollout's request load
balancer and TransferQueue's controller and storage units as Ray actors of their own, whatever the job's size. Each
such process imports torch and verl (or TransferQueue), 285-450 MiB before it does anything (``python
benchmarks/processes.py``; docs/concepts/step-cost.md). The ``lean`` layout (:mod:`.layout` decides when) runs the
same verl code in fewer processes. In the driver, beside verl's trainer loop:

- **the trainer loop**: verl's own ``TaskRunnerV1``, handed to verl's ``run_ppo`` through its ``task_runner_class``
  parameter as :class:`InProcessTaskRunner`, which runs it in the calling process (only ``python -m
  verl.trainer.main``, our driver, does this; verl's ``main_ppo`` keeps its actor, and with it the rest of this
  list but the agent loop);
- **TransferQueue's controller and storage units** (:func:`transfer_queue_here`), found by the other processes
  through a light directory actor under the controller's name, which is also the rollout server of the trainer
  worker on the driver's node;
- **the agent-loop workers**: verl's own ``AgentLoopWorkerTQ``, each on an event loop of its own in a thread
  (:class:`InProcessAgentLoopManager`, through verl's ``rollout.agent.agent_loop_manager_class``);
- **rewards scored in the agent-loop worker** that produced the completion: verl's own ``RewardLoopWorker``,
  built there by :class:`InProcessRewardWorker`, which stands in for a reward actor's handle; ``reward.num_workers``
  is set to 0, so no reward actor starts (with our reward manager and no reward model only: verl's other managers
  size their own pools from ``reward.num_workers``);
- **a request router that imports neither torch nor verl**
  (:class:`diffugrpo_plugin.serving.request_router.LeastBusyRouter`) instead of verl's balancer, through verl's
  ``rollout.router_config_path``, unless that is set or ``rollout.full_determinism`` asks for verl's hash routing
  (:func:`_light_router_here`; an actor of its own where the trainer loop runs in one);
- **the console's board** for the step lines (:mod:`.console`).

Ray itself is asked not to keep idle worker processes for tasks, and the Ray head the driver starts leaves out the
autoscaler's monitor and the dashboard's API server (:func:`ray_head_for_one_job`). What is left is the trainer
workers, the rollout servers (light; the first doubles as TransferQueue's directory) and Ray's other daemons.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import pickle
import threading
from importlib import resources
from typing import Any

from omegaconf import OmegaConf

from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ

from diffugrpo_plugin.integration.rollout.servers import forget_spare_server, start_directory_server
from diffugrpo_plugin.integration.verl_internals import (
    load_router_yaml,
    refresh_transfer_queue_threads,
    router_handles_from,
    run_task_runner_here,
    set_transfer_queue_state,
    transfer_queue_actor_classes,
    transfer_queue_close_replaced,
    transfer_queue_state,
)
from diffugrpo_plugin.serving.request_router import LeastBusyRouter

LEAN_ROUTER_CONFIG = "config/rollout_router/least_busy.yaml"


def lean_router_path() -> str:
    return str(resources.files("diffugrpo_plugin").joinpath(LEAN_ROUTER_CONFIG))


class InProcessRewardWorker:
    """Stands in for a reward worker's actor handle in verl's agent-loop worker, which calls
    ``await handle.compute_score.remote(data)`` once per completion: here that runs verl's own
    ``RewardLoopWorker.compute_score`` in the calling process. The handle reaches the agent-loop workers as an
    argument of their constructor, pickled with the config only; unpickling builds the ``RewardLoopWorker``
    (tokenizer, reward manager) there, as a reward actor would be built, before any rollout runs. Agent-loop workers
    in the same process (:class:`InProcessAgentLoopManager`) share the one it builds."""

    def __init__(self, config):
        self.config = config
        self._worker = None

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.config = state["config"]
        self._build()

    def _build(self) -> None:
        from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

        self._worker = RewardLoopWorker(self.config, None)

    @property
    def compute_score(self) -> "_Remote":
        if self._worker is None:  # handed, unpickled, to agent-loop workers in this process (InProcessAgentLoopManager)
            self._build()
        return _Remote(self._worker.compute_score)


class _Remote:
    """A method reachable as ``method.remote(...)``, as on a Ray actor handle."""

    def __init__(self, method):
        self.remote = method


class InProcessTaskRunner:
    """``task_runner_class`` for verl's ``run_ppo``, which calls ``task_runner_class.remote()`` and then
    ``ray.get(runner.run.remote(config))``: runs verl's ``TaskRunnerV1`` (its undecorated class) in this process.

    The environment variables verl gives its Ray workers (``ray_kwargs.ray_init.runtime_env.env_vars``) are set here
    too, for what reads them while it runs (verl's logging level, TransferQueue's thread count). What a library
    read when the driver imported it keeps the driver's value: torch's thread count (the cores on a CPU host) and
    whether CUDA is visible, which is why ``auto`` does not choose this layout on a GPU host."""

    @classmethod
    def remote(cls) -> "InProcessTaskRunner":
        return cls()

    @classmethod
    def options(cls, **options):
        """Ray actor options (verl asks for nsys profiling this way) cannot apply to a task runner in this process."""
        raise ValueError(
            f"Ray options {sorted(options)} for verl's task runner need it in an actor of its own: set "
            f"diffugrpo.process_layout=verl"
        )

    def __init__(self):
        self.run = _Remote(self._run)

    @staticmethod
    def _run(config):
        import ray

        for name, value in (ray.get_runtime_context().runtime_env.get("env_vars") or {}).items():
            os.environ[name] = str(value)
        # TransferQueue's client and storage units read their thread count when ``import verl`` imported them, before
        # this environment
        refresh_transfer_queue_threads()
        with transfer_queue_here(config.transfer_queue), _light_router_here(config):
            run_task_runner_here(config)
        return ray.put(None)


@contextlib.contextmanager
def _light_router_here(config):
    """While verl's trainer loop runs in this process with the agent-loop workers beside it
    (:class:`InProcessAgentLoopManager`), the light request router that :func:`.layout.apply_lean_settings` names is built
    here too, instead of in a Ray actor of its own. Any other router, or agent-loop workers in actors of their own
    (whose servers' client Ray pickles), get the router verl builds."""

    def lean_router(build):
        def get_router_handle(servers, router_config_path=None, load_balancer_cls=None, **options):
            # read now, not on entry: the trainer's __init__ (apply_lean_settings) names the manager after this block
            # begins
            manager = OmegaConf.select(config, "actor_rollout_ref.rollout.agent.agent_loop_manager_class")
            if router_config_path != lean_router_path() or load_balancer_cls is not None or manager != MANAGER_PATH:
                return build(
                    servers, router_config_path=router_config_path, load_balancer_cls=load_balancer_cls, **options
                )
            return _InProcessHandle(LeastBusyRouter(servers, load_router_yaml(router_config_path)))

        return get_router_handle

    with router_handles_from(lean_router):
        yield


@contextlib.contextmanager
def ray_head_for_one_job(config):
    """While the block runs, a Ray head that this process starts (verl's ``ray.init`` in ``run_ppo``) leaves out two
    daemons a one-node job does not use: the autoscaler's monitor (about 55 MiB), which has no nodes to add, and the
    dashboard's API server (about 80 MiB), which ``ray.init`` starts even with ``include_dashboard: false`` and which
    serves only the dashboard, job submission and the state API. ``ray_kwargs.ray_init.include_dashboard: true`` keeps
    the API server. Ray's own ``ray start --no-monitor`` leaves out the first; Ray carries on without the second as
    it does where the server fails to start (no dashboard address). Joining a running cluster starts neither."""
    from ray._private.node import Node

    left_out = ["start_monitor"]
    if OmegaConf.select(config, "ray_kwargs.ray_init.include_dashboard") is not True:
        left_out.append("start_api_server")
    left_out = [name for name in left_out if callable(getattr(Node, name, None))]  # another Ray: start what it starts
    starters = {name: getattr(Node, name) for name in left_out}
    for name in left_out:
        setattr(Node, name, _start_nothing)
    try:
        yield
    finally:
        for name, starter in starters.items():
            setattr(Node, name, starter)


def _start_nothing(_node, *_args, **_kwargs) -> None:
    return None


@contextlib.contextmanager
def transfer_queue_here(transfer_queue_config):
    """TransferQueue for the duration of the block, started by its own ``init`` with its controller and storage units
    built as objects of this process instead of a Ray actor each (about 285 MiB a process, for the few kB a step a
    one-node job stores). They serve the other processes over ZMQ from their own threads, as in their actors; those
    processes find them through a :class:`~diffugrpo_plugin.serving.transfer_queue_directory.TransferQueueDirectory`
    actor under the controller's name, which the first rollout replica on this node takes as its server
    (:func:`~diffugrpo_plugin.integration.rollout.servers.start_directory_server`). verl's own ``tq.init`` and
    ``tq.close`` in this process then find this one and close it. With a backend other than TransferQueue's
    ``SimpleStorage`` (which keeps data in its units' memory), or with its SSD offload, nothing is started here and
    verl starts TransferQueue as it does. The agent-loop workers of this process stop before TransferQueue closes
    (:func:`stop_agent_loops`)."""
    import transfer_queue

    backend = OmegaConf.select(transfer_queue_config, "backend.storage_backend", default="SimpleStorage")
    # SSD offload sets the storage actors' allocator through their environment, which objects here cannot have
    offload = OmegaConf.select(transfer_queue_config, "backend.SimpleStorage.ssd_offload.enabled", default=False)
    if backend != "SimpleStorage" or offload:
        yield
        return
    with transfer_queue_actor_classes(
        lambda controller_class: _InProcessActorClass(controller_class, directory_name=_CONTROLLER_NAME),
        _InProcessActorClass,
    ):
        try:
            transfer_queue.init(transfer_queue_config)
            if not isinstance(transfer_queue_state("controller"), _InProcessHandle):
                raise RuntimeError(
                    "a TransferQueue controller already runs in this Ray cluster; diffugrpo.process_layout=lean starts "
                    "its own: stop the other job, or set diffugrpo.process_layout=verl"
                )
        except BaseException:
            _close_transfer_queue()
            raise
    # What TransferQueue's ``close`` stops must be actors: it kills the directory; the storage units stop below. The
    # controller has no way to stop: its daemon threads wait on their sockets until the process ends, as in its actor.
    units = transfer_queue_state("storage").pop(backend)
    directory = transfer_queue_state("controller").directory
    set_transfer_queue_state(controller=directory, storage=None)
    close = transfer_queue.close

    def close_after_the_agent_loops() -> None:  # verl's trainer loop closes TransferQueue through this attribute
        stop_agent_loops()
        forget_spare_server(directory)
        close()

    try:
        with transfer_queue_close_replaced(close_after_the_agent_loops):
            yield
    finally:
        close_after_the_agent_loops()
        for unit in units.values():
            unit.instance.shutdown()


def _close_transfer_queue() -> None:
    """After a failed start: the directory, the storage units and the client that were built, and TransferQueue's
    globals, so that a later start does not find a directory without a config."""
    import ray

    storage = transfer_queue_state("storage") or {}
    handles = [transfer_queue_state("controller"), *(storage.get("SimpleStorage") or {}).values()]
    for handle in handles:
        if isinstance(handle, _InProcessHandle):
            with contextlib.suppress(Exception):
                if handle.directory is not None:
                    forget_spare_server(handle.directory)
                    ray.kill(handle.directory)
                if hasattr(handle.instance, "shutdown"):
                    handle.instance.shutdown()
    if transfer_queue_state("client") is not None:
        transfer_queue_state("client").close()
    set_transfer_queue_state(client=None, controller=None, storage=None)


_CONTROLLER_NAME = ("TransferQueueController", "transfer_queue")  # name and namespace, as TransferQueue looks it up


class _InProcessActorClass:
    """Stands in for a Ray actor class (``cls.options(...).remote(...)``) whose instances live in this process."""

    def __init__(self, actor_class, directory_name: tuple[str, str] | None = None):
        self._actor_class, self._directory_name = actor_class, directory_name

    def options(self, **_options) -> "_InProcessActorClass":
        return self  # placement and name: the object is in this process; the directory carries the name

    def remote(self, *args, **kwargs) -> "_InProcessHandle":
        directory = None
        if self._directory_name is not None:
            directory = start_directory_server(*self._directory_name)
        return _InProcessHandle(self._actor_class.__ray_actor_class__(*args, **kwargs), directory)


class _InProcessHandle:
    """Stands in for a Ray actor handle: ``handle.method.remote(...)`` calls the object here, on ``loop`` (a thread's
    event loop) when given, waits for it, and returns the result as an object ref for the ``ray.get`` around it. A
    new config is stored in the directory as well."""

    def __init__(self, instance, directory=None, loop: asyncio.AbstractEventLoop | None = None):
        self.instance, self.directory, self._loop = instance, directory, loop
        self._one_call_at_a_time = threading.Lock()  # as an actor runs its calls, whichever thread makes them

    def __getattr__(self, method: str) -> _Remote:
        if method.startswith("__"):  # copy, pickle and the like: not a method of the object
            raise AttributeError(method)
        import ray

        def call(*args, **kwargs):
            if self._loop is None:
                with self._one_call_at_a_time:
                    result = getattr(self.instance, method)(*args, **kwargs)
            else:
                result = _run_on(self._loop, getattr(self.instance, method), *args, **kwargs)
            if method == "store_config" and self.directory is not None:
                ray.get(self.directory.store_config.remote(pickle.dumps(*args, **kwargs)))
            return ray.put(result)

        return _Remote(call)


def _run_on(loop: asyncio.AbstractEventLoop, function, *args, **kwargs):
    """``function(*args, **kwargs)`` run on ``loop`` (awaited there if it is a coroutine function), from another
    thread; its result."""

    async def run():
        result = function(*args, **kwargs)
        return await result if inspect.isawaitable(result) else result

    return asyncio.run_coroutine_threadsafe(run(), loop).result()


class InProcessAgentLoopManager(AgentLoopManagerTQ):
    """verl's agent-loop manager for its TransferQueue trainer (``AgentLoopManagerTQ``), with each agent-loop worker
    (verl's ``AgentLoopWorkerTQ``, undecorated) built in this process, the trainer loop's, instead of in a Ray actor
    of its own: about 450 MiB a worker, for a loop that mostly awaits the rollout server and the sandboxes. Each
    worker runs on an event loop of its own in a daemon thread, as an async actor runs on its actor's loop; the
    manager reaches it through :class:`_InProcessHandle`, as it reaches an actor. Chosen through verl's
    ``rollout.agent.agent_loop_manager_class`` under the lean layout (:func:`.layout.apply_lean_settings`)."""

    async def _init_agent_loop_workers(self):
        for handle in self.reward_loop_worker_handles or []:  # built here, once, before any worker's loop needs it
            if isinstance(handle, InProcessRewardWorker) and handle._worker is None:
                handle._build()
        self.agent_loop_workers = []
        for index in range(self.rollout_config.agent.num_workers):
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name=f"agent_loop_worker_{index}", daemon=True)
            thread.start()
            _AGENT_LOOPS.append((loop, thread))
            worker = _run_on(
                loop,
                self.agent_loop_workers_class.__ray_actor_class__,
                self.config,
                self.llm_client,
                self.teacher_client,
                self.reward_loop_worker_handles,
            )
            self.agent_loop_workers.append(_InProcessHandle(worker, loop=loop))


MANAGER_PATH = f"{__name__}.{InProcessAgentLoopManager.__name__}"

_AGENT_LOOPS: list[tuple[asyncio.AbstractEventLoop, threading.Thread]] = []
"""The event loops (and their threads) of this process's agent-loop workers, stopped by :func:`stop_agent_loops`."""


def stop_agent_loops(timeout_s: float = 10.0) -> None:
    """Cancels what this process's agent-loop workers still run (verl starts each rollout as a task it does not wait
    for, so a failed step leaves some behind) and stops their loops, before the TransferQueue client they share with
    the trainer loop closes."""

    async def cancel_all() -> None:
        tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    while _AGENT_LOOPS:
        loop, thread = _AGENT_LOOPS.pop()
        with contextlib.suppress(Exception):  # a loop already stopped, or a rollout that will not stop in time
            asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(timeout_s)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout_s)

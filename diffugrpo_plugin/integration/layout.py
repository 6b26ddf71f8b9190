"""Which processes a training job starts: verl's layout, or the same job in fewer processes (``lean``).

verl 0.9.1 runs its trainer loop (``TaskRunnerV1``), every reward worker and the rollout's request load balancer
as Ray actors of their own, whatever the job's size. Each such process imports torch and verl, about 430 MiB
before it does anything (``python benchmarks/processes.py``; docs/concepts/step-cost.md). The ``lean`` layout
runs the same verl code in fewer processes:

- **the trainer loop in the driver**: verl's own ``TaskRunnerV1``, handed to verl's ``run_ppo`` through its
  ``task_runner_class`` parameter as :class:`InProcessTaskRunner`, which runs it in the calling process (only
  ``python -m verl.trainer.main``, our driver, does this; verl's ``main_ppo`` keeps its actor);
- **rewards scored in the agent-loop worker** that produced the completion: verl's own ``RewardLoopWorker``,
  built there by :class:`InProcessRewardWorker`, which stands in for a reward actor's handle; ``reward.num_workers``
  is set to 0, so no reward actor starts (with our reward manager and no reward model only: verl's other managers
  size their own pools from ``reward.num_workers``);
- **a request router that imports neither torch nor verl**
  (:class:`diffugrpo_plugin.sampling.request_router.LeastBusyRouter`) instead of verl's balancer, through verl's
  ``rollout.router_config_path``, unless that is set or ``rollout.full_determinism`` asks for verl's hash routing.

``diffugrpo.process_layout``: ``auto`` (the default) is ``lean`` for a one-node CPU job (``trainer.nnodes: 1``,
``trainer.device: cpu``: the default job) and ``verl`` otherwise, because the lean layout has not yet run on a GPU;
``lean`` or ``verl`` choose. The driver (:func:`run_training`) writes the choice back into the config, so every
process reads the same one.
"""

from __future__ import annotations

import logging
import os
from importlib import resources
from typing import Any

from omegaconf import open_dict

from diffugrpo_plugin.integration.reward_manager import MANAGER_NAME

logger = logging.getLogger("diffugrpo.layout")

LAYOUTS = ("auto", "lean", "verl")
LEAN_ROUTER_CONFIG = "config/rollout_router/least_busy.yaml"


def process_layout(config) -> str:
    """``lean`` or ``verl``: what ``diffugrpo.process_layout`` means for this config."""
    chosen = str(config.get("diffugrpo", {}).get("process_layout", "auto"))
    if chosen not in LAYOUTS:
        raise ValueError(f"diffugrpo.process_layout must be one of {', '.join(LAYOUTS)}, got {chosen!r}")
    if chosen == "auto":
        chosen = "lean" if int(config.trainer.nnodes) == 1 and config.trainer.device == "cpu" else "verl"
    return chosen


def rewards_in_agent_loop(config) -> bool:
    """True where the agent-loop workers score rewards themselves: the lean layout with our reward manager and no
    reward model."""
    return (
        process_layout(config) == "lean"
        and config.reward.reward_manager.get("name") == MANAGER_NAME
        and not config.reward.reward_model.enable
    )


def apply_lean_settings(config) -> None:
    """The config side of the lean layout, applied before verl builds its workers (in the trainer's ``__init__``,
    so verl's ``main_ppo`` gets it too): no reward actors, and our light router unless one is configured."""
    if process_layout(config) != "lean":
        return
    with open_dict(config):
        if rewards_in_agent_loop(config):
            if int(config.reward.num_workers) > 1:
                logger.warning(
                    "reward.num_workers=%s is not used: under diffugrpo.process_layout=lean the agent-loop workers "
                    "(rollout.agent.num_workers) score the rewards; diffugrpo.process_layout=verl keeps reward workers",
                    config.reward.num_workers,
                )
            config.reward.num_workers = 0
        rollout = config.actor_rollout_ref.rollout
        if rollout.get("router_config_path") is None and not rollout.get("full_determinism", False):
            rollout.router_config_path = str(resources.files("diffugrpo_plugin").joinpath(LEAN_ROUTER_CONFIG))


class InProcessRewardWorker:
    """Stands in for a reward worker's actor handle in verl's agent-loop worker, which calls
    ``await handle.compute_score.remote(data)`` once per completion: here that runs verl's own
    ``RewardLoopWorker.compute_score`` in the calling process. The handle reaches the agent-loop workers as an
    argument of their constructor, pickled with the config only; unpickling builds the ``RewardLoopWorker``
    (tokenizer, reward manager) there, as a reward actor would be built, before any rollout runs."""

    def __init__(self, config):
        self.config = config
        self._worker = None

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

        self.config = state["config"]
        self._worker = RewardLoopWorker(self.config, None)

    @property
    def compute_score(self) -> "_Remote":
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

        from verl.trainer.main_ppo import TaskRunnerV1

        for name, value in (ray.get_runtime_context().runtime_env.get("env_vars") or {}).items():
            os.environ[name] = str(value)
        # TransferQueue's client read its thread count when ``import verl`` imported it, before this environment
        from transfer_queue import client as transfer_queue_client

        transfer_queue_client.TQ_NUM_THREADS = int(
            os.environ.get("TQ_NUM_THREADS", transfer_queue_client.TQ_NUM_THREADS)
        )
        TaskRunnerV1.__ray_actor_class__().run(config)
        return ray.put(None)


def run_training(config) -> None:
    """verl's ``main_ppo.main`` (config checks, Ray, the TaskRunner), with the trainer loop in this process under
    the lean layout. The layout is decided here, once, and written into the config every process reads."""
    from verl.trainer import main_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    # main_ppo.main's own steps before run_ppo, copied because the task runner is the one thing that differs
    auto_set_device(config)
    with open_dict(config):
        config.diffugrpo.process_layout = process_layout(config)
    if config.diffugrpo.process_layout != "lean" or not config.trainer.use_v1:
        main_ppo.main.__wrapped__(config)
        return
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    main_ppo.run_ppo(config, task_runner_class=InProcessTaskRunner)

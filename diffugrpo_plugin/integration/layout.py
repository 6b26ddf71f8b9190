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
  is set to 0, so no reward actor starts;
- **a request router that imports neither torch nor verl**
  (:class:`diffugrpo_plugin.sampling.request_router.LeastBusyRouter`) instead of verl's balancer, through verl's
  ``rollout.router_config_path``, when that is not set.

``diffugrpo.process_layout``: ``auto`` (the default) is ``lean`` for a one-node CPU job (``trainer.nnodes: 1``,
``trainer.device: cpu``: the default job) and ``verl`` otherwise, because the lean layout has not yet run on a GPU;
``lean`` or ``verl`` choose. A reward model (``reward.reward_model.enable``) always gets verl's reward workers.
"""

from __future__ import annotations

import os
from importlib import resources
from typing import Any

from omegaconf import open_dict

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
    """True where the agent-loop workers score rewards themselves: the lean layout, without a reward model."""
    return process_layout(config) == "lean" and not config.reward.reward_model.enable


def apply_lean_settings(config) -> None:
    """The config side of the lean layout, applied before verl builds its workers (in the trainer's ``__init__``,
    so verl's ``main_ppo`` gets it too): no reward actors, and our light router unless one is configured."""
    if process_layout(config) != "lean":
        return
    with open_dict(config):
        if rewards_in_agent_loop(config):
            config.reward.num_workers = 0
        rollout = config.actor_rollout_ref.rollout
        if rollout.get("router_config_path") is None:
            rollout.router_config_path = str(resources.files("diffugrpo_plugin").joinpath(LEAN_ROUTER_CONFIG))


class InProcessRewardWorker:
    """Stands in for a reward worker's actor handle in verl's agent-loop worker, which calls
    ``await handle.compute_score.remote(data)`` once per completion: here that runs verl's own
    ``RewardLoopWorker.compute_score`` in the calling process. The handle travels to the agent-loop workers by
    pickle, carrying only the config; each process builds its ``RewardLoopWorker`` (tokenizer, reward manager) on
    first use."""

    def __init__(self, config):
        self.config = config
        self._worker = None

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config, "_worker": None}

    @property
    def compute_score(self) -> "_Remote":
        return _Remote(self._compute_score)

    async def _compute_score(self, data) -> dict:
        if self._worker is None:
            from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

            self._worker = RewardLoopWorker(self.config, None)
        return await self._worker.compute_score(data)


class _Remote:
    """A method reachable as ``method.remote(...)``, as on a Ray actor handle."""

    def __init__(self, method):
        self.remote = method


class InProcessTaskRunner:
    """``task_runner_class`` for verl's ``run_ppo``, which calls ``task_runner_class.remote()`` and then
    ``ray.get(runner.run.remote(config))``: runs verl's ``TaskRunnerV1`` (its undecorated class) in this process,
    with the environment verl gives its Ray workers (``ray_kwargs.ray_init.runtime_env.env_vars``)."""

    @classmethod
    def remote(cls) -> "InProcessTaskRunner":
        return cls()

    def __init__(self):
        self.run = _Remote(self._run)

    @staticmethod
    def _run(config):
        import ray

        from verl.trainer.main_ppo import TaskRunnerV1

        for name, value in (ray.get_runtime_context().runtime_env.get("env_vars") or {}).items():
            os.environ[name] = str(value)
        # Ray hides the GPUs from an actor that asks for none, as verl's task runner does (CUDA reads this when it
        # first starts in the process; the driver has not used it)
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        # TransferQueue's client read its thread count when ``import verl`` imported it, before this environment
        from transfer_queue import client as transfer_queue_client

        transfer_queue_client.TQ_NUM_THREADS = int(
            os.environ.get("TQ_NUM_THREADS", transfer_queue_client.TQ_NUM_THREADS)
        )
        TaskRunnerV1.__ray_actor_class__().run(config)
        return ray.put(None)


def run_training(config) -> None:
    """verl's ``main_ppo.main`` (config checks, Ray, the TaskRunner), with the trainer loop in this process under
    the lean layout."""
    from verl.trainer import main_ppo

    if process_layout(config) != "lean" or not config.trainer.use_v1:
        main_ppo.main.__wrapped__(config)
        return
    # main_ppo.main's own steps before run_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    auto_set_device(config)
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    main_ppo.run_ppo(config, task_runner_class=InProcessTaskRunner)

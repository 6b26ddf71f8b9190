"""Which processes a training job starts: verl's layout, or the same job in fewer processes (``lean``,
:mod:`.in_process`: verl's trainer loop, agent-loop and reward workers, request router and TransferQueue in the
driver).

``diffugrpo.process_layout``: ``auto`` (the default) is ``lean`` for a one-node CPU job (``trainer.nnodes: 1``,
``trainer.device: cpu``: the default job) and ``verl`` otherwise, because the lean layout has not yet run on a GPU;
``lean`` or ``verl`` choose. The driver (:func:`run_training`) writes the choice back into the config, so every
process reads the same one.
"""

from __future__ import annotations

import logging
import os

from omegaconf import open_dict

from diffugrpo_plugin.integration.cluster import lost_processes_explained, task_runner_on_cpu
from diffugrpo_plugin.integration.in_process import (
    MANAGER_PATH,
    InProcessTaskRunner,
    lean_router_path,
    ray_head_for_one_job,
)
from diffugrpo_plugin.integration.reward_manager import MANAGER_NAME
from diffugrpo_plugin.integration.verl_internals import run_main_ppo, validate_as_main_ppo

logger = logging.getLogger("diffugrpo.layout")

LAYOUTS = ("auto", "lean", "verl")


def process_layout(config) -> str:
    """``lean`` or ``verl``: what ``diffugrpo.process_layout`` means for this config."""
    chosen = str(config.get("diffugrpo", {}).get("process_layout", "auto"))
    if chosen not in LAYOUTS:
        raise ValueError(f"diffugrpo.process_layout must be one of {', '.join(LAYOUTS)}, got {chosen!r}")
    if chosen == "auto":
        chosen = "lean" if int(config.trainer.nnodes) == 1 and config.trainer.device == "cpu" else "verl"
    return chosen


def trainer_loop_in_driver(config) -> bool:
    """True where :func:`run_training` runs verl's trainer loop in the driver: the lean layout, with verl's v1
    trainer (``trainer.use_v1``), whose task runner it replaces."""
    return process_layout(config) == "lean" and bool(config.trainer.use_v1)


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
                    "score the rewards in their own process; diffugrpo.process_layout=verl keeps reward workers",
                    config.reward.num_workers,
                )
            config.reward.num_workers = 0
        rollout = config.actor_rollout_ref.rollout
        if rollout.get("router_config_path") is None and not rollout.get("full_determinism", False):
            rollout.router_config_path = lean_router_path()
        if config.trainer.use_v1 and not rollout.agent.get("agent_loop_manager_class"):  # v1: TransferQueue's
            rollout.agent.agent_loop_manager_class = MANAGER_PATH


def run_training(config) -> None:
    """verl's ``main_ppo.main`` (config checks, Ray, the TaskRunner), with the trainer loop in this process under
    the lean layout, and TransferQueue reserving no Ray CPU under the verl layout on a CPU host; a lost Ray process
    raises :class:`JobProcessLost`. The layout is decided here, once, and written into the config every process
    reads."""
    from verl.trainer import main_ppo
    from verl.utils.device import auto_set_device

    # main_ppo.main's own steps before run_ppo, copied because the task runner is the one thing that differs
    auto_set_device(config)
    with open_dict(config):
        config.diffugrpo.process_layout = process_layout(config)
    in_driver = trainer_loop_in_driver(config)
    with lost_processes_explained(config):
        if not in_driver and not (config.trainer.use_v1 and config.trainer.device == "cpu"):
            run_main_ppo(config)  # verl's own task runner
            return
        validate_as_main_ppo(config)
        if not in_driver:  # the verl layout on a CPU host
            main_ppo.run_ppo(config, task_runner_class=task_runner_on_cpu())
            return
        # Ray starts a worker process per CPU when the driver connects, and keeps one per CPU once a task has run, for
        # tasks this job seldom runs: each idles at ~55 MiB. The actors start their own.
        os.environ.setdefault("RAY_prestart_worker_first_driver", "0")
        os.environ.setdefault("RAY_num_workers_soft_limit", "0")
        with ray_head_for_one_job(config):
            main_ppo.run_ppo(config, task_runner_class=InProcessTaskRunner)

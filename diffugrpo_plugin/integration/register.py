"""The ``verl.plugins`` entry point: registers diffugrpo with verl on ``import verl``.

verl imports this module in the driver and in every Ray worker, and swallows any exception at
DEBUG level. So a failure here is reported loudly (stderr and the logging error channel) before
it propagates; ``diffugrpo_plugin.main`` imports this module again (a failed import leaves none
behind), gets the same error, and stops with it in one line instead of an obscure "unknown
advantage estimator" later.

What it registers, each in verl's own registry:

==========================  ===============================================================
CPU platform                ``PlatformRegistry`` "cpu" (only chosen when no accelerator)
advantage estimator         ``coupled_grpo`` (``algorithm.adv_estimator``)
policy loss                 ``coupled_grpo`` (``actor.policy_loss.loss_mode``)
training engine             ``EngineRegistry`` model_type ``diffusion_lm``, fsdp/fsdp2, cuda/npu/cpu
rollout                     ``diffusion`` in both rollout registries
V1 trainer                  ``diffugrpo`` (``trainer.v1.trainer_mode``)
reward manager              ``diffugrpo`` (``reward.reward_manager.name``)
config resolvers            ``diffugrpo.*`` OmegaConf resolvers used by our config
Dream / LLaDA model types   transformers' auto classes, our native implementations (no remote code)
``verl.trainer.main``       the command users were promised (see :mod:`.entrypoint`)
==========================  ===============================================================
"""

from __future__ import annotations

import logging
import sys
import traceback
import warnings

logger = logging.getLogger("diffugrpo")


def _register_all() -> None:
    from diffugrpo_plugin.integration import algorithm, entrypoint, platform, resolvers, reward_manager, rollout
    from diffugrpo_plugin.models.native import register_with_transformers

    assert platform.PlatformCPU  # registered by its decorator on import
    register_with_transformers()  # verl's model config and engine load through AutoConfig / AutoModel
    algorithm.register()
    rollout.register()
    reward_manager.register()
    resolvers.register()
    entrypoint.install_verl_trainer_main_alias()
    # The engine and trainer register through verl decorators when imported. Importing verl's engine
    # package warns once per optional backend it lacks (megatron, veomni, ...), none of which we use.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".* engine is not available", category=UserWarning)
        from diffugrpo_plugin.integration import engine, trainer  # noqa: F401
    from diffugrpo_plugin.integration.console import quiet_worker_output

    quiet_worker_output()  # a Ray worker of a quiet run keeps its terminal for errors (see .console)


try:
    _register_all()
except Exception as exc:  # noqa: BLE001 - reported loudly, then re-raised for verl
    message = "diffugrpo failed to register with verl; coupled_grpo will not be available.\n" + "".join(
        traceback.format_exception(exc)
    )
    logger.error(message)
    print(f"[diffugrpo] ERROR: {message}", file=sys.stderr, flush=True)
    raise

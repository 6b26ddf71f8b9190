"""The ``diffusion`` rollout: verl's rollout interface served by our diffusion samplers.

No inference engine generates with LLaDA/Dream/DiffuCoder, so ``actor_rollout_ref.rollout.name=diffusion``
registers three small pieces in verl's two rollout registries:

* :class:`DiffusionRollout` (``BaseRollout``): lives in each trainer worker process (hybrid
  engine, colocated with the actor). It keeps an unsharded copy of the policy on the worker's
  device, receives every weight update verl pushes after a training step, and runs the sampler.
* the server, :class:`~diffugrpo_plugin.serving.request_batcher.RequestBatcher`: a light Ray actor with verl's
  token-in/token-out ``generate``. It gathers the requests that arrive together (verl's agent loop
  sends one per sample); a thread in the worker (:func:`_serve_from_worker`) pulls each batch, runs it
  through the worker's :class:`DiffusionRollout` and delivers the results. The server never calls the
  worker, so it never loads the worker's class, torch or verl.
* :class:`DiffusionReplica` (``RolloutReplica``): one server per trainer worker, so generation is
  data-parallel across workers.

Why not a separate rollout engine process: the sampler is plain torch on the same device as the
actor, so running it inside the worker shares the device, needs no weight transfer across
processes, and follows every update (``test_rollout`` changes the actor's weights and sees the
rollout change). Sampler settings come from ``actor_rollout_ref.rollout.engine_kwargs.diffusion``.

The package: :mod:`.worker` (the trainer worker's half), :mod:`.replica` (the driver's), :mod:`.servers` (where
the servers start). The servers themselves are in :mod:`diffugrpo_plugin.serving`, outside this package: importing
anything under ``integration`` imports verl, and a server's process must stay near Ray's own footprint.
"""

from diffugrpo_plugin.integration.rollout.replica import AnnouncedDispatches, DiffusionReplica, announced
from diffugrpo_plugin.integration.rollout.worker import NAME, DiffusionRollout
from diffugrpo_plugin.integration.verl_internals import register_rollout_adapter

__all__ = ["NAME", "AnnouncedDispatches", "DiffusionReplica", "DiffusionRollout", "announced", "register"]


def register() -> None:
    """``diffusion`` in verl's two rollout registries and our agent loop in verl's (called by ``integration.register``)."""
    from verl.experimental.agent_loop.agent_loop import register as register_agent_loop
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    from diffugrpo_plugin.integration.agent_loop import NAME as AGENT_LOOP
    from diffugrpo_plugin.integration.agent_loop import DiffusionAgentLoop

    register_rollout_adapter(NAME, f"{DiffusionRollout.__module__}.DiffusionRollout")
    RolloutReplicaRegistry.register(NAME, lambda: DiffusionReplica)
    register_agent_loop(AGENT_LOOP)(DiffusionAgentLoop)

"""The rollout's half in the driver: :class:`DiffusionReplica` (verl's ``RolloutReplica``) starts one server per
trainer worker; :func:`announced` wraps verl's agent-loop manager so the server knows how many requests a step sends."""

from __future__ import annotations

import ray

from verl.workers.rollout.replica import RolloutReplica

from diffugrpo_plugin.integration.rollout.servers import spare_server, start_server
from diffugrpo_plugin.integration.rollout.worker import NAME, _serve_from_worker
from diffugrpo_plugin.integration.verl_internals import set_replica_server
from diffugrpo_plugin.serving.request_batcher import RequestBatcher


class DiffusionReplica(RolloutReplica):
    """One server (:class:`~diffugrpo_plugin.serving.request_batcher.RequestBatcher`) per trainer worker (rollout tensor
    parallel size must be 1), on the worker's node: a spare one there if the lean layout started it
    (:func:`~diffugrpo_plugin.integration.rollout.servers.start_directory_server`), a new one otherwise."""

    async def launch_servers(self):
        if self.world_size != 1:
            raise ValueError(
                f"the diffusion rollout runs one sampler per trainer worker; set "
                f"actor_rollout_ref.rollout.tensor_model_parallel_size=1 (and data/pipeline parallel "
                f"sizes 1); got a rollout world size of {self.world_size}"
            )
        worker = self.workers[0]
        node_id = await worker.__ray_call__.remote(lambda _self: ray.get_runtime_context().get_node_id())
        server = spare_server(node_id) or start_server(
            RequestBatcher, node_id, name=f"diffusion_server_{self.replica_rank}{self.name_suffix}"
        )
        await worker.__ray_call__.remote(_serve_from_worker, server)
        set_replica_server(self, server, f"diffusion://replica-{self.replica_rank}")


class AnnouncedDispatches:
    """Stands in for verl's agent-loop manager in the trainer: each ``generate_sequences(batch)`` first tells the
    rollout server how many requests it sends (a prompt's ``__rollout_n__``, else ``rollout.n``, or
    ``rollout.val_kwargs.n`` for a validation batch), so that they reach the sampler as one batch
    (:meth:`~diffugrpo_plugin.serving.request_batcher.RequestBatcher.expect`). Only with one server: with several,
    the router decides which gets which. Everything else is the manager's."""

    def __init__(self, manager, server: ray.actor.ActorHandle, rollout_config):
        self._manager, self._server, self._rollout_config = manager, server, rollout_config

    def generate_sequences(self, batch):
        ray.get(self._server.expect.remote(self.requests_in(batch)))
        return self._manager.generate_sequences(batch)

    def requests_in(self, batch) -> int:
        validate = "validate" in batch and bool(batch["validate"])
        default = int(self._rollout_config.val_kwargs.n if validate else self._rollout_config.n)
        if "__rollout_n__" not in batch:
            return default * len(batch)
        return sum(int(n) for n in batch["__rollout_n__"])

    def __getattr__(self, name: str):
        return getattr(self._manager, name)


def announced(manager, server_handles: list, rollout_config):
    """``manager`` behind :class:`AnnouncedDispatches` where the rollout is ours and has one server; as it is else."""
    if rollout_config.name != NAME or len(server_handles) != 1:
        return manager
    return AnnouncedDispatches(manager, server_handles[0], rollout_config)

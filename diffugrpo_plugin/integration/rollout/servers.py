"""Where the diffusion rollout's servers start: one
:class:`~diffugrpo_plugin.serving.request_batcher.RequestBatcher` per trainer worker, on its node, or the spare one
the lean layout starts before any replica, TransferQueue's directory, which is a server too
(:class:`~diffugrpo_plugin.serving.transfer_queue_directory.RolloutServerAndDirectory`). Kept apart from
:mod:`.rollout` so that :mod:`.layout` can start the spare without importing the rollout."""

from __future__ import annotations

import ray

from diffugrpo_plugin.serving.transfer_queue_directory import RolloutServerAndDirectory

SERVER_MAX_CONCURRENCY = 1_000_000  # asyncio calls at once in the server: requests are cheap coroutines


def start_server(server_class: type, node_id: str, name: str, namespace: str | None = None) -> ray.actor.ActorHandle:
    """A ``server_class`` actor named ``name`` on node ``node_id``."""
    return (
        ray.remote(server_class)
        .options(
            name=name,
            namespace=namespace,
            num_cpus=0,
            # every waiting generate() holds a slot until its batch comes back, and the worker's pulls need theirs:
            # verl's cap (1000 and up) would deadlock a server holding that many requests
            max_concurrency=SERVER_MAX_CONCURRENCY,
            scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
                node_id=node_id, soft=False
            ),
        )
        .remote()
    )


_spare_servers: dict[str, ray.actor.ActorHandle] = {}
"""Servers started before any replica, by node id: the first replica whose worker is on that node takes it."""


def start_directory_server(name: str, namespace: str) -> ray.actor.ActorHandle:
    """The lean layout's TransferQueue directory under ``name`` in ``namespace``
    (:class:`~diffugrpo_plugin.serving.transfer_queue_directory.RolloutServerAndDirectory`), on this process's node,
    held there as the server of the first replica whose worker is on it: one light process (about 70 MiB) less
    than a directory and a server. :func:`forget_spare_server` drops it when TransferQueue closes first."""
    node_id = ray.get_runtime_context().get_node_id()
    server = start_server(RolloutServerAndDirectory, node_id, name=name, namespace=namespace)
    _spare_servers[node_id] = server
    return server


def forget_spare_server(server: ray.actor.ActorHandle) -> None:
    """``server`` is no spare any more (TransferQueue closed before a replica took it)."""
    for node_id, spare in list(_spare_servers.items()):
        if spare == server:
            del _spare_servers[node_id]


def spare_server(node_id: str) -> ray.actor.ActorHandle | None:
    """The spare server on ``node_id``, taken: None if there is none (or another replica took it)."""
    return _spare_servers.pop(node_id, None)

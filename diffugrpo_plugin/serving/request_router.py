"""The rollout's request router: which rollout server takes each generation request.

verl's agent loop asks a load-balancer actor for a server before every request (``acquire_server``) and tells it
when the request is done (``release_server``). verl's own balancer (``GlobalRequestLoadBalancer``) keeps requests of
one session on one server so that an inference engine can reuse their cached prefix; a diffusion server caches
nothing between requests, so that buys nothing here. This one sends each request to the server with the fewest
requests in flight. It is a Ray actor of its own, as verl's is, and for the same reason as
:mod:`.request_batcher` this module imports neither torch, verl nor Ray: the actor's process then stays near Ray's
bare worker (about 70 MiB) instead of the ~430 MiB that importing verl's balancer costs it.

verl builds it from ``actor_rollout_ref.rollout.router_config_path`` (a YAML file whose ``router_class`` names this
class; the ``config/rollout_router/least_busy.yaml`` shipped with the package), calling ``LeastBusyRouter(servers,
yaml_config)``. The methods are verl's ``RequestLoadBalancer`` protocol (``verl/workers/rollout/router.py``).
"""

from __future__ import annotations

from typing import Any


class LeastBusyRouter:
    """Each request to the server with the fewest requests in flight (ties: the first added)."""

    def __init__(self, servers: dict[str, Any], config: dict | None = None):
        self._servers: dict[str, Any] = {}
        self._in_flight: dict[str, int] = {}
        self.add_servers(servers)

    def acquire_server(self, request_id: str, **_fields) -> tuple[str, Any]:
        if not self._servers:
            raise RuntimeError("No available servers in load balancer")  # verl's words, which its clients match
        server_id = min(self._in_flight, key=self._in_flight.__getitem__)
        self._in_flight[server_id] += 1
        return server_id, self._servers[server_id]

    def release_server(self, server_id: str, request_id: str | None = None) -> None:
        if self._in_flight.get(server_id, 0) > 0:
            self._in_flight[server_id] -= 1

    def require_acquire_fields(self) -> list[str]:
        return []

    def require_release_fields(self) -> list[str]:
        return []

    def add_servers(self, servers: dict[str, Any]) -> None:
        for server_id, handle in servers.items():
            self._servers[server_id] = handle
            self._in_flight.setdefault(server_id, 0)

    def remove_servers(self, server_ids: list[str]) -> None:
        for server_id in server_ids:
            self._servers.pop(server_id, None)
            self._in_flight.pop(server_id, None)

    def get_all_servers(self) -> list[str]:
        return list(self._servers)

    def get_status(self) -> dict:
        return {
            "servers": dict(self._in_flight),
            "total_inflight": self.get_total_inflight(),
            "active_servers": len(self._servers),
            "registered_handles": list(self._servers),
        }

    def clear_sticky_cache(self) -> dict:
        """No session stickiness to clear; verl's trainers call this on phase switches."""
        return {"cleared_entries": 0, "server_loads": dict(self._in_flight)}

    def get_total_inflight(self) -> int:
        return sum(self._in_flight.values())

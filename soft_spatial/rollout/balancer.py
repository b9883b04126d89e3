"""The rollout servers' request load balancer, in a Ray worker that imports neither verl nor torch.

verl 0.9.1 routes every agent-loop request through one ``GlobalRequestLoadBalancer`` actor
(``verl/workers/rollout/router.py``): a dict of in-flight counters and a sticky cache, in a
process of its own whose module imports verl, and with it torch, tensordict and transformers
(6-7 s of CPU at every training start, for nothing the balancer uses). :class:`LoadBalancer`
routes as it does, from a module that imports only the standard library: a request id seen before
goes to the same server while that server is registered (an LRU cache of 10,000 ids), any other to
a server with the fewest requests in flight (ties at random), or, with verl's
``rollout.full_determinism`` (``VERL_FULL_DETERMINISM=1`` in every Ray process), to
``hash(request_id) % servers`` over the whole pool. It is verl's router plugin:
``actor_rollout_ref.rollout.router_config_path`` names ``configs/load_balancer.yaml``, whose
``router_class`` verl constructs with the servers and the YAML's dict.
"""
from __future__ import annotations

import os
import random
from collections import OrderedDict
from typing import Any

__all__ = ["LoadBalancer", "CACHE_SIZE"]

CACHE_SIZE = 10_000  # verl's DEFAULT_ROUTING_CACHE_SIZE


class LoadBalancer:
    """verl's ``RequestLoadBalancer`` protocol (sticky + least in flight); wrapped with
    ``ray.remote`` by verl."""

    def __init__(self, servers: dict[str, Any], config: dict | None = None):
        config = dict(config or {})
        self._servers: dict[str, Any] = dict(servers)
        self._inflight: dict[str, int] = {sid: 0 for sid in servers}
        self._sticky: OrderedDict[str, str] = OrderedDict()
        self._cache_size = int(config.get("max_cache_size", CACHE_SIZE))
        self._full_determinism = os.environ.get("VERL_FULL_DETERMINISM", "0") == "1"

    def acquire_server(self, request_id: str, **extra) -> tuple[str, Any]:
        server_id = self._sticky.get(request_id)
        if server_id is not None:
            if server_id in self._inflight:
                self._sticky.move_to_end(request_id)
                self._inflight[server_id] += 1
                return server_id, self._servers[server_id]
            del self._sticky[request_id]  # its server was removed: choose again
        if not self._inflight:
            raise RuntimeError("No available servers in load balancer")
        if self._full_determinism:
            server_id = list(self._servers)[hash(request_id) % len(self._servers)]
        else:
            least = min(self._inflight.values())
            server_id = random.choice([sid for sid, n in self._inflight.items() if n == least])
        self._sticky[request_id] = server_id
        if len(self._sticky) > self._cache_size:
            self._sticky.popitem(last=False)
        self._inflight[server_id] += 1
        return server_id, self._servers[server_id]

    def release_server(self, server_id: str, request_id: str | None = None) -> None:
        if self._inflight.get(server_id, 0) > 0:
            self._inflight[server_id] -= 1

    def require_acquire_fields(self) -> list[str]:
        return []

    def require_release_fields(self) -> list[str]:
        return []

    def add_servers(self, servers: dict[str, Any]) -> None:
        for sid, handle in servers.items():
            self._inflight[sid] = 0
            self._servers[sid] = handle

    def remove_servers(self, server_ids: list[str]) -> None:
        for sid in server_ids:
            self._inflight.pop(sid, None)
            self._servers.pop(sid, None)

    def get_inflight_count(self, server_id: str) -> int:
        return self._inflight.get(server_id, 0)

    def get_all_servers(self) -> list[str]:
        return list(self._inflight)

    def clear_sticky_cache(self) -> dict:
        cleared = len(self._sticky)
        self._sticky.clear()
        return {"cleared_entries": cleared, "server_loads": dict(self._inflight)}

    def get_status(self) -> dict:
        return {"servers": dict(self._inflight), "total_inflight": sum(self._inflight.values()),
                "active_servers": len(self._inflight), "registered_handles": list(self._servers)}

    def get_total_inflight(self) -> int:
        return sum(self._inflight.values())

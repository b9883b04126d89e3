"""What soft_spatial relies on in Ray beyond its documented API (written against ray 2.60).

Today nothing private is needed: the launcher's node address (``soft_spatial/launch/plan.py``; the
former bash launcher read ``ray._private.services.get_node_ip_address``) is Ray's public
``ray.util.get_node_ip_address`` (same function body in 2.60). :func:`node_ip_address` is the one
call to use, and :func:`check_internals` says when Ray changes it.
"""
from __future__ import annotations

__all__ = ["RAY_VERSION", "node_ip_address", "check_internals"]

RAY_VERSION = "2.60.0"  # checked with; pyproject allows ray>=2.41


def node_ip_address() -> str:
    """This node's IP address as Ray sees it: the running node's address inside a Ray process,
    else the address this host reaches the network from (``ray.util.get_node_ip_address``)."""
    import ray.util

    return ray.util.get_node_ip_address()


def check_internals() -> list:
    """Problems with what this module relies on (empty = OK)."""
    import ray.util

    problems = []
    if not callable(getattr(ray.util, "get_node_ip_address", None)):
        problems.append("ray.util.get_node_ip_address is gone (node_ip_address)")
    return problems

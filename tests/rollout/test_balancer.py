"""The rollout servers' load balancer (`soft_spatial.rollout.balancer`) routes as verl 0.9.1's
``GlobalRequestLoadBalancer`` does (sticky per request id, else least in flight; hash routing with
``VERL_FULL_DETERMINISM=1``), and its module imports neither verl nor torch: the point of it."""
import random
import subprocess
import sys
from pathlib import Path

import pytest

from soft_spatial.rollout.balancer import LoadBalancer

ROOT = Path(__file__).resolve().parents[2]


def test_its_module_imports_neither_verl_nor_torch():
    code = ("import sys, soft_spatial.rollout.balancer; "
            "print(sorted(m for m in ('verl', 'torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


def test_it_routes_as_verls_balancer(monkeypatch):
    """The same calls to both balancers (verl's with its random choices drawn from the same
    seed) acquire the same servers, count the same loads and clear the same sticky entries."""
    pytest.importorskip("verl")
    from verl.workers.rollout.router import GlobalRequestLoadBalancer

    monkeypatch.delenv("VERL_FULL_DETERMINISM", raising=False)
    servers = {"a": "handle-a", "b": "handle-b", "c": "handle-c"}
    ours, verls = LoadBalancer(servers, {"router_class": "x"}), GlobalRequestLoadBalancer(servers)
    script = random.Random(0)
    calls = []
    for i in range(200):
        op = script.choice(["acquire", "acquire", "release", "remove", "add", "clear"])
        if op == "acquire":
            calls.append(("acquire_server", (f"r{script.randrange(30)}",)))
        elif op == "release":
            calls.append(("release_server", (script.choice("abcd"),)))
        elif op == "remove" and i % 17 == 0:
            calls.append(("remove_servers", ([script.choice("abc")],)))
        elif op == "add" and i % 13 == 0:
            calls.append(("add_servers", ({script.choice("abcd"): f"handle-{i}"},)))
        elif op == "clear" and i % 29 == 0:
            calls.append(("clear_sticky_cache", ()))
    results = []
    for balancer in (ours, verls):
        random.seed(1)
        got = []
        for name, args in calls:
            try:
                got.append(getattr(balancer, name)(*args))
            except RuntimeError as e:  # no server left
                got.append(str(e))
            got.append((balancer.get_status()["servers"], balancer.get_all_servers(),
                        balancer.get_total_inflight()))
        results.append(got)
    assert results[0] == results[1]
    assert ours.require_acquire_fields() == [] and ours.require_release_fields() == []


def test_full_determinism_routes_by_the_request_ids_hash(monkeypatch):
    monkeypatch.setenv("VERL_FULL_DETERMINISM", "1")
    servers = {"a": 1, "b": 2}
    balancer = LoadBalancer(servers)
    for rid in ("x", "y", "z"):
        server, _ = balancer.acquire_server(rid)
        assert server == list(servers)[hash(rid) % 2]


def test_the_sticky_cache_keeps_the_most_recent_ids():
    balancer = LoadBalancer({"a": 1, "b": 2}, {"max_cache_size": 2})
    first = balancer.acquire_server("r0")[0]
    balancer.acquire_server("r1")
    balancer.acquire_server("r0")  # used again: kept over r1
    balancer.acquire_server("r2")
    assert balancer.clear_sticky_cache()["cleared_entries"] == 2
    assert first in ("a", "b")

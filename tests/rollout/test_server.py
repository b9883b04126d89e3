"""The local rollout server (`soft_spatial.rollout.server`), called directly (no Ray): a generation
batch whose rows carry noise keys is decoded once all its rows are in, in key order, seeded from
the keys, one engine call per set of sampling params; each answer is verl's TokenOutput with the
response's records, one per token, and the weight version it was sampled with; a failed batch
fails each of its requests and the server goes on; fresh request ids and another arrival order give
the same rollouts. (That two training runs draw the same rollouts: tests/e2e/test_train_signals.py.)"""
import asyncio
import uuid

import pytest

from soft_spatial.rollout.server import LocalSoftServer
from soft_spatial.softthink.noise import NoiseKey, noise_param, request_seed
from soft_spatial.softthink.settings import SoftSettings
from soft_spatial.softthink.trace import TRACE_FIELD

PROMPTS = [[5, 9, 13, 40], [7, 8], [11, 12, 13, 14, 15, 16], [21, 22, 23], [30, 31]]


@pytest.fixture(scope="module")
def server(tiny_qwen3_vl_small):
    pytest.importorskip("verl")
    return LocalSoftServer(str(tiny_qwen3_vl_small), response_length=6, prompt_length=64,
                           settings=SoftSettings.from_dict({"soft_thinking": {"mode": "fixed"}, "seed": 3}))


@pytest.fixture
def calls(server, monkeypatch):
    """Every engine.generate call of the server: (prompt ids, seeds, temperature)."""
    seen, generate = [], server.engine.generate

    def spy(prompts, **kw):
        seen.append(([p["prompt_ids"] for p in prompts], kw["seeds"], kw["sampling"].temperature))
        return generate(prompts, **kw)

    monkeypatch.setattr(server.engine, "generate", spy)
    return seen


def send(server, order, rows, batch=0, temperature=lambda i: 1.0):
    """Requests for rows ``order`` of generation batch ``batch`` (``rows`` rows), sent together in
    that order, their request ids unrelated to their keys; {row: answer or exception}."""
    keys = {i: NoiseKey(False, 1, batch, i) for i in order}

    async def one(i):
        params = {"temperature": temperature(i), **noise_param(keys[i], rows)}
        return await server.generate(f"req-{batch}-{i}-x", PROMPTS[i], params)

    async def main():
        return await asyncio.gather(*[one(i) for i in order], return_exceptions=True)

    return dict(zip(order, asyncio.run(main()))), keys


def test_a_keyed_batch_decodes_in_key_order_one_call_per_sampling_setting(server, calls):
    out, keys = send(server, [3, 0, 4, 1, 2], rows=5)
    assert calls == [(PROMPTS, [request_seed(3, keys[i]) for i in range(5)], 1.0)]
    calls.clear()
    out, keys = send(server, [4, 1, 2, 0], rows=4, batch=1, temperature=lambda i: 0.7 if i % 2 else 1.0)
    assert sorted(calls, key=lambda c: c[2]) == [
        ([PROMPTS[1]], [request_seed(3, keys[1])], 0.7),
        ([PROMPTS[0], PROMPTS[2], PROMPTS[4]], [request_seed(3, keys[i]) for i in (0, 2, 4)], 1.0)]
    for i, answer in out.items():
        trace = answer.extra_fields[TRACE_FIELD]
        assert 0 < len(answer.token_ids) <= 6 and len(answer.log_probs) == len(answer.token_ids)
        assert {len(v) for v in trace.values()} == {len(answer.token_ids)}  # one record per token
        assert answer.stop_reason in ("completed", "length")
        assert answer.extra_fields["soft_weight_version"] == server.weight_version


def test_a_weight_update_is_counted_and_a_failed_batch_fails_each_of_its_requests(server, calls,
                                                                                  monkeypatch):
    before = server.weight_version
    state = {k: v.clone() for k, v in server.engine.model.state_dict().items()}
    assert server.update_weights(state) == before + 1
    out, _ = send(server, [0], rows=1, batch=2)
    assert out[0].extra_fields["soft_weight_version"] == before + 1
    generate = server.engine.generate
    monkeypatch.setattr(server.engine, "generate", lambda prompts, **kw: 1 / 0)
    out, _ = send(server, [1, 0, 2], rows=3, batch=3)
    assert all(isinstance(out[i], ZeroDivisionError) for i in (0, 1, 2))
    monkeypatch.setattr(server.engine, "generate", generate)
    out, _ = send(server, [1, 0], rows=2, batch=4)  # the server goes on
    assert all(len(out[i].token_ids) > 0 for i in (0, 1))
    with pytest.raises(ValueError, match="does not support video"):
        asyncio.run(server.generate("v", PROMPTS[0], {}, video_data=[object()]))


def test_local_server_rollouts_do_not_depend_on_request_ids_or_arrival(tiny_qwen3_vl_small):
    """The same generation batch sent twice, with fresh random request ids, rows arriving in a
    different order and in bursts wider than the batching window: identical rollouts (the
    server seeds from the noise key and decodes the whole batch in key order)."""
    pytest.importorskip("verl")
    from soft_spatial.rollout.server import LocalSoftServer

    server = LocalSoftServer(str(tiny_qwen3_vl_small), response_length=8, prompt_length=64,
                             settings=SoftSettings.from_dict({"soft_thinking": {"mode": "fixed"}, "seed": 3,
                                                              "max_batch_rows": 4}))
    prompts = [[5, 9, 13, 40], [7, 8], [11, 12, 13, 14, 15, 16], [5, 9, 13, 40],
               [21, 22, 23], [7, 8]]
    n = len(prompts)

    async def send(order, gaps):
        async def one(i, delay):
            await asyncio.sleep(delay)
            params = {"temperature": 1.0, **noise_param(NoiseKey(False, 1, 0, i), n)}
            return i, await server.generate(uuid.uuid4().hex, prompts[i], params)
        done = await asyncio.gather(*[one(i, g) for i, g in zip(order, gaps)])
        return {i: o for i, o in done}

    a = asyncio.run(send(range(n), [0.0] * n))
    b = asyncio.run(send([5, 2, 0, 4, 1, 3], [0.0, 0.1, 0.1, 0.25, 0.25, 0.4]))
    for i in range(n):
        assert a[i].token_ids == b[i].token_ids
        assert a[i].log_probs == b[i].log_probs
        assert a[i].extra_fields["soft_trace"] == b[i].extra_fields["soft_trace"]
    assert a[0].extra_fields["soft_trace"] != a[3].extra_fields["soft_trace"]  # same prompt

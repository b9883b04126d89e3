"""Overlap scheduling (``disable_overlap_schedule=False``) through SGLang 0.5.12's REAL offline
engine on the CPU: the same rows decode to the same tokens, candidates, weights, τ and
log-likelihoods with overlap on as with it off, in adaptsoft mode (docs/sglang.md, "Overlap
scheduling"). Fixed and hard mode are not run on their own: adaptsoft's decoding is fixed's (the
top-K mixture, the noise of the row's step, the ``</think>`` switch) with the controller's τ, which
reads the previous step's hidden state, the part overlap's one-step lag could break; every row
here decodes discretely after its ``</think>`` (asserted below), the plugin's hard path under
overlap. This is the suite's one run of the plugin under overlap (the GPU kit's X/overlap-parity
makes the same comparison with its own engines on a device: tests/bench/gpu/test_overlap.py).

Under overlap SGLang launches batch t+1 before it processes batch t's results, so a request's
``output_ids`` lags its sampled steps by one, and a request that finished at t rides along in
t+1 (its row is sampled and discarded); the batch log shows that this happened here.

What is compared (token-id prompts × 2 samples batched, and every prompt alone — the image
prompt included — 16 steps, fp32):

* **the same batches on both sides**: bit for bit — where the batch logs show the same batches
  (ride-along rows aside), checked first: on a machine busy with other work requests reach the
  scheduler at other times and SGLang batches them otherwise, which is no fault of the plugin
  (there: the same path and fp32 rounding). Overlap changes batch shapes in two ways that
  are SGLang's, not the plugin's: a finished row rides along one more batch (so rows that stop at
  different steps meet other batch sizes), and, with the radix cache, a sample's first decode
  reads another copy of its shared prompt's KV (when SGLang processes a prefill's result,
  ``RadixCache.cache_unfinished_req`` frees the request's own copy of KV the tree already holds
  and points it at the tree's, computed in another batch; without overlap that happens before
  the first decode, with overlap after it). So rows alone (eos and length stops, radix cache off
  and on) and a batch whose rows all run to the length limit with the radix cache off are
  compared bit for bit.
* **rows of different lengths sharing prompts through the radix cache** (the default
  configuration): the same path (tokens, candidates, soft flags), values within fp32 rounding.

Repeat runs are comparable because the token-id prompts of one ``generate`` reach the scheduler
in one message (the tokenizer manager batches requests without text or images): the same
prefill grouping every run. A batch with the image prompt is sent request by request, and its
grouping varies from run to run, so the image prompt is compared decoded alone.
"""
from __future__ import annotations

import pytest
import torch
from controller_helpers import trained_controller
from real_engine import PROMPTS, batch_log, clear_batch_log, running_engine

from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig, record_weights

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

SAMPLING = SamplingConfig(temperature=0.8, max_new_tokens=16)


def _fields(out) -> dict:
    tr = out.trace
    return {"token_ids": torch.tensor(out.token_ids), "topk_ids": tr.topk_ids, "soft": tr.soft,
            "weights": record_weights(tr.scores, tr.tau, tr.soft), "tau": tr.tau,
            "loglik": torch.tensor(out.logprobs)}


def deviation(got, want) -> dict:
    """max |Δ| per field over all rows and steps (inf where a row's length or path differs)."""
    dev: dict[str, float] = {}
    assert len(got) == len(want)
    for a, b in zip(got, want):
        for f, x in _fields(a).items():
            y = _fields(b)[f]
            d = float("inf") if x.shape != y.shape else float((x.double() - y.double()).abs().max()) \
                if x.numel() else 0.0
            dev[f] = max(dev.get(f, 0.0), d)
    return dev


def ride_alongs(log: list[dict], outs, n: int) -> int:
    """Rows decoded once more than their output needed: a request that finished at batch t
    sampled again in t+1 (overlap scheduling). Rows are ``soft-<tag>-<prompt>-<sample>``."""
    decodes: dict[int, int] = {}
    for b in log:
        if b["mode"] == "DECODE":
            for rid, *_ in b["rows"]:
                i, j = map(int, rid.split("-")[-2:])
                decodes[i * n + j] = decodes.get(i * n + j, 0) + 1
    return sum(decodes.get(r, 0) >= len(o.token_ids) for r, o in enumerate(outs))


@pytest.fixture(scope="module")
def controller(tmp_path_factory):
    path = tmp_path_factory.mktemp("ctrl") / "adaptsoft.pt"
    trained_controller(64, seed=4).save(path)
    return path


def _runs(think_tiny, soft, ctrl, path, overlap: bool, radix: bool):
    """Token-id prompts × 2 samples batched (radix cache off: eos off, every row to the length
    limit), every prompt alone, how many rows rode along, and the batched run's batches."""
    path.mkdir()
    with running_engine(think_tiny, soft, path, controller=ctrl,
                        disable_overlap_schedule=not overlap, disable_radix_cache=not radix) as eng:
        assert eng.backend.get_server_info()["disable_overlap_schedule"] is not overlap
        ids_prompts = [p for p in PROMPTS if isinstance(p[0], int)]
        eos, eng.eos_ids = eng.eos_ids, (eng.eos_ids if radix else [])
        batched = eng.generate(ids_prompts, soft_thinking=soft, sampling=SAMPLING, n=2, seed=9)
        log = batch_log(eng)
        rides = ride_alongs(log, batched, 2)
        shapes = _shapes(log, {f"{i}-{j}": len(o.token_ids) for i in range(len(ids_prompts))
                               for j, o in enumerate(batched[2 * i:2 * i + 2])})
        eng.eos_ids = eos
        eng.backend.flush_cache()
        clear_batch_log(eng)
        alone = [eng.generate([p], soft_thinking=soft, sampling=SAMPLING, seed=9 + i)[0]
                 for i, p in enumerate(PROMPTS)]
        alone_shapes = _shapes(batch_log(eng), [len(o.token_ids) for o in alone])
    return batched, alone, rides, shapes, alone_shapes


def _shapes(log: list[dict], lengths) -> list:
    """The batches that computed the outputs: each E/D, its rows and their extend lengths, a row
    named by its request's order of first appearance (run tags differ between sides), without
    the decode rows that ride along after their request finished (overlap scheduling samples
    them once more and discards them). ``lengths``: each output's tokens, by request key
    ("<prompt>-<sample>") or, for requests sent one at a time, in order."""
    order: dict[str, int] = {}
    decodes: dict[str, int] = {}
    out = []
    for b in log:
        rows = []
        for rid, _, k in b["rows"]:
            n = order.setdefault(rid, len(order))
            if b["mode"] == "DECODE" and not rid.endswith("-prefill"):
                tokens = (lengths[rid.split("-", 2)[-1]] if isinstance(lengths, dict)
                          else lengths[_nth(order, rid)])
                decodes[rid] = decodes.get(rid, 0) + 1
                if decodes[rid] > tokens - 1:  # the first token comes from the extend batch
                    continue  # a ride-along: its result is discarded
            rows.append((n, k))
        if rows:
            out.append((b["mode"][0], rows))
    return out


def _nth(order: dict[str, int], rid: str) -> int:
    """The position of ``rid`` among the requests (prefill-only ones aside) in order of arrival."""
    return sum(1 for r, i in order.items() if not r.endswith("-prefill") and i < order[rid])


def same_batches(on: list, off: list) -> bool:
    """Whether overlap on computed its outputs in the batches overlap off did."""
    return on == off


@pytest.mark.parametrize("mode", ["adaptsoft"])  # fixed and hard: the module docstring
def test_overlap_on_equals_off(mode, think_tiny, tmp_path, request):
    soft = SoftThinkingConfig(mode=mode, top_k=4)
    ctrl = request.getfixturevalue("controller") if mode == "adaptsoft" else None
    assert 0 < sum(isinstance(p[0], int) for p in PROMPTS) < len(PROMPTS)  # ids and an image
    got = {(overlap, radix): _runs(think_tiny, soft, ctrl, tmp_path / f"{overlap}-{radix}",
                                   overlap, radix)
           for radix in (False, True) for overlap in (False, True)}
    for radix in (False, True):
        assert got[(False, radix)][2] == 0 and got[(True, radix)][2] > 0  # overlap ran
    # bit for bit where both sides computed the same batches (the batch logs say so first: a
    # machine busy elsewhere changes when requests reach the scheduler, and with it the batches):
    # the batched rows (radix cache off, rows of one length) and every row alone (eos and length
    # stops), radix cache off and on; where the batches differ, the path and fp32 rounding
    pairs = [(got[(True, False)][0], got[(False, False)][0], got[(True, False)][3],
              got[(False, False)][3])]
    pairs += [(got[(True, r)][1], got[(False, r)][1], got[(True, r)][4], got[(False, r)][4])
              for r in (False, True)]
    compared = 0
    for rows_on, rows_off, shapes_on, shapes_off in pairs:
        dev = deviation(rows_on, rows_off)
        if same_batches(shapes_on, shapes_off):
            compared += 1
            assert dev == dict.fromkeys(dev, 0.0), (dev, shapes_on, shapes_off)
        else:
            assert all(dev[f] == 0.0 for f in ("token_ids", "topk_ids", "soft")), dev
            assert max(dev.values()) < 5e-3, dev
    print(f"{mode}: {compared} of {len(pairs)} comparisons had the same batches (bit for bit)")
    # rows of different lengths sharing prompts through the radix cache: the same path, and
    # fp32 rounding of other batch shapes and of the shared prompt's KV (module docstring)
    shared = deviation(got[(True, True)][0], got[(False, True)][0])
    batches = {f"overlap {'on' if o else 'off'}": got[(o, True)][3] for o in (True, False)}
    print(f"\n{mode}: batched, radix cache on, eos on, overlap on vs off: {shared}\n{batches}")
    assert all(shared[f] == 0.0 for f in ("token_ids", "topk_ids", "soft")), (shared, batches)
    assert max(shared.values()) < 5e-3, (shared, batches)
    # what the rows cover: </think> switches (soft, then discrete steps), eos and length stops
    out = got[(True, True)][0] + got[(True, False)][1]
    assert {o.finish_reason for o in out} == {"stop", "length"}
    assert any(o.think_end is not None and o.think_end + 1 < len(o.token_ids) for o in out)
    assert any(bool(o.trace.soft.any()) and not bool(o.trace.soft[-1]) for o in out)

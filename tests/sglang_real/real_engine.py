"""Test helper (no tests here): SGLang 0.5.12's real offline engine on the CPU with the soft plugin.

* :data:`CPU_SERVER_ARGS` — the server arguments that run the real engine here (scheduler
  subprocess, memory pool, radix cache, the Qwen3-VL forward with its vision tower):
  ``torch_native`` attention (no flashinfer), no grammar backend (no xgrammar), fp32, a small KV
  pool; what soft decoding needs is added by :class:`SGLangEngine` as on a GPU.
* :func:`running_engine` — an :class:`SGLangEngine` whose teardown checks that every process the
  engine started is gone (SGLang's ``shutdown`` kills the process tree; zombies are reaped).
* :func:`think_model` — the tiny Qwen3-VL with larger ``</think>`` and ``<|im_end|>`` rows in its
  output layer, so within 16 steps rows switch to discrete decoding, stop on eos, or run to the
  length limit (the same weights for both engines).
* :func:`assert_parity` / :func:`assert_replays` — SGLang's completions against the local
  engine's (tolerances and why in their docstrings).
* :class:`WireLog` — every batch output the tokenizer manager receives (rids, new output ids,
  record slices), to check that each step's record travels once.
* :func:`batch_log` — the scheduler's batches (tests/sglang_stubs/sglang_cpu instrumentation).
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
from pathlib import Path

import psutil
import torch
from PIL import Image

from soft_spatial.engines.sglang.records import RECORD_KEY, step_records
from soft_spatial.engines.sglang.engine import SGLangEngine

def chat(color, size, text):
    """A one-image chat prompt."""
    img = Image.new("RGB", size, color)
    return [{"role": "user", "content": [{"type": "image", "image": img},
                                         {"type": "text", "text": text}]}]


# token-id and image prompts; with think_model, seed 7 and 16 steps they cover the </think>
# switch, eos and length stops (checked where used)
PROMPTS = [[5, 17, 42, 99, 7], [3, 8], [11, 12, 13, 14, 15, 16],
           chat((200, 30, 30), (96, 64), "Which side is red? A. left B. right")]
LONG = (lambda rng: [rng.randrange(30, 500) for _ in range(80)][40:])(random.Random(0))  # 40 ids

CPU_SERVER_ARGS = dict(device="cpu", attention_backend="torch_native", grammar_backend="none",
                       dtype="float32", skip_server_warmup=True, mem_fraction_static=0.5,
                       max_total_tokens=4096, log_level="error",
                       # an idle scheduler waits on its sockets instead of spinning a core (SGLang's
                       # default), a core the test's own work and the suite's other process need
                       sleep_on_idle=True)
BATCH_LOG_ENV = "SOFT_SPATIAL_SGLANG_BATCH_LOG"  # tests/sglang_stubs/sglang_cpu
STUB_CALLS_ENV = "SOFT_SPATIAL_STUB_CALLS"  # tests/sglang_stubs/_stub_support.py
STREAM_INTERVAL = 4  # SGLANG_FORCE_STREAM_INTERVAL: records of unstreamed requests in slices


def think_model(src, dst) -> Path:
    """Copy of the tiny model ``src`` whose ``</think>`` / ``<|im_end|>`` output rows are scaled
    by 3 / 2.5 (larger logits: more often the top candidate)."""
    from safetensors.torch import load_file, save_file
    from transformers import AutoTokenizer

    from soft_spatial.models import think_end_id
    dst = Path(dst)
    shutil.copytree(src, dst)
    tok = AutoTokenizer.from_pretrained(dst)
    sd = load_file(dst / "model.safetensors")
    sd["lm_head.weight"][think_end_id(tok)] *= 3.0
    sd["lm_head.weight"][tok.convert_tokens_to_ids("<|im_end|>")] *= 2.5
    save_file(sd, dst / "model.safetensors", metadata={"format": "pt"})
    return dst


@contextlib.contextmanager
def running_engine(model, soft, tmp_path, controller=None, **server_args):
    """An :class:`SGLangEngine` on the CPU with the scheduler's batch log and the stub-call log in
    ``tmp_path``; on exit no ``sgl_kernel`` placeholder may have been called, and after the
    shutdown no process it started may remain."""
    env = {BATCH_LOG_ENV: str(tmp_path / "batches.jsonl"),
           STUB_CALLS_ENV: str(tmp_path / "stub_calls.txt"),
           "SGLANG_FORCE_STREAM_INTERVAL": str(STREAM_INTERVAL)}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # inherited by the scheduler processes spawned now
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    engine = None
    try:
        engine = SGLangEngine(model, soft, controller=controller,
                              server_args={**CPU_SERVER_ARGS, **server_args})
        engine.started = [p for p in psutil.Process().children(recursive=True)
                          if p.pid not in before]
        engine.tmp_path = Path(tmp_path)
        yield engine
        assert stub_calls(engine) == []  # no sgl_kernel op was reached, in any process
    finally:
        if engine is not None:
            engine.close()
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    if engine is not None:
        assert_gone(engine.started)


def assert_gone(procs: list[psutil.Process]) -> None:
    """Every process in ``procs`` has exited (zombies are reaped first)."""
    for p in procs:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(p.pid, os.WNOHANG)
    _, alive = psutil.wait_procs(procs, timeout=30)
    alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"SGLang left processes behind: {[(p.pid, p.name()) for p in alive]}"


def stub_calls(engine) -> list[str]:
    """The sgl_kernel placeholders any process of the engine called."""
    f = engine.tmp_path / "stub_calls.txt"
    return f.read_text().split() if f.exists() else []


def batch_log(engine_or_file) -> list[dict]:
    """The scheduler's batches (of a :func:`running_engine`, or from a log file)."""
    f = getattr(engine_or_file, "tmp_path", None)
    f = f / "batches.jsonl" if f is not None else Path(engine_or_file)
    return [json.loads(line) for line in f.read_text().splitlines()] if f.exists() else []


def clear_batch_log(engine) -> None:
    (engine.tmp_path / "batches.jsonl").unlink(missing_ok=True)


def assert_prefill_shared(batch_file, prompts: int, n: int, rids=lambda rid: True) -> None:
    """The ``n`` samples of each of ``prompts`` prompts shared its prefill (radix cache + one
    prefill-only request per prompt, ``client.PromptPrefill``): the prefill-only requests computed
    what the cache did not hold yet (image tokens included), each sample only its last prompt token.
    ``rids``: which requests of the log to read (all by default)."""
    rows = [r for b in batch_log(batch_file) if b["mode"] == "EXTEND" for r in b["rows"]
            if rids(r[0])]
    prefills = [k for rid, _, k in rows if rid.endswith("-prefill")]
    samples = [k for rid, _, k in rows if not rid.endswith("-prefill")]
    assert len(prefills) == prompts and max(prefills) > 300, prefills
    assert len(samples) == prompts * n and set(samples) == {1}, samples


def assert_marked_gone(mark: str) -> None:
    """No process whose environment holds ``SOFT_SPATIAL_TEST_MARK=mark`` (every process a run
    started inherits it) is left after 30 s, the test process aside."""
    def environ(p):
        try:
            return p.environ()
        except (psutil.Error, OSError):
            return {}
    mine = [p for p in psutil.process_iter() if environ(p).get("SOFT_SPATIAL_TEST_MARK") == mark
            and p.pid != os.getpid()]
    _, left = psutil.wait_procs(mine, timeout=30)  # Ray's own processes exit after the run
    assert not left, f"the run left processes behind: {[p.name() for p in left]}"


class WireLog:
    """Wraps the tokenizer manager's ``_handle_batch_output`` (inside the plugin's record
    collection) and keeps, per request id, the list of (new output ids, record slices)."""

    def __init__(self, engine):
        self.slices: dict[str, list[tuple]] = {}
        tm = engine.backend.tokenizer_manager
        handle = tm._handle_batch_output

        async def logged(recv_obj):
            info = getattr(recv_obj, "customized_info", None) or {}
            for i, rid in enumerate(recv_obj.rids):
                out = recv_obj.output_ids[i] if recv_obj.output_ids is not None else None
                rows = (info.get(RECORD_KEY) or [[]] * len(recv_obj.rids))[i]
                rec = step_records(rows) if rows else {}
                self.slices.setdefault(rid, []).append((list(out or []), rec))
            return await handle(recv_obj)

        tm._handle_batch_output = logged
        self._restore = lambda: setattr(tm, "_handle_batch_output", handle)

    def close(self):
        self._restore()


FIELDS = ("scores", "tau", "u", "ctrl_x", "entropy")
# float32 rounding amplified over up to 16 soft steps in rows where the local fp32 run is tame:
# measured up to 1.7e-3 (scores of the radix test's follow-up row, whose prompt KV comes from the
# cache, summed in another order); a reused soft KV or a wrong noise stream moves records by
# O(0.1-1) or changes the path
ATOL = 3e-3
AMPLIFICATION = 4.0  # see assert_parity


def _dev(a, b, key) -> float:
    if key == "loglik":
        x, y = torch.tensor(a.logprobs), torch.tensor(b.logprobs)
    else:
        x, y = getattr(a.trace, key).float(), getattr(b.trace, key).float()
    return float((x - y).abs().max()) if x.numel() else 0.0


def _same_path(a, b) -> bool:
    return (a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
            and a.think_end == b.think_end and torch.equal(a.trace.soft, b.trace.soft)
            and torch.equal(a.trace.topk_ids, b.trace.topk_ids))


def assert_parity(got, want, ref, what=""):
    """SGLang's completions ``got`` against the local engine's float32 ``want`` and float64
    ``ref`` runs (same seeds), row by row.

    Exact (against ``want``): tokens, stop reason, ``</think>`` position, which steps were soft,
    every candidate id. Floats (records and per-step likelihoods), per row and field:
    ``max|got − ref| <= ATOL + AMPLIFICATION * max|want − ref|``, i.e. SGLang in float32 is about
    as close to the local engine's float64 run as the local engine's own float32 run. Why not a
    small fixed tolerance: soft steps feed each step's rounding back through the mixture inputs,
    so on this tiny random model float32 differences grow along a soft sequence, in any float32
    engine (the local float32 run drifts from its float64 run by ~1e-5 in tame rows and up to ~0.1
    on the scores after 16 soft steps in others; SGLang's own drift, measured, up to ~1.7e-3 in
    tame rows). ``ATOL`` covers the tame rows, the drift term the others. A wrong noise stream,
    mixture or controller input changes candidate ids or moves records by far more. The case must be
    well-conditioned (``want`` takes ``ref``'s path exactly), or the seeds are unsuitable for an
    exact comparison of paths.
    """
    assert len(got) == len(want) == len(ref), what
    for r, (g, w, x) in enumerate(zip(got, want, ref)):
        where = f"{what} row {r} (prompt {w.prompt_index}, sample {w.sample_index})"
        assert _same_path(w, x), f"{where}: ill-conditioned (local fp32 != fp64); other seeds"
        assert (g.prompt_index, g.sample_index) == (w.prompt_index, w.sample_index), where
        assert _same_path(g, w), (where, g.token_ids, w.token_ids)
        for key in FIELDS + ("loglik",):
            bound = ATOL + AMPLIFICATION * _dev(w, x, key)
            assert _dev(g, x, key) <= bound, (where, key, _dev(g, x, key), bound)


def reference(model, soft, controller=None):
    """``run(prompts, sampling, **generate_kwargs) -> (fp32 rows, fp64 rows)`` of the local
    engine on ``model`` (with the AdaptSoft checkpoint ``controller``), and the fp64 engine."""
    from soft_spatial.engines import LocalEngine
    from soft_spatial.softthink import AdaptSoft
    state = AdaptSoft.read_checkpoint(controller) if controller else None
    l32 = LocalEngine.from_pretrained(model, controller=state)
    l64 = LocalEngine.from_pretrained(model, dtype=torch.float64, controller=state)

    def run(prompts, sampling, **kw):
        return (l32.generate(prompts, soft_thinking=soft, sampling=sampling, **kw),
                l64.generate(prompts, soft_thinking=soft, sampling=sampling, **kw))

    run.l32, run.l64 = l32, l64
    return run


def assert_replays(local64, prompts, got, temperature):
    """Per step, without accumulation: the local model in float64, teacher-forced on SGLang's
    own records (the trainer's replay), reproduces SGLang's per-step likelihoods. Tolerance
    2e-4: one float32 forward (~1e-6 relative on the logits), times the Gumbel log-density's
    slope 1 − exp(−γ̃), which reaches ~1e2 for the rare very negative noise draws."""
    from soft_spatial.engines.replay import replay_completion
    for g in got:
        r = replay_completion(local64, prompts[g.prompt_index], g, temperature=temperature)
        d = (r["loglik"].double() - torch.tensor(g.logprobs, dtype=torch.float64)).abs().max()
        assert float(d) <= 2e-4, (g.prompt_index, g.sample_index, float(d))

"""python -m soft_spatial.eval: end to end on the fixtures, resume, aggregation."""
import hashlib
import json
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir

from soft_spatial.data.fixtures import write_fixtures
from soft_spatial.engines import LocalEngine
from soft_spatial.eval import evaluate, read_results, summarize
from eval_helpers import make_cfg
from soft_spatial.eval.__main__ import CONFIG_DIR


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    return write_fixtures(tmp_path_factory.mktemp("fixtures"))


def test_eval_runs_on_every_fixture_benchmark(fixtures, tiny_qwen3_vl_small, tmp_path):
    cfg = make_cfg(fixtures, tiny_qwen3_vl_small, tmp_path / "out",
                   benchmarks="[omnispatial,spatialab,mindcube]")
    summaries = evaluate(cfg, progress=False)
    rows = read_results(tmp_path / "out" / "samples.jsonl")
    for bench in ("omnispatial", "spatialab", "mindcube"):
        bench_rows = [r for r in rows if r["benchmark"] == bench]
        n_q = len({r["question_index"] for r in bench_rows})
        assert len(bench_rows) == 2 * n_q and n_q > 0
        assert (tmp_path / "out" / f"{bench}.md").read_text().startswith(f"## {bench}")
        s = summaries[bench]
        assert s["samples"] == sum(1 for r in bench_rows if r["category"] != "translation")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["config"]["mode"] == "fixed" and summary["config"]["samples"] == 2
    r0 = rows[0]
    for key in ("text", "pred", "correct", "tau_mean", "finish_reason", "think_closed"):
        assert key in r0
    assert r0["tau_mean"] == pytest.approx(0.5)


class Interrupting:
    """Engine wrapper that dies after `after` generate calls (a crash mid-run)."""

    def __init__(self, engine, after):
        self.engine, self.after, self.prompts_seen = engine, after, 0

    def generate(self, prompts, **kw):
        if self.after == 0:
            raise KeyboardInterrupt
        self.after -= 1
        self.prompts_seen += len(prompts)
        return self.engine.generate(prompts, **kw)


def test_interrupted_run_resumes_without_redoing_samples(fixtures, tiny_qwen3_vl_small, tmp_path):
    cfg = make_cfg(fixtures, tiny_qwen3_vl_small, tmp_path / "a", batch_rows=4)  # 2 q per batch
    engine = LocalEngine.from_pretrained(tiny_qwen3_vl_small, max_batch_rows=4)
    crashing = Interrupting(engine, after=2)
    with pytest.raises(KeyboardInterrupt):
        evaluate(cfg, engine=crashing, progress=False)
    partial = read_results(tmp_path / "a" / "samples.jsonl")
    assert len(partial) == 8  # 2 batches × 2 questions × 2 samples were kept
    with open(tmp_path / "a" / "samples.jsonl", "a") as f:
        f.write('{"benchmark": "omnisp')  # torn line from the crash
    resumed = Interrupting(engine, after=100)
    evaluate(cfg, engine=resumed, progress=False)
    n_questions = len({r["question_index"] for r in read_results(tmp_path / "a" / "samples.jsonl")})
    assert resumed.prompts_seen == n_questions - 4  # finished questions were not regenerated
    # same rows as an uninterrupted run (per-question seeds make sampling order-independent)
    cfg_b = make_cfg(fixtures, tiny_qwen3_vl_small, tmp_path / "b", batch_rows=4)
    evaluate(cfg_b, engine=engine, progress=False)
    key = lambda r: (r["question_index"], r["sample"])  # noqa: E731
    a = sorted((r for r in read_results(tmp_path / "a" / "samples.jsonl")
                if r["benchmark"] == "omnispatial"), key=key)
    b = sorted(read_results(tmp_path / "b" / "samples.jsonl"), key=key)
    assert [(key(r), r["text"]) for r in a] == [(key(r), r["text"]) for r in b]


def test_weighted_average_equals_micro_accuracy_and_translation_excluded():
    rows = []
    spec = {"among": (3, 5), "around": (1, 4), "rotation": (0, 3), "translation": (2, 2)}
    for cat, (good, total) in spec.items():
        for i in range(total):
            rows.append({"benchmark": "mindcube", "question_index": len(rows), "sample": 0,
                         "category": cat, "subcategory": None, "correct": i < good,
                         "pred": "A", "finish_reason": "stop", "think_closed": True,
                         "tau_mean": 0.4})
    s = summarize(rows, "mindcube")
    assert s["categories"]["among"]["accuracy"] == pytest.approx(60.0)
    assert s["categories"]["translation"]["accuracy"] == pytest.approx(100.0)
    kept = [c for c in spec if c != "translation"]
    weighted = sum(s["categories"][c]["accuracy"] * s["categories"][c]["samples"]
                   for c in kept) / sum(s["categories"][c]["samples"] for c in kept)
    assert s["overall"] == pytest.approx(weighted) == pytest.approx(100 * 4 / 12)
    assert s["samples"] == 12 and s["no_answer_rate"] == 0.0


def test_cli_writes_outputs(fixtures, tiny_qwen3_vl_small, tmp_path):
    out = tmp_path / "cli"
    res = subprocess.run(
        [sys.executable, "-m", "soft_spatial.eval", "benchmarks=[mindcube]",
         f"data.mindcube={fixtures.mindcube}", f"model.path={tiny_qwen3_vl_small}",
         "mode=hard", "samples=1", "max_new_tokens=8", "limit=3", f"output_dir={out}"],
        capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "mindcube: overall" in res.stdout
    assert len(read_results(out / "samples.jsonl")) == 3
    assert (out / "mindcube.md").exists() and (out / "summary.json").exists()


def test_adaptsoft_without_controller_is_a_clear_error(fixtures, tiny_qwen3_vl_small, tmp_path):
    with pytest.raises(ValueError, match="controller"):
        make_cfg(fixtures, tiny_qwen3_vl_small, tmp_path, mode="adaptsoft")


# --- results keyed to the configuration, one writer, early errors -------------------------------
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402

from soft_spatial.infra.dirlock import DirLockedError  # noqa: E402
from soft_spatial.engines import PromptTooLongError  # noqa: E402
from soft_spatial.eval.runkey import RunKeyMismatch, weights_fingerprint  # noqa: E402


class NoEngine:
    """Stands in where nothing may be generated."""

    def generate(self, prompts, **kw):
        raise AssertionError(f"generate() called with {len(prompts)} prompts")


def small(fixtures, model, out, **over):
    return make_cfg(fixtures, model, out, **{"limit": 2, "samples": 1, "max_new_tokens": 4, **over})


def test_resume_into_a_directory_of_another_configuration_is_refused(fixtures, tiny_qwen3_vl_small,
                                                                    tmp_path):
    out = tmp_path / "out"
    evaluate(small(fixtures, tiny_qwen3_vl_small, out), progress=False)
    rows = (out / "samples.jsonl").read_bytes()
    evaluate(small(fixtures, tiny_qwen3_vl_small, out), engine=NoEngine(), progress=False)  # same key
    copy = tmp_path / "copy"
    shutil.copytree(tiny_qwen3_vl_small, copy)
    fixture_copy = tmp_path / "fx"
    shutil.copytree(fixtures.omnispatial, fixture_copy)
    data = json.loads((fixture_copy / "OmniSpatial-test" / "data.json").read_text())
    (fixture_copy / "OmniSpatial-test" / "data.json").write_text(json.dumps(data[1:]))  # one deleted
    changes = [
        ({"temperature": 1.5}, "sampling.temperature: 0.6 -> 1.5"),
        ({"max_new_tokens": 5}, "sampling.max_new_tokens: 4 -> 5"),
        ({"seed": 1}, "sampling.seed: 0 -> 1"),
        ({"mode": "hard"}, "mode: fixed -> hard"),
        ({"protocol": "official"}, "protocol: ours -> official"),
        ({"soft_thinking.top_k": 3}, "soft_thinking.top_k: 5 -> 3"),
        ({"model.path": copy}, f"model.path: {tiny_qwen3_vl_small} -> {copy}"),
        ({"data.omnispatial": fixture_copy}, "data.omnispatial.sha256"),
    ]
    for over, expected in changes:
        with pytest.raises(RunKeyMismatch, match=re.escape(expected)) as info:
            evaluate(small(fixtures, tiny_qwen3_vl_small, out, **over), engine=NoEngine(),
                     progress=False)
        assert "choose another output_dir" in str(info.value)
    assert (out / "samples.jsonl").read_bytes() == rows  # nothing was touched


def test_weights_fingerprint_follows_content_not_location(tiny_qwen3_vl_small, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(tiny_qwen3_vl_small, copy)
    assert weights_fingerprint(copy) == weights_fingerprint(tiny_qwen3_vl_small)
    big = copy / "model-00002.safetensors"  # a large shard
    big.write_bytes(bytes(5 << 20))
    before = weights_fingerprint(copy)
    with open(big, "r+b") as f:
        f.seek((5 << 20) - 10)
        f.write(b"\x01")  # a fine-tune changes the weights at the end of a shard
    assert weights_fingerprint(copy) != before


def test_results_without_a_run_key_are_not_trusted(fixtures, tiny_qwen3_vl_small, tmp_path):
    out = tmp_path / "legacy"
    out.mkdir()
    (out / "samples.jsonl").write_text('{"benchmark": "omnispatial"}\n')
    with pytest.raises(RunKeyMismatch, match="without a run key"):
        evaluate(small(fixtures, tiny_qwen3_vl_small, out), engine=NoEngine(), progress=False)


def test_smaller_samples_and_limit_report_only_what_they_ask(fixtures, tiny_qwen3_vl_small, tmp_path):
    out = tmp_path / "out"
    engine = LocalEngine.from_pretrained(tiny_qwen3_vl_small)
    full = evaluate(make_cfg(fixtures, tiny_qwen3_vl_small, out, samples=2, max_new_tokens=6),
                    engine=engine, progress=False)["omnispatial"]
    assert (full["samples"], full["questions"]) == (20, 10)
    part = evaluate(make_cfg(fixtures, tiny_qwen3_vl_small, out, samples=1, limit=2,
                             max_new_tokens=6), engine=NoEngine(), progress=False)["omnispatial"]
    assert (part["samples"], part["questions"], part["questions_requested"]) == (2, 2, 2)
    assert "(mean@1)" in (out / "omnispatial.md").read_text()
    assert json.loads((out / "summary.json").read_text())["config"]["samples"] == 1
    assert len(read_results(out / "samples.jsonl")) == 20  # nothing was dropped from the rows
    # a larger samples generates only the new sample index, equal to a fresh run's
    counting = Interrupting(engine, after=100)
    more = evaluate(make_cfg(fixtures, tiny_qwen3_vl_small, out, samples=3, limit=2,
                             max_new_tokens=6), engine=counting, progress=False)["omnispatial"]
    assert counting.prompts_seen == 2 and more["samples"] == 6
    fresh = tmp_path / "fresh"
    evaluate(make_cfg(fixtures, tiny_qwen3_vl_small, fresh, samples=3, limit=2, max_new_tokens=6),
             engine=engine, progress=False)
    key = lambda r: (r["question_key"], r["sample"])  # noqa: E731
    mine = {key(r): r["text"] for r in read_results(out / "samples.jsonl") if key(r) in
            {key(r) for r in read_results(fresh / "samples.jsonl")}}
    assert mine == {key(r): r["text"] for r in read_results(fresh / "samples.jsonl")}


HOLD_LOCK = """
import sys
from soft_spatial.infra.dirlock import DirLock
lock = DirLock(sys.argv[1]).acquire()
print("locked", flush=True)
sys.stdin.read()
"""


def test_a_second_writer_fails_at_once_naming_the_holder(fixtures, tiny_qwen3_vl_small, tmp_path):
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(out)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(DirLockedError, match=f"in use by pid {holder.pid} "):
            evaluate(small(fixtures, tiny_qwen3_vl_small, out), engine=NoEngine(), progress=False)
        assert sorted(p.name for p in out.iterdir()) == [".lock"]  # the second run wrote nothing
    finally:
        holder.send_signal(signal.SIGKILL)  # the kernel releases a killed holder's lock
        holder.wait()
    evaluate(small(fixtures, tiny_qwen3_vl_small, out), progress=False)
    assert len(read_results(out / "samples.jsonl")) == 2


def test_resume_appends_to_the_same_file(fixtures, tiny_qwen3_vl_small, tmp_path):
    out = tmp_path / "out"
    evaluate(small(fixtures, tiny_qwen3_vl_small, out, limit=1), progress=False)
    with open(out / "samples.jsonl", "a") as f:
        f.write('{"benchmark": "omnisp')  # torn line from a crash
    inode = os.stat(out / "samples.jsonl").st_ino
    evaluate(small(fixtures, tiny_qwen3_vl_small, out), progress=False)
    assert os.stat(out / "samples.jsonl").st_ino == inode  # never replaced under a writer
    assert len(read_results(out / "samples.jsonl")) == 2


class TooLong:
    """An engine that finds the prompts of the questions in ``texts`` too long."""

    def __init__(self, engine, texts):
        self.engine, self.texts = engine, texts

    def generate(self, prompts, **kw):
        for i, p in enumerate(prompts):
            if any(t in json.dumps(p, default=str) for t in self.texts):
                raise PromptTooLongError(i, 99_999, 10)
        return self.engine.generate(prompts, **kw)


def test_an_overlong_prompt_is_skipped_and_named(fixtures, tiny_qwen3_vl_small, tmp_path):
    from soft_spatial.data import load_benchmark
    records = load_benchmark("omnispatial", fixtures.omnispatial)[:4]
    engine = TooLong(LocalEngine.from_pretrained(tiny_qwen3_vl_small), [records[1].question])
    s = evaluate(small(fixtures, tiny_qwen3_vl_small, tmp_path / "out", limit=4, batch_rows=4),
                 engine=engine, progress=False)["omnispatial"]
    assert s["skipped_overlong"] == [records[1].key] and (s["questions"], s["samples"]) == (3, 3)
    rows = read_results(tmp_path / "out" / "samples.jsonl")
    assert sorted(r["question_key"] for r in rows) == sorted(r.key for r in records if r is not records[1])


def test_controller_settings_conflicts_and_missing_paths_are_errors(fixtures, tiny_qwen3_vl_small,
                                                                   tmp_path):
    from controller_helpers import trained_controller
    ckpt = tmp_path / "ctrl.pt"
    trained_controller(64).save(ckpt)
    ok = make_cfg(fixtures, tiny_qwen3_vl_small, tmp_path / "a", mode="adaptsoft", controller=ckpt)
    assert ok.controller == str(ckpt)
    with pytest.raises(ValueError, match=re.escape("adaptsoft.tau0=0.6 (checkpoint: 0.5)")):
        make_cfg(fixtures, tiny_qwen3_vl_small, tmp_path / "a", mode="adaptsoft", controller=ckpt,
                 **{"adaptsoft.tau0": 0.6})
    with pytest.raises(ValueError, match="used only by mode=adaptsoft"):
        make_cfg(fixtures, tiny_qwen3_vl_small, tmp_path / "a", mode="fixed", controller=ckpt)
    with pytest.raises(FileNotFoundError, match="missing.pt"):
        make_cfg(fixtures, tiny_qwen3_vl_small, tmp_path / "a", mode="adaptsoft",
                 controller=tmp_path / "missing.pt")
    with pytest.raises(ValueError, match="limit must be >= 1"):
        make_cfg(fixtures, tiny_qwen3_vl_small, tmp_path / "a", limit=0)


def test_a_missing_model_path_is_an_error_unless_a_tiny_model_is_asked_for(fixtures, tiny_qwen3_vl_small,
                                                                          tmp_path, monkeypatch):
    import soft_spatial.models.loading as loading
    missing = tmp_path / "mistyped"
    with pytest.raises(FileNotFoundError, match=r"model.path='.*mistyped' does not exist.*build_tiny=true"):
        make_cfg(fixtures, missing, tmp_path / "a")
    built = []
    monkeypatch.setattr(loading, "build_tiny_model", lambda path, **kw: built.append(kw) or
                        shutil.copytree(tiny_qwen3_vl_small, path))
    cfg = make_cfg(fixtures, missing, tmp_path / "a", **{"model.build_tiny": "true"})
    assert built == [{"family": "qwen3_vl", "vocab": "qwen"}] and cfg.model_path == str(missing)


def test_default_output_dir_names_the_model_path(tmp_path):
    def out(model):
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
            return compose(config_name="eval", overrides=[f"model.path={model}", "mode=fixed"]).output_dir
    a, b = out(tmp_path / "one" / "model"), out(tmp_path / "two" / "model")
    assert a != b and a.startswith("runs/eval/model-") and a.endswith("-fixed-ours")


class Recording:
    """Engine wrapper keeping every completion and the sampling settings it was called with."""

    def __init__(self, engine):
        self.engine, self.completions, self.samplings = engine, [], []

    def generate(self, prompts, **kw):
        outs = self.engine.generate(prompts, **kw)
        self.samplings.append(kw["sampling"])
        self.completions.extend(outs)
        return outs


def test_steps_jsonl_holds_every_step_of_every_sample(fixtures, tiny_qwen3_vl_small, tmp_path):
    from soft_spatial.eval.steps import read_steps

    cfg = make_cfg(fixtures, tiny_qwen3_vl_small, tmp_path / "s", limit=3)
    rec = Recording(LocalEngine.from_pretrained(tiny_qwen3_vl_small))
    evaluate(cfg, engine=rec, progress=False)
    steps = read_steps(tmp_path / "s" / "steps.jsonl")
    rows = {(r["benchmark"], r["question_index"], r["sample"]): r
            for r in read_results(tmp_path / "s" / "samples.jsonl")}
    assert set(steps) == set(rows) and len(rows) == 6
    by_text = {(o.text, len(o.token_ids)): o for o in rec.completions}
    for key, st in steps.items():
        o = by_text[(rows[key]["text"], rows[key]["num_tokens"])]
        tr = o.trace
        assert (st["token"] == tr.tokens.numpy()).all() and (st["soft"] == tr.soft.numpy()).all()
        assert (st["tau"] == tr.tau.numpy()).all() and (st["entropy"] == tr.entropy.numpy()).all()
        assert st["soft"].sum() == rows[key]["soft_steps"] > 0
        assert float(st["tau"][st["soft"]].mean()) == pytest.approx(rows[key]["tau_mean"])
    # a torn last line (crash mid-write) is dropped; a bad line elsewhere names file and line
    path = tmp_path / "s" / "steps.jsonl"
    with open(path, "a") as f:
        f.write('{"benchmark": "omni')
    assert set(read_steps(path)) == set(rows)
    lines = path.read_text().splitlines()
    path.write_text("\n".join(["{oops"] + lines[:-1]) + "\n")
    with pytest.raises(ValueError, match="steps.jsonl: line 1"):
        read_steps(path)


@pytest.mark.parametrize("top_k", [5, 0])
def test_hard_mode_decodes_with_top_k(fixtures, tiny_qwen3_vl_small, tmp_path, monkeypatch,
                                      top_k):
    """Table 5: hard-mode evaluation samples every token from the top-5 (sample_top_k=5, the
    default); sample_top_k=0 samples from the full vocabulary (the random tiny model then leaves
    the top-5)."""
    import torch
    from engine_spy import capture_local

    steps, _ = capture_local(monkeypatch)
    cfg = make_cfg(fixtures, tiny_qwen3_vl_small, tmp_path / "h", mode="hard", limit=2,
                   max_new_tokens=16, sample_top_k=top_k)
    evaluate(cfg, progress=False)
    ranks = []
    for logits, _, rec in steps:
        tok = rec["topk_ids"][:, 0]
        ranks.append((logits > logits.gather(-1, tok[:, None])).sum(-1))
    ranks = torch.cat(ranks)
    assert ranks.numel() > 20
    if top_k:
        assert (ranks < 5).all()
    else:
        assert (ranks >= 5).any()
    assert json.loads((tmp_path / "h" / "summary.json").read_text())["config"][
        "decode_top_k"] == top_k


def test_task_type_subset_keeps_benchmark_indices(fixtures, tiny_qwen3_vl_small, tmp_path):
    cfg = make_cfg(fixtures, tiny_qwen3_vl_small, tmp_path / "t", samples=1,
                   task_types="[Perspective_Taking]")
    s = evaluate(cfg, progress=False)["omnispatial"]
    rows = read_results(tmp_path / "t" / "samples.jsonl")
    assert {r["category"] for r in rows} == {"Perspective_Taking"}
    assert sorted(r["question_index"] for r in rows) == [0, 1, 2]  # fixture positions
    assert s["questions"] == 3 and set(s["categories"]) == {"Perspective_Taking"}
    table = (tmp_path / "t" / "omnispatial.md").read_text()
    assert "| Egocentric | Allocentric | Hypothetical | Avg. |" in table
    bad = make_cfg(fixtures, tiny_qwen3_vl_small, tmp_path / "u", task_types="[Perspective]")
    with pytest.raises(ValueError, match=r"no records of task type \['Perspective'\].*Egocentric"):
        evaluate(bad, progress=False)


def test_omnispatial_table_lists_ten_subtypes_in_order_with_weighted_average():
    from soft_spatial.eval import markdown_table
    from soft_spatial.data.omnispatial import TAXONOMY

    order = [s for subs in TAXONOMY.values() for s in subs]
    spec = {s: (i % 3, 2 + i) for i, s in enumerate(order)}  # (correct, total) per sub-type
    rows = []
    for task, subs in TAXONOMY.items():
        for sub in subs:
            good, total = spec[sub]
            for j in range(total):
                rows.append({"benchmark": "omnispatial", "question_index": len(rows),
                             "sample": 0, "category": task, "subcategory": sub,
                             "correct": j < good, "pred": "A", "finish_reason": "stop",
                             "think_closed": True})
    s = summarize(rows, "omnispatial")
    table = markdown_table(s, "ours", [{"model": "paper", "source": "x", "overall": 49.68,
                                        "categories": {"Egocentric": 50.0}}])
    head, _, ours, paper = table.splitlines()[:4]
    assert head == "| Model | " + " | ".join(o.replace("_", " ") for o in order) + " | Avg. |"
    cells = [c.strip() for c in ours.strip("|").split("|")][1:]
    assert cells[:-1] == [f"{100 * g / t:.2f}" for g, t in (spec[o] for o in order)]
    avg = 100 * sum(g for g, _ in spec.values()) / sum(t for _, t in spec.values())
    assert cells[-1] == f"{avg:.2f}"  # sample-weighted average of the sub-types = micro overall
    assert paper.split("|")[order.index("Egocentric") + 2].strip() == "50.00"


# --- issue 27: fingerprints see every byte, refusals change nothing, errors say enough ----------
import struct  # noqa: E402

from soft_spatial.eval import runkey  # noqa: E402


def overwrite_in_place(path, offset, data):
    """Overwrite bytes of ``path`` at ``offset``, then put its mtime back (its size is unchanged):
    only the content and the ctime differ afterwards."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)


def zero_middle_tensor(path):
    """Zero the safetensors tensor that holds the middle byte of ``path``; returns its name."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    middle = os.path.getsize(path) // 2 - 8 - n
    name, info = next((k, v) for k, v in header.items() if k != "__metadata__"
                      and v["data_offsets"][0] <= middle < v["data_offsets"][1])
    a, b = info["data_offsets"]
    overwrite_in_place(path, 8 + n + a, bytes(b - a))
    return name


@pytest.fixture(scope="module")
def tiny_7mb(tmp_path_factory):
    """A tiny Qwen3-VL whose model.safetensors is about 7 MB (wide MLPs): bytes in its middle are
    neither in the first nor in the last MiB."""
    from soft_spatial.models import build_tiny_model
    return build_tiny_model(tmp_path_factory.mktemp("tiny_7mb"), family="qwen3_vl", vocab="small",
                            intermediate_size=4096)


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    """A digest cache of this test's own (``$SOFT_SPATIAL_CACHE``)."""
    monkeypatch.setenv("SOFT_SPATIAL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_weights_fingerprint_sees_a_change_in_the_middle_of_a_large_file(tmp_path, private_cache):
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    data = bytearray(os.urandom(9 << 20))
    (model / "model.safetensors").write_bytes(data)
    before = runkey.weights_fingerprint(model)
    for offset in (0, 3 << 20, (9 << 20) // 2, (9 << 20) - 1):  # head, middle, tail
        overwrite_in_place(model / "model.safetensors", offset, b"\xff")
        data[offset] = 0xFF
        after = runkey.weights_fingerprint(model)
        assert after != before
        before = after
    # every byte counts: the file's digest is sha256 of its whole content
    assert runkey.file_sha256(model / "model.safetensors") == hashlib.sha256(data).hexdigest()


def test_a_re_run_after_the_weights_changed_in_place_is_refused(fixtures, tiny_7mb, tmp_path,
                                                                private_cache):
    model = tmp_path / "model"
    shutil.copytree(tiny_7mb, model)
    out = tmp_path / "out"
    evaluate(small(fixtures, model, out), progress=False)
    name = zero_middle_tensor(model / "model.safetensors")
    assert name  # a tensor in the middle of a 7 MB file, neither in its first nor its last MiB
    with pytest.raises(RunKeyMismatch, match=r"model\.fingerprint: "):
        evaluate(small(fixtures, model, out), engine=NoEngine(), progress=False)


def test_a_re_run_after_an_images_pixels_changed_is_refused_naming_the_image(
        fixtures, tiny_qwen3_vl_small, tmp_path, private_cache, monkeypatch):
    from PIL import Image
    data = tmp_path / "data"
    shutil.copytree(fixtures.omnispatial, data)
    out = tmp_path / "out"
    evaluate(small(fixtures, tiny_qwen3_vl_small, out, **{"data.omnispatial": data}), progress=False)
    images = json.loads((out / "run_key.json").read_text())["data"]["omnispatial"]["images"]
    pngs = sorted((data / "OmniSpatial-test").rglob("*.png"))
    assert images == {p.relative_to(data).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                      for p in pngs}  # every image of the split, each byte: not only limit=2's
    reads = []
    digest = hashlib.file_digest
    monkeypatch.setattr(hashlib, "file_digest",
                        lambda f, name: reads.append(os.path.basename(f.name)) or digest(f, name))
    before = tree(out)
    evaluate(small(fixtures, tiny_qwen3_vl_small, out, **{"data.omnispatial": data}),
             engine=NoEngine(), progress=False)  # unchanged: a no-op that reads no file again
    assert reads == [] and tree(out) == before
    image = pngs[0]  # the first question's: a corrected release, the same data.json
    with Image.open(image) as img:
        fixed = img.copy()
    fixed.putpixel((0, 0), tuple(255 - c for c in fixed.getpixel((0, 0))))
    fixed.save(image)
    name = image.relative_to(data).as_posix()
    with pytest.raises(RunKeyMismatch, match=re.escape(f"data.omnispatial.images.{name}: "
                                                       f"{images[name]} -> ")):
        evaluate(small(fixtures, tiny_qwen3_vl_small, out, **{"data.omnispatial": data}),
                 engine=NoEngine(), progress=False)
    assert reads == [image.name] and tree(out) == before  # only the changed file was read
    # a key recorded before images were: refused in one line saying so
    key = json.loads((out / "run_key.json").read_text())
    del key["data"]["omnispatial"]["images"]
    (out / "run_key.json").write_text(json.dumps(key, indent=2) + "\n")
    with pytest.raises(RunKeyMismatch, match=r"data\.omnispatial\.images: \(absent\) -> 9 image "
                                             r"files\n.*data\.omnispatial\.images: not recorded"):
        evaluate(small(fixtures, tiny_qwen3_vl_small, out, **{"data.omnispatial": data}),
                 engine=NoEngine(), progress=False)


def test_a_record_the_loader_leaves_out_is_counted_in_the_summary_and_the_table(
        fixtures, tiny_qwen3_vl_small, tmp_path, capsys):
    data = tmp_path / "spatialab"
    shutil.copytree(fixtures.spatialab, data)
    table = data / "spatialab.jsonl"
    row = json.loads(table.read_text().splitlines()[0])
    row.update(id="count_3", options=["2", "3", "4", "5"], answer="3")  # option 3 is "4"; "3" is B
    table.write_text(table.read_text() + json.dumps(row) + "\n")
    out = tmp_path / "out"
    s = evaluate(small(fixtures, tiny_qwen3_vl_small, out, benchmarks="[spatialab]",
                       **{"data.spatialab": table}), progress=False)["spatialab"]
    assert len(s["left_out"]) == 1 and "id 'count_3', field 'answer'" in s["left_out"][0]
    summary = json.loads((out / "summary.json").read_text())["benchmarks"]["spatialab"]
    assert summary["left_out"] == s["left_out"]
    assert "1 question(s) left out by the loader" in (out / "spatialab.md").read_text()
    assert f"warning: spatialab: {s['left_out'][0]}" in capsys.readouterr().err


def test_a_refusal_lists_a_few_changed_images_and_counts_the_rest():
    old = {"data": {"b": {"images": {f"{i}.png": "0" * 64 for i in range(40)}, "split": "test"}}}
    new = json.loads(json.dumps(old))
    for i in range(12):
        new["data"]["b"]["images"][f"{i}.png"] = "1" * 64
    del new["data"]["b"]["images"]["39.png"]
    lines = runkey.key_differences(old, new)
    assert lines[:runkey.SHOWN_IMAGES] == [f"data.b.images.{n}.png: {'0' * 64} -> {'1' * 64}"
                                           for n in sorted(map(str, range(12)))[:runkey.SHOWN_IMAGES]]
    assert lines[runkey.SHOWN_IMAGES:] == [f"data.b.images: {13 - runkey.SHOWN_IMAGES} more of 40 "
                                           f"image files differ"]
    assert runkey.key_differences(old, old) == []


def test_digest_cache_reads_each_file_once_until_it_changes(tmp_path, private_cache, monkeypatch):
    model = tmp_path / "m"
    model.mkdir()
    for name, size in (("config.json", 10), ("a.safetensors", 6 << 20), ("b.safetensors", 5 << 20)):
        (model / name).write_bytes(os.urandom(size))
    reads = []
    digest = hashlib.file_digest
    monkeypatch.setattr(hashlib, "file_digest",
                        lambda f, name: reads.append(os.path.basename(f.name)) or digest(f, name))

    def fingerprint():
        with runkey.sha256_cache() as cache:
            return runkey.weights_fingerprint(model, cache)

    first = fingerprint()
    assert sorted(reads) == ["a.safetensors", "b.safetensors", "config.json"]
    assert fingerprint() == first and len(reads) == 3  # nothing read again
    overwrite_in_place(model / "a.safetensors", 3 << 20, b"\x00\x01")
    changed = fingerprint()
    assert reads[3:] == ["a.safetensors"] and changed != first
    # a file replaced by another of the same size and mtime is read again
    st = os.stat(model / "b.safetensors")
    (tmp_path / "b2").write_bytes(os.urandom(5 << 20))
    os.utime(tmp_path / "b2", ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp_path / "b2", model / "b.safetensors")
    replaced = fingerprint()
    assert reads[4:] == ["b.safetensors"] and replaced != changed
    monkeypatch.setattr(hashlib, "file_digest", digest)
    assert replaced == runkey.weights_fingerprint(model)  # the cache agrees with no cache
    stored = private_cache / runkey.SHA256_CACHE
    stored.write_text("{not json")  # a broken cache is ignored, then rewritten
    assert fingerprint() == replaced and json.loads(stored.read_text())


def tree(directory):
    """Every path under ``directory`` (hidden ones too): file -> bytes, directory -> None."""
    return {p.relative_to(directory).as_posix(): (p.read_bytes() if p.is_file() else None)
            for p in sorted(directory.rglob("*"))}


def run_cli(monkeypatch, *args):
    """``python -m soft_spatial.eval ARGS`` in this process (Hydra and all), errors raised as is."""
    from soft_spatial.eval.__main__ import main
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    monkeypatch.setattr(sys, "argv", ["soft_spatial.eval", *map(str, args)])
    main()


def test_a_refused_eval_changes_nothing_and_a_finished_one_re_run_neither(
        fixtures, tiny_qwen3_vl_small, tmp_path, monkeypatch):
    import yaml
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    out = tmp_path / "out"
    args = ["benchmarks=[omnispatial]", f"data.omnispatial={fixtures.omnispatial}",
            f"model.path={tiny_qwen3_vl_small}", "mode=hard", "samples=1", "max_new_tokens=4",
            "limit=2", f"output_dir={out}"]
    run_cli(monkeypatch, *args)
    # the record of the accepted run: what Hydra's output_subdir held
    assert yaml.safe_load((out / "hydra" / "overrides.yaml").read_text()) == args
    assert yaml.safe_load((out / "hydra" / "config.yaml").read_text())["temperature"] == 0.6
    assert yaml.safe_load((out / "hydra" / "hydra.yaml").read_text())["hydra"]["job"]["name"]
    before = tree(out)
    assert len(read_results(out / "samples.jsonl")) == 2 and ".lock" in before
    with pytest.raises(RunKeyMismatch, match=r"sampling\.temperature: 0\.6 -> 0\.9"):
        run_cli(monkeypatch, *args, "temperature=0.9")
    assert tree(out) == before
    with pytest.raises(FileNotFoundError, match=r"controller=.*missing\.pt: no such file"):
        run_cli(monkeypatch, *args, "mode=adaptsoft", f"controller={tmp_path / 'missing.pt'}")
    assert tree(out) == before
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(out)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(DirLockedError, match=f"in use by pid {holder.pid} "):
            run_cli(monkeypatch, *args, "samples=2")  # same key: refused by the lock only
        assert tree(out) == {**before, ".lock": tree(out)[".lock"]}  # the holder wrote its pid
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert (out / ".lock").read_bytes().startswith(f"pid {holder.pid} ".encode())
    (out / ".lock").write_bytes(b"")  # as a finished run leaves it
    run_cli(monkeypatch, *args)  # finished: nothing is redone, no file changes
    assert tree(out) == before
    # a refused run into a new directory creates none, and nothing lands in the working directory
    for refused in (["mode=adaptsoft", f"controller={tmp_path / 'missing.pt'}"],
                    ["benchmarks=[omnispatail]"], ["task_types=[Perspective]"]):
        with pytest.raises((FileNotFoundError, ValueError)):
            run_cli(monkeypatch, *args, f"output_dir={tmp_path / 'new'}", *refused)
        assert not (tmp_path / "new").exists()
    assert tree(cwd) == {}


def test_an_unknown_benchmark_name_lists_the_valid_ones(fixtures, tiny_qwen3_vl_small, tmp_path):
    with pytest.raises(ValueError, match=r"unknown benchmark 'omnispatail'; the valid ones are "
                                         r"omnispatial, spatialab, mindcube"):
        make_cfg(fixtures, tiny_qwen3_vl_small, tmp_path, benchmarks="[omnispatail,mindcube]")
    one = make_cfg(fixtures, tiny_qwen3_vl_small, tmp_path, benchmarks="mindcube")  # not a list
    assert one.benchmarks == ["mindcube"]


def cell(table, column):
    """Our row's cell under ``column`` of a Markdown table."""
    head, _, ours = table.split("\n\n", 1)[1].splitlines()[:3]
    names = [c.strip() for c in head.strip("|").split("|")]
    return [c.strip() for c in ours.strip("|").split("|")][names.index(column)]


def test_the_table_says_over_how_many_questions_a_cell_averages(fixtures, tiny_qwen3_vl_small,
                                                               tmp_path):
    from soft_spatial.data import load_benchmark
    records = load_benchmark("omnispatial", fixtures.omnispatial)[:4]
    engine = LocalEngine.from_pretrained(tiny_qwen3_vl_small)
    cfg = small(fixtures, tiny_qwen3_vl_small, tmp_path / "out", limit=4, samples=2)
    s = evaluate(cfg, engine=TooLong(engine, [records[1].question]), progress=False)["omnispatial"]
    rows = read_results(tmp_path / "out" / "samples.jsonl")
    table = (tmp_path / "out" / "omnispatial.md").read_text()
    acc = 100 * sum(r["correct"] for r in rows) / len(rows)
    assert len(rows) == 6 and s["questions"] == 3
    assert cell(table, "Avg.") == f"{acc:.2f} (n=3 of 4; 1 skipped: prompt too long)"
    sub = records[1].subcategory.replace("_", " ")
    asked = sum(r.subcategory == records[1].subcategory for r in records)
    assert cell(table, sub).endswith(f" (n={asked - 1} of {asked}; 1 skipped: prompt too long)")
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["benchmarks"][
        "omnispatial"]["requested"]["skipped_overlong"] == 1
    # every question answered: plain numbers
    full = small(fixtures, tiny_qwen3_vl_small, tmp_path / "full", limit=4, samples=2)
    evaluate(full, engine=engine, progress=False)
    assert "n=" not in (tmp_path / "full" / "omnispatial.md").read_text()


# --- issue 34: batch_rows keyed, skipped categories shown, a failed start leaves a usable dir ---
def test_batch_rows_is_part_of_the_run_key(fixtures, tiny_qwen3_vl_small, tmp_path):
    out = tmp_path / "out"
    evaluate(small(fixtures, tiny_qwen3_vl_small, out, batch_rows=4), progress=False)
    assert json.loads((out / "run_key.json").read_text())["batch_rows"] == 4
    before = tree(out)
    with pytest.raises(RunKeyMismatch, match=re.escape("batch_rows: 4 -> 2")):
        evaluate(small(fixtures, tiny_qwen3_vl_small, out, batch_rows=2), engine=NoEngine(),
                 progress=False)
    assert tree(out) == before  # refused: nothing changed
    evaluate(small(fixtures, tiny_qwen3_vl_small, out, batch_rows=4), engine=NoEngine(),
             progress=False)  # the same value resumes
    # a run key written before batch_rows was recorded: refused, naming the field and why
    key = json.loads((out / "run_key.json").read_text())
    key.pop("batch_rows", None)
    (out / "run_key.json").write_text(json.dumps(key, indent=2) + "\n")
    before = tree(out)
    with pytest.raises(RunKeyMismatch, match=r"batch_rows: \(absent\) -> 4(.|\n)*not recorded"):
        evaluate(small(fixtures, tiny_qwen3_vl_small, out, batch_rows=4), engine=NoEngine(),
                 progress=False)
    assert tree(out) == before


def test_a_category_whose_questions_were_all_skipped_keeps_its_column(fixtures, tiny_qwen3_vl_small,
                                                                      tmp_path):
    from soft_spatial.data import load_benchmark
    records = load_benchmark("mindcube", fixtures.mindcube)
    rotation = [r for r in records if r.category == "rotation"]
    among = [r for r in records if r.category == "among"]
    assert len(rotation) == 1 and len(among) == 2
    engine = TooLong(LocalEngine.from_pretrained(tiny_qwen3_vl_small),
                     [rotation[0].question, among[0].question])
    out = tmp_path / "out"
    s = evaluate(small(fixtures, tiny_qwen3_vl_small, out, benchmarks="[mindcube]", limit="null"),
                 engine=engine, progress=False)["mindcube"]
    table = (out / "mindcube.md").read_text()
    head = table.split("\n\n", 1)[1].splitlines()[0]
    assert head == "| Model | among | around | rotation | translation | Overall |"
    assert cell(table, "rotation") == "– (n=0 of 1; 1 skipped: prompt too long)"
    rows = [r for r in read_results(out / "samples.jsonl") if r["category"] == "among"]
    assert len(rows) == 1
    assert cell(table, "among") == f"{100 * rows[0]['correct']:.2f} (n=1 of 2; 1 skipped: prompt too long)"
    assert "(n=" not in cell(table, "around")
    # accuracy over the answered samples only (skipped questions are not counted as wrong)
    assert s["categories"]["among"] == {"accuracy": 100.0 * rows[0]["correct"], "samples": 1,
                                        "questions": 1}
    summary = json.loads((out / "summary.json").read_text())["benchmarks"]["mindcube"]
    assert summary["requested"]["skipped_categories"] == {"among": 1, "rotation": 1}
    assert summary["requested"]["categories"]["rotation"] == 1
    assert table.rstrip().endswith("; skipped (prompt too long): among 1, rotation 1")


def test_an_eval_that_fails_at_engine_start_leaves_a_directory_the_corrected_one_uses(
        fixtures, tiny_qwen3_vl_small, tmp_path):
    from controller_helpers import trained_controller
    wrong, right = tmp_path / "wrong.pt", tmp_path / "right.pt"
    trained_controller(32).save(wrong)  # another hidden size than the model's 64
    trained_controller(64).save(right)
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="hidden size 32"):
        evaluate(small(fixtures, tiny_qwen3_vl_small, out, mode="adaptsoft", controller=wrong),
                 progress=False)
    with pytest.raises(ValueError, match="top_k must be in"):  # K larger than the vocabulary
        evaluate(small(fixtures, tiny_qwen3_vl_small, out, mode="adaptsoft", controller=right,
                       **{"soft_thinking.top_k": 1000}), progress=False)
    s = evaluate(small(fixtures, tiny_qwen3_vl_small, out, mode="adaptsoft", controller=right),
                 progress=False)["omnispatial"]
    assert (s["questions"], s["samples"]) == (2, 2) and len(read_results(out / "samples.jsonl")) == 2
    key = json.loads((out / "run_key.json").read_text())
    assert key["controller"]["path"] == str(right.resolve()) and key["soft_thinking"]["top_k"] == 5
    # a directory that does hold results is still refused, and nothing changes
    before = tree(out)
    with pytest.raises(RunKeyMismatch, match="holds results of a different evaluation"):
        evaluate(small(fixtures, tiny_qwen3_vl_small, out, mode="adaptsoft", controller=wrong),
                 engine=NoEngine(), progress=False)
    assert tree(out) == before

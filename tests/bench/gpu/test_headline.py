"""The GPU kit's headline plan on the CPU, without SGLang: every CUDA engine of the plan names every
backend, each plugin job has a stock job with the same engine arguments, jobs travel as JSON, the
command's job selection, the E summary. The shared server arguments: tests/bench/gpu/test_sglang_args.py;
the live report and its like-for-like ratios: test_report.py; the runner's containment:
test_runner.py; the whole plan's dry run with SGLang's real engine:
tests/sglang_real/test_gpu_headline_dry_run.py."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from soft_spatial_bench.gpu import graphs, headline, soft_parity
from soft_spatial_bench.gpu.jobs import RETIRED, RETIRED_AT, STAGES, Job, plan
from soft_spatial_bench.gpu.sglang_args import unset_backends

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = ROOT / "configs"


def _plan_args() -> dict[str, tuple[dict, bool]]:
    """{job: (its CUDA server arguments, plugin)} for every SGLang engine of the plan."""
    out = {}
    for job in plan():
        a = job.args
        if a["kind"] == "engine":
            spec = graphs.EngineSpec.from_args(a)
            out[job.key] = (graphs.server_args(spec, dry=False), spec.kind == "plugin")
        elif a["kind"] == "parity":
            out[job.key] = (soft_parity.server_args(False, a.get("graphs", False)), True)
    return out


def test_every_engine_of_the_plan_names_its_backends():
    composed = _plan_args()
    assert {"F/stock-hard", "F/plugin-fixed", "D/fixed", "G/fixed", "F/fused-plugin-fixed",
            "F/8b-plugin-fixed"} <= set(composed)
    for key, (args, plugin) in composed.items():
        assert unset_backends(args, plugin=plugin) == [], key
        assert args["mm_attention_backend"] == "sdpa" and args["grammar_backend"] == "none", key
        if not args["disable_cuda_graph"]:  # captured for every batch the plan measures
            assert {1, 8, 64} <= set(args["cuda_graph_bs"]), key
    assert composed["D/fixed"][0]["attention_backend"] == "torch_native"  # no TF32 dots
    assert composed["D/fixed"][0]["disable_cuda_graph"]  # SGLang turns them off with it anyway
    g = composed["G/adaptsoft"][0]  # graphs on in fp32: Triton (IEEE dots by environment)
    assert g["attention_backend"] == "triton" and not g["disable_cuda_graph"]
    assert g["dtype"] == "float32"
    assert composed["F/stock-hard"][0]["sampling_backend"] == "pytorch"   # not flashinfer's
    assert composed["F/8b-stock-hard"][0]["load_format"] == "dummy"  # the 8B shape, no files
    assert "load_format" not in composed["F/stock-hard"][0]


def _setting(args: dict) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in args.items() if k != "sampling_backend"))


def test_each_plugin_f_job_has_a_stock_job_with_the_same_engine_arguments():
    """Like for like: a plugin job and the stock hard job it is divided by differ only in the
    plugin (the sampler), kernels, attention, overlap and model included."""
    composed, jobs = _plan_args(), {j.key: j for j in plan()}
    stock = {(_setting(args), jobs[k].args["kernels"]): k for k, (args, plugin) in composed.items()
             if k.startswith("F/") and not plugin}
    for key, (args, plugin) in composed.items():
        if key.startswith("F/") and plugin and jobs[key].args["mode"] != "hard":
            assert (_setting(args), jobs[key].args["kernels"]) in stock, key


# -- the plan's jobs and the summaries -----------------------------------------------------------
def test_jobs_travel_as_json():
    for job in plan():
        assert Job.from_dict(json.loads(json.dumps(job.to_dict()))) == job


def test_only_lease_and_set_select_jobs(capsys):
    from soft_spatial_bench.gpu.jobs import LEASES
    ap = headline._parser()
    pick = lambda *argv: headline.select(ap, ap.parse_args(["--out", "x", *argv]))  # noqa: E731
    assert [j.key for j in pick("--lease", "2.1")] == LEASES[1][0]
    assert [j.key for j in pick("--only", "E/fp32,model/build")] == ["model/build", "E/fp32"]
    jobs = pick("--only", "E/bf16,E/hard", "--set", "E/bf16:a.b=1", "--set", "E/bf16:c=2")
    assert jobs[0].args["overrides"] == ["a.b=1", "c=2"] and "overrides" not in jobs[1].args
    for bad in (["--only", "F/nope"], ["--lease", f"{len(LEASES) + 1}.1"], ["--only", "F/stock-hard", "--set",
                                                           "F/stock-hard:a=1"],
                ["--only", "E/bf16", "--set", "E/bf16"]):
        with pytest.raises(SystemExit):
            pick(*bad)


def test_the_e_summary_puts_each_split_under_its_name():
    soft = {"soft/replay_max_abs_diff_soft": {"1": 2e-5}, "soft/replay_max_abs_diff_hard": {"1": None},
            "soft/replay_max_abs_diff_step0": {"1": 1e-6}, "soft/replay_max_abs_diff": {"1": 2e-5}}
    rec = {"part": "E", "job": "fp32", "status": "ok", "time": "t", "elapsed_s": 1.0, "kind": "job",
           "values": {"spec": {"dtype": "float32", "weights": "parity"}, "graph_batches": None,
                      "verdict": {"splits": soft, "status": "pass"}}}
    text = "\n".join(headline.e_summary(headline.latest([rec])))
    assert ("| job | status | dtype | weights | graphs | verdict | max soft steps | max hard steps | "
            "max step 0 (the prompt alone) | max all steps |") in text
    assert "| E/fp32 | ok | float32 | parity | – replayed / – eager | pass | 2e-05 | not recorded " \
           "| 1e-06 | 2e-05 |" in text


# -- the command: scripts/gpu/check.py -----------------------------------------------------------
def test_the_former_stages_fail_naming_the_jobs_that_replaced_them(capsys):
    """``--stages`` retired with the per-stage command: it fails in one line naming the command
    that runs the same checks now; stage e is E with a checkpoint and a resume."""
    from soft_spatial_bench.gpu import grpo
    by = {j.key: j for j in plan()}
    assert {k for keys in STAGES.values() for k in keys} <= set(by)
    for stage, keys in STAGES.items():  # each stage's jobs run alone: what they need comes along
        assert all(n in keys for k in keys for n in by[k].needs), stage
    e = grpo.ESpec.from_args(by[STAGES["e"][0]].args)
    assert e == grpo.ESpec(dtype="bfloat16", weights="tiny", steps=2, resume=True)
    with pytest.raises(SystemExit) as exit_:
        headline.main(["--stages", "d,e", "--out", "r.md"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    keys = ",".join([*STAGES["d"], "X/grpo-resume"])
    assert exit_.value.code == 2 and err.endswith(
        f"--stages is gone: stages d,e are the plan's jobs {keys}: python3 scripts/gpu/check.py "
        f"--plan headline --only {keys} --out DIR (docs/gpu.md)")
    assert "unknown stages ['z']" in headline.stages_moved("a,z")
    # the first checks retired having served: the commit that last holds their modules is named
    said = headline.stages_moved("b,a")
    assert said.startswith("--stages: stages b,a (jobs B/softthink,A/embedded) retired") and (
        RETIRED_AT in said) and not set(RETIRED) & set(STAGES) and not set(RETIRED.values()) & set(by)
    tree = subprocess.run(["git", "ls-tree", "--name-only", RETIRED_AT, "soft_spatial/bench/gpu/"],
                          capture_output=True, text=True, cwd=ROOT)
    if tree.returncode == 0:  # a clone with the history (a shallow one has not that commit)
        assert {f"soft_spatial/bench/gpu/{m}.py" for m in ("embedded", "softthink_sizes",
                                                           "actor_update")} <= set(tree.stdout.split())


def test_check_runs_a_job_of_the_plan_in_its_watched_child(tmp_path):
    """The command's one way in, end to end on the CPU: model/build-8b (the cheapest kind: a
    config, a tokenizer and a processor) made in the plan's child process, its result a JSON line
    and its section of the report."""
    import sys
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, str(ROOT / "scripts/gpu/check.py"), "--dry-run",
                          "--only", "model/build-8b", "--out", str(out), "--deadline", "600"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    recs = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    done = headline.latest(recs)
    key = "model/build-8b"
    assert done[key]["status"] == "ok" and done["plan/end"]["values"]["ok"] == [key]
    v = done[key]["values"]
    assert (v["model"], v["hidden"], v["layers"], v["tied"]) == ("8b", 64, 2, False), v  # tiny sizes
    assert v["weights"].startswith("SGLang's dummy load"), v
    assert "## model build-8b: ok" in (out / "report.md").read_text()

"""The GPU kit's headline plan on the CPU, without SGLang: the shared server arguments name every
backend (each CUDA engine of the plan, stage d and f, and configs/cluster/gpu1.yaml as verl would
start SGLang), the live report, and the parent's containment: a child killed the way SGLang's
SIGQUIT handler kills its engine's process tree is recorded as failed and the next job runs; a
deadline reached mid-plan leaves every finished number. The whole plan's dry run with SGLang's
real engine is tests/sglang_real/test_gpu_headline_dry_run.py."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from soft_spatial.lab.gpu import graphs, headline, soft_parity
from soft_spatial.lab.gpu.headline import Job
from soft_spatial.lab.gpu.report import LiveReport
from soft_spatial.lab.gpu.sglang_args import BACKENDS, cuda_args, unset_backends

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = ROOT / "configs"


def _plan_args() -> dict[str, tuple[dict, bool]]:
    """{job: (its CUDA server arguments, plugin)} for every SGLang engine of the plan."""
    out = {}
    for job in headline.plan(extras=True):
        a = job.args
        if a["kind"] == "engine":
            spec = graphs.EngineSpec(a["engine"], a["mode"], a.get("graphs", True),
                                     a.get("overlap", False), a.get("native", True))
            out[job.key] = (graphs.server_args(spec, dry=False), spec.kind == "plugin")
        elif a["kind"] == "parity":
            out[job.key] = (soft_parity.server_args(dry=False), True)
    return out


def test_every_engine_of_the_plan_names_its_backends():
    composed = _plan_args()
    assert {"F/stock-hard", "F/plugin-fixed", "D/fixed", "X/plugin-fixed-fused"} <= set(composed)
    for key, (args, plugin) in composed.items():
        assert unset_backends(args, plugin=plugin) == [], key
        assert args["mm_attention_backend"] == "sdpa" and args["grammar_backend"] == "none", key
        if not args["disable_cuda_graph"]:  # captured for every batch the plan measures
            assert {1, 8, 64} <= set(args["cuda_graph_bs"]), key
    assert composed["D/fixed"][0]["attention_backend"] == "torch_native"  # no TF32 dots
    assert composed["F/stock-hard"][0]["sampling_backend"] == "pytorch"   # not flashinfer's


@pytest.mark.parametrize("drop", BACKENDS)
def test_a_backend_left_to_the_default_is_named(drop):
    args = cuda_args("bfloat16", graphs=True, plugin=False)
    args.pop(drop)
    assert unset_backends(args, plugin=False) == [f"{drop}=None"]
    args = cuda_args("bfloat16", graphs=True, plugin=False, **{})
    args[drop] = "fa3"  # a backend the kit does not carry
    assert unset_backends(args, plugin=False) == [f"{drop}='fa3'"]


def test_the_stage_d_and_f_engines_name_their_backends():
    for parity in (False, True):
        args = soft_parity.sglang_server_args("float32" if parity else "bfloat16", "cuda", parity)
        assert unset_backends(args, plugin=True) == [], args
    for graphs_on in (False, True):
        ctx = type("Ctx", (), {"device": "cuda"})()
        for plugin in (False, True):
            args = graphs.stage_server_args(ctx, "bfloat16", graphs_on, plugin=plugin)
            assert unset_backends(args, plugin=plugin) == [], args


def test_gpu1_cluster_names_every_backend_as_verl_starts_sglang():
    """configs/cluster/gpu1.yaml composed as training composes it, then the plugin's required
    arguments: what verl 0.9.1's SGLang server passes to ServerArgs (it pops attention_backend
    and mm_attention_backend from engine_kwargs and defaults them when absent)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from soft_spatial.engines.sglang.server_args import required_server_args
    with initialize_config_dir(config_dir=str(CONFIGS), version_base=None):
        cfg = compose(config_name="train", overrides=["cluster=gpu1", "rollout=sglang"])
    kwargs = OmegaConf.to_container(cfg.actor_rollout_ref.rollout.engine_kwargs.sglang)
    args = required_server_args(kwargs)
    assert unset_backends(args, plugin=True) == [], args
    assert args["sampling_backend"] == "soft_gumbel"


# -- the live report ----------------------------------------------------------------------------
def test_each_record_is_a_json_line_and_rewrites_the_markdown(tmp_path):
    rep = LiveReport(tmp_path, headline.render)
    rep.start(["# title", ""])
    rep.record("F", "stock-hard", "ok", values={"engine": "stock hard", "rows": {"big": 64, "small": 8},
                                               "tps_big": 1000.0, "tps_small": 200.0})
    assert "stock-hard" in (tmp_path / "report.md").read_text()
    rep.record("F", "plugin-fixed", "ok", values={"engine": "plugin fixed",
                                                 "rows": {"big": 64, "small": 8},
                                                 "tps_big": 950.0, "tps_small": 150.0})
    text = (tmp_path / "report.md").read_text()
    assert "| plugin fixed | 64 | 950 | 0.95 |" in text  # the ratio to stock hard
    assert "| plugin fixed | 8 | 150 | 0.75 |" in text
    recs = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in recs] == ["header", "job", "job"]
    assert all("time" in r and "elapsed_s" in r for r in recs[1:])
    with open(tmp_path / "results.jsonl", "a") as f:  # a writer killed mid-line
        f.write('{"kind": "job", "par')
    assert len(rep.records()) == 3


def test_jobs_travel_as_json():
    for job in headline.plan(extras=True):
        assert Job.from_dict(json.loads(json.dumps(job.to_dict()))) == job
    keys = [j.key for j in headline.plan(extras=False)]
    assert keys == ["model/build", "F/stock-hard", "F/stock-hard-overlap-off", "F/plugin-hard",
                    "F/plugin-fixed", "D/references", "D/fixed", "D/adaptsoft", "E/grpo"]


# -- containment and the deadline ---------------------------------------------------------------
JOBS = textwrap.dedent('''
    import os, signal, time

    def ok(ctx, job):
        return {"number": job.args["number"]}, [f"number {job.args['number']}"]

    def sigquit_tree(ctx, job):
        # what SGLang's SIGQUIT handler does after a scheduler fails: kill its process tree,
        # the engine's own process (here: the child) included
        os.kill(os.getpid(), signal.SIGKILL)

    def hang(ctx, job):
        time.sleep(3600)
''')


def _jobs(tmp_path, monkeypatch, *spec) -> list[Job]:
    (tmp_path / "fake_jobs.py").write_text(JOBS)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return [Job("T", name, cap, min_left=1.0,
                args={"kind": "call", "call": f"fake_jobs:{fn}", "number": i})
            for i, (name, fn, cap) in enumerate(spec)]


def _latest(out: Path) -> dict:
    recs = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    return {r["job"]: r for r in recs if r["kind"] == "job"}


def test_a_child_killed_like_sglangs_sigquit_handler_is_failed_and_the_next_job_runs(
        tmp_path, monkeypatch):
    jobs = _jobs(tmp_path, monkeypatch, ("first", "ok", None), ("crash", "sigquit_tree", None),
                 ("after", "ok", None))
    out = tmp_path / "out"
    rc = headline.run_plan(out, tmp_path / "work", 600, dry=True, jobs=jobs, poll_s=0.1)
    latest = _latest(out)
    assert rc == 1
    assert latest["first"]["status"] == "ok" and latest["first"]["values"]["number"] == 0
    assert latest["crash"]["status"] == "failed"
    assert "the child process died" in latest["crash"]["lines"][0]
    assert latest["after"]["status"] == "ok" and latest["after"]["values"]["number"] == 2
    report = (out / "report.md").read_text()
    assert "## T crash: failed" in report and "number 2" in report
    assert sorted(p.name for p in out.iterdir()) <= sorted(
        ["report.md", "results.jsonl", "log.txt", "nvidia-smi.txt", "stage-e.tar.gz"])


def test_a_deadline_reached_mid_plan_keeps_every_finished_number(tmp_path, monkeypatch):
    jobs = _jobs(tmp_path, monkeypatch, ("first", "ok", None), ("hangs", "hang", None),
                 ("never", "ok", None))
    out = tmp_path / "out"
    rc = headline.run_plan(out, tmp_path / "work", 20, dry=True, jobs=jobs, poll_s=0.1)
    latest = _latest(out)
    assert rc == 1
    assert latest["first"]["status"] == "ok" and latest["first"]["values"]["number"] == 0
    assert latest["hangs"]["status"] == "timeout"
    assert latest["hangs"]["lines"] == ["killed at the plan's deadline"]
    assert "never" not in latest or latest["never"]["status"] == "skipped"
    assert latest["end"]["values"]["not_ok"]["T/hangs"] == "timeout"
    assert "number 0" in (out / "report.md").read_text()


def test_a_job_past_its_cap_is_killed_and_the_plan_goes_on(tmp_path, monkeypatch):
    jobs = _jobs(tmp_path, monkeypatch, ("hangs", "hang", 2.0), ("after", "ok", None))
    out = tmp_path / "out"
    headline.run_plan(out, tmp_path / "work", 600, dry=True, jobs=jobs, poll_s=0.1)
    latest = _latest(out)
    assert latest["hangs"]["status"] == "timeout"
    assert latest["hangs"]["lines"] == ["killed at its cap of 2 s"]
    assert latest["after"]["status"] == "ok"

"""The GPU kit's live report (soft_spatial_bench/gpu/report.py), with the headline plan's renderer:
each record a JSON line (a torn last line dropped), the Markdown rewritten after each, every
plugin job divided by the stock job of its own kernels and overlap, overlap on ÷ off per engine."""
from __future__ import annotations

import json

from soft_spatial_bench.gpu import headline
from soft_spatial_bench.gpu.report import LiveReport


def _f(engine, kernels, overlap, big, small, model="2b"):
    return {"engine": engine, "kernels": kernels, "attention": "triton", "overlap": overlap,
            "graphs": True, "model": model, "rows": {"big": 64, "small": 8}, "tps_big": big,
            "tps_small": small}


def test_each_record_is_a_json_line_and_rewrites_the_markdown(tmp_path):
    rep = LiveReport(tmp_path, headline.render)
    rep.start(["# title", ""], t0=0.0)
    rep.record("F", "stock-hard", "ok", values=_f("stock hard", "fused", True, 1000.0, 200.0))
    assert "stock-hard" in (tmp_path / "report.md").read_text()
    rep.record("F", "stock-hard-overlap-off", "ok",
               values=_f("stock hard", "fused", False, 800.0, 100.0))
    rep.record("F", "plugin-fixed-overlap-on", "ok",
               values=_f("plugin fixed", "fused", True, 950.0, 150.0))
    rep.record("F", "plugin-fixed", "ok", values=_f("plugin fixed", "fused", False, 400.0, 99.0))
    rep.record("F", "native-plugin-fixed", "ok", values=_f("plugin fixed", "native", False, 1.0, 1.0))
    text = (tmp_path / "report.md").read_text()
    # each plugin job divided by the stock job of its own kernels and overlap, never another's
    assert ("| F/plugin-fixed-overlap-on | plugin fixed | fused | triton | on | 64 | 950 | "
            "F/stock-hard | 0.95 | met |") in text
    assert "| F/plugin-fixed-overlap-on | plugin fixed | fused | triton | on | 8 | 150 | " \
           "F/stock-hard | 0.75 | missed |" in text
    assert "| F/plugin-fixed | plugin fixed | fused | triton | off | 64 | 400 | " \
           "F/stock-hard-overlap-off | 0.5 | missed |" in text
    assert "| F/native-plugin-fixed | plugin fixed | native | triton | off | 64 | 1 | not run |" \
        in text
    # overlap on ÷ off per engine with the same kernels
    assert "| stock hard | fused | triton | 2b | 1.25 | 2 |" in text
    assert "| plugin fixed | fused | triton | 2b | 2.375 | 1.515 |" in text
    recs = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in recs] == ["header"] + ["job"] * 5
    assert all("time" in r and "elapsed_s" in r for r in recs[1:])
    with open(tmp_path / "results.jsonl", "a") as f:  # a writer killed mid-line
        f.write('{"kind": "job", "par')
    assert len(rep.records()) == 6

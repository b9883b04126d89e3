"""python -m soft_spatial.analysis all on a real evaluation of the tiny model: figures 4, 6 and 7
and ``analysis.json``, the printed numbers beside the paper's. Each figure's numbers against direct
computations on files with known contents: tests/lab/paper/analysis/test_tau_entropy.py (Fig. 6),
test_spread.py (Fig. 7), test_training.py (Fig. 5), test_trace_html.py (Fig. 4); bad inputs:
test_data.py."""
import pytest

from soft_spatial.lab.paper.analysis.cli import main


def test_all_on_a_real_evaluation_of_the_tiny_model(tiny_qwen3_vl_small, tmp_path, capsys):
    """Figures 4, 6 and 7 from a real (fixed-soft) evaluation of the tiny model."""
    from hydra import compose, initialize_config_dir

    from soft_spatial.data.fixtures import write_fixtures
    from soft_spatial.eval import evaluate
    from soft_spatial.eval.__main__ import CONFIG_DIR, build_config

    fx = write_fixtures(tmp_path / "fx")
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = build_config(compose(config_name="eval", overrides=[
            f"data.omnispatial={fx.omnispatial}", f"model.path={tiny_qwen3_vl_small}",
            f"output_dir={tmp_path / 'ev'}", "mode=fixed", "samples=2", "max_new_tokens=24",
            "limit=4"]))
    evaluate(cfg, progress=False)
    res = main(["all", "--eval", str(tmp_path / "ev"), "--min-count", "5"])
    out = capsys.readouterr().out
    assert "Fig. 6" in out and "paper 0.590 -> 0.350" in out and "paper 0.235 vs 0.093" in out
    from soft_spatial.eval.steps import read_steps

    steps = read_steps(tmp_path / "ev" / "steps.jsonl")
    assert len(steps) == 8
    assert res["fig6"]["steps"] == sum(int(st["soft"].sum()) for st in steps.values()) > 0
    assert res["fig6"]["r"] is None  # fixed τ: no correlation to speak of
    assert res["fig7"]["summary"]["all"]["within"] == pytest.approx(0.0)  # and no spread
    for name in ("fig6_tau_entropy.png", "fig7_tau_spread.png", "fig4_trace.html",
                 "analysis.json"):
        assert (tmp_path / "ev" / "analysis" / name).is_file()

"""Fig. 5, τ over training (soft_spatial/lab/paper/analysis/training.py) through
``python -m soft_spatial.analysis fig5``: the first and last step's mean and the overall range from a
``metrics.jsonl`` with known values (a line without τ skipped, a torn last line dropped); a hard
run, which has no τ, is an error saying so."""
import json

import pytest

from soft_spatial.lab.paper.analysis.cli import main


def test_fig5_from_metrics(tmp_path):
    path = tmp_path / "run" / "metrics.jsonl"
    path.parent.mkdir()
    lines = [{"step": s, "data": {"soft/tau_mean": 0.5 - 0.01 * s, "soft/tau_min": 0.2 + 0.01 * s,
                                  "soft/tau_max": 0.8}} for s in (1, 2, 3)]
    lines.insert(1, {"step": 2, "data": {"val/score": 1.0}})  # a line without τ is skipped
    path.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"step": 4, "da')
    res = main(["fig5", str(path)])
    assert (res["steps"], res["first_step"], res["last_step"]) == (3, 1, 3)
    assert res["tau_mean_first"] == pytest.approx(0.49) and res["tau_mean_last"] == pytest.approx(0.47)
    assert (res["tau_min"], res["tau_max"]) == (pytest.approx(0.21), 0.8)
    assert (tmp_path / "run" / "analysis" / "fig5_tau_training.png").is_file()
    hard = tmp_path / "hard.jsonl"
    hard.write_text(json.dumps({"step": 1, "data": {"actor/pg_loss": 0.1}}) + "\n")
    with pytest.raises(ValueError, match="hard-mode run has no"):
        main(["fig5", str(hard)])

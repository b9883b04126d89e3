"""The analyses' inputs (soft_spatial/lab/paper/analysis/data.py): a ``metrics.jsonl`` line of another
shape, or a value that is not a number, named by file and line; a directory that is not an
evaluation's, a benchmark with no samples, a sample without a field, each a clear error."""
import json
import re

import pytest

from soft_spatial.lab.paper.analysis.cli import main


@pytest.mark.parametrize("line, problem", [
    ([1, 2], "not a metrics line of verl's file logger"),
    ({"step": 2, "data": 5}, "not a metrics line of verl's file logger"),
    ({"step": "2", "data": {}}, "not a metrics line of verl's file logger"),
    ({"soft/tau_mean": 0.5}, "not a metrics line of verl's file logger"),
    ({"step": 2, "data": {"soft/tau_mean": "high", "soft/tau_min": 0.1, "soft/tau_max": 0.9}},
     "step 2: 'soft/tau_mean' is 'high', not a number"),
])
def test_fig5_names_the_file_and_line_of_a_metrics_line_of_another_shape(tmp_path, line, problem):
    """A bare AttributeError or TypeError before (issue 44): now the file and the line."""
    path = tmp_path / "metrics.jsonl"
    good = {"step": 1, "data": {"soft/tau_mean": 0.5, "soft/tau_min": 0.2, "soft/tau_max": 0.8}}
    path.write_text("\n".join(json.dumps(x) for x in (good, {"step": 1, "data": {}}, line, good)) + "\n")
    with pytest.raises(ValueError, match=re.escape(f"{path}: line 3: ") + re.escape(problem)):
        main(["fig5", str(path)])


def test_bad_inputs_are_clear_errors(tmp_path, eval_dir):
    with pytest.raises(FileNotFoundError, match="not an evaluation directory"):
        main(["fig6", str(tmp_path)])
    d, _ = eval_dir
    with pytest.raises(ValueError, match="no samples of benchmark 'mindcube'"):
        main(["fig6", str(d), "--benchmark", "mindcube"])
    rows = (d / "samples.jsonl").read_text().splitlines()
    bad = json.loads(rows[0])
    del bad["correct"]
    (d / "samples.jsonl").write_text("\n".join([json.dumps(bad)] + rows[1:]) + "\n")
    with pytest.raises(ValueError, match="samples.jsonl: record 1 has no field 'correct'"):
        main(["fig7", str(d)])
    with pytest.raises(SystemExit):
        main(["all"])

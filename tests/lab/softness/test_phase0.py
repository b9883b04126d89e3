"""The softness experiment's runs (soft_spatial/lab/softness/phase0.py): Phase 0's gates as the
learning runner's stages before GRPO, keyed as its evaluations of the warm starts, and the command
``python -m soft_spatial.lab.softness run``, its refusals and its sibling (the decision) behind one
``__main__``. The gates run end to end in tests/e2e/test_softness_phase0.py."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from soft_spatial.infra.provenance import ANY
from soft_spatial.lab.learning.config import CONFIG_DIR, LearnConfig
from soft_spatial.lab.learning.experiment import Experiment
from soft_spatial.lab.softness.gates import GATE_EVALS
from soft_spatial.lab.softness.phase0 import GATE_VIEWS, GATES, PROG

RUN = [sys.executable, "-m", "soft_spatial.lab.softness"]


def _paths(*overrides: str) -> LearnConfig:
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return LearnConfig.from_omegaconf(compose("learn", overrides=["budget=paths", *overrides]))


def test_the_budget_names_this_command_and_the_gates_read_its_three_warm_starts():
    cfg = _paths("out=x")
    assert cfg.command == PROG and set(GATE_VIEWS) == {"mix", "hard", "nochain"}
    assert set(cfg.warmstart.views) >= set(GATE_VIEWS) and cfg.modes == []
    with pytest.raises(ValueError, match=r"warmstart\.views"):
        Experiment(_paths("out=x", "warmstart.views=[mix,hard]"), GATES)


def test_the_gate_stages_are_evaluations_of_the_warm_starts_then_the_table(tmp_path):
    """Each gate evaluation is ``eval/gate_<name>``, keyed by the warm start of its view, its
    decoding mode and its τ (what the runner's ``evaluate`` keys for that warm start, so Stage 0's
    evaluations of the same name are the same outputs); ``gates.json`` follows them all and is made
    again whenever one changed. The runner checks them with its own, in the order it makes them."""
    exp = Experiment(_paths(f"out={tmp_path}"), GATES)
    *evals, table = GATES.stages(exp)
    assert [s.output for s in evals] == [tmp_path / "eval" / f"gate_{n}" for n in GATE_EVALS]
    for stage, (view, mode, tau) in zip(evals, GATE_EVALS.values()):
        settings = stage.key["settings"]
        assert settings["inputs"]["model"] == exp.warm_stage(view).key["settings"]
        assert settings["mode"] == mode and stage.redo_on == ("settings.samples",)  # more samples:
        # made again (a row depends on the rows decoded with it), never extended
        assert settings["extra"] == ([] if tau is None else [f"soft_thinking.fixed_tau={tau}"])
        model = exp.warm_dir(view)
        assert stage.key == exp.eval_stage(stage.output.name, exp.keyed_model(model), mode,
                                           extra=settings["extra"]).key
    assert table.output == tmp_path / "gates.json" and table.redo_on == ANY
    assert set(table.key["settings"]["inputs"]) == set(GATE_EVALS)
    whats = [s.what for s in exp.stages()]
    assert whats[whats.index("4 parquet") + 1:] == [s.what for s in GATES.stages(exp)]
    # another warm-start setting changes every gate key (and the table's), not the data's
    other = Experiment(_paths(f"out={tmp_path}", "warmstart.lr=1e-3"), GATES)
    assert all(a.key != b.key for a, b in zip(GATES.stages(exp), GATES.stages(other)))


@pytest.mark.parametrize("args, named", [
    (["run", "budget=demo"], "run python -m soft_spatial.lab.learning budget=demo"),
    (["run", "budget=paths", "warmstart.views=[mix]"], "warmstart.views"),  # the gates' own check
])
def test_a_refused_run_names_the_setting_and_writes_nothing(tmp_path, args, named):
    out = tmp_path / "paths"
    res = subprocess.run([*RUN, *args, f"out={out}"], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert res.returncode == 1, res.stderr[-3000:]
    assert res.stderr.strip().count("\n") == 0 and named in res.stderr, res.stderr[-3000:]
    assert res.stderr.startswith(PROG + ":") and "Traceback" not in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_without_run_the_command_is_the_decision(tmp_path):
    res = subprocess.run([*RUN, str(tmp_path / "seed1"), "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert res.returncode == 1 and "no eval/ in" in res.stderr, res.stderr[-3000:]
    assert not Path(tmp_path / "o").exists()

"""The softness experiment's runs: ``python -m soft_spatial.lab.softness run budget=paths [seed=S]
[out=DIR] [key=value ...]`` (docs/learning.md).

The learning experiment's runner (lab/learning/experiment.py: data, tiny model, the three warm
starts of ``budget=paths``, parquet; the same Hydra overrides) with Phase 0's gates handed to it as
its stages before GRPO (`Phase0Gates`, a `BeforeGRPO`): the warm starts evaluated as
:data:`~soft_spatial.lab.softness.gates.GATE_EVALS` asks (``eval/gate_<name>``), the registered
gates applied (:func:`~soft_spatial.lab.softness.gates.measure_gates`, with the branch readouts of
the soft decodes and the accuracy by t*) -> ``out/gates.md``, ``out/gates.json``. A failed gate
stops the run before GRPO (the registered rule); with ``modes=[hard,soft_fixed,soft_fixed_hi,
adaptsoft]`` (Phase 1, seeds 1-3) the arms follow when the gates pass, and
``python -m soft_spatial.lab.softness SEED_DIR... --out DIR`` (:mod:`.decision`) decides.

The gates' outputs are keyed as the runner's own stages (``<output>.key.json``, with the same
settings, names and directories as when ``python -m soft_spatial.lab.learning budget=paths`` ran
them: that command now refuses the budget, naming this one), so an existing seed directory
continues here, a re-run makes nothing again, and other settings are refused before anything runs.
"""
from __future__ import annotations

import json
from pathlib import Path

from soft_spatial.infra.provenance import ANY, Keyed, Verdict
from soft_spatial.lab.learning import experiment as learning
from soft_spatial.lab.learning.config import LearnConfig
from soft_spatial.lab.learning.experiment import Experiment, keyed
from soft_spatial.lab.softness.gates import GATE_EVALS

__all__ = ["PROG", "GATE_VIEWS", "Phase0Gates", "GATES", "main"]

PROG = "python -m soft_spatial.lab.softness run"
#: the warm starts the gates read, in GATE_EVALS's order
GATE_VIEWS = tuple(dict.fromkeys(view for view, _, _ in GATE_EVALS.values()))


class Phase0Gates:
    """Phase 0's gates as the learning runner's stages before GRPO (`BeforeGRPO`)."""

    def check(self, cfg: LearnConfig) -> None:
        if not set(GATE_VIEWS) <= set(cfg.warmstart.views):
            raise ValueError(f"the gates need the warm starts of views {', '.join(GATE_VIEWS)}, "
                             f"got warmstart.views={cfg.warmstart.views}")

    def gate_stages(self, exp: Experiment) -> dict[str, Keyed]:
        """The evaluations the gates read, keyed as any evaluation of a warm start."""
        return {name: exp.eval_stage(f"gate_{name}", exp.warm_stage(view), mode,
                                     extra=[f"soft_thinking.fixed_tau={tau}"] if tau is not None
                                     else [])
                for name, (view, mode, tau) in GATE_EVALS.items()}

    def gates_stage(self, exp: Experiment) -> Keyed:
        """``gates.json`` (and ``gates.md``): made again whenever an evaluation changed."""
        return keyed("5g gates", exp.out / "gates.json", {}, ANY, **self.gate_stages(exp))

    def stages(self, exp: Experiment) -> list[Keyed]:
        return [*self.gate_stages(exp).values(), self.gates_stage(exp)]

    def run(self, exp: Experiment) -> bool:
        """The gate evaluations and the gates (each skipped when complete under its key); prints
        the table; whether every gate passed."""
        from soft_spatial.data.synthetic import read_rows
        from soft_spatial.lab.softness.branches import accuracy_by, branch_readouts
        from soft_spatial.lab.softness.gates import measure_gates, write_gates

        exp.say("5g gates: the warm starts before any GRPO")
        stages = self.gate_stages(exp)  # those to make in one process (`Experiment.evaluate_many`)
        evals = dict(zip(stages, exp.evaluate_many(
            [(stage, exp.warm_dir(GATE_EVALS[name][0]), None) for name, stage in stages.items()],
            "eval_gates")))
        stage = self.gates_stage(exp)
        if not (exp.start(stage) is Verdict.SAME and stage.output.is_file()):
            rows = read_rows(exp.data / "OmniSpatial-test")
            result = measure_gates(evals, rows)
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(exp.warm)
            result["branches"] = {n: branch_readouts(d, rows, tok) for n, d in evals.items()
                                  if GATE_EVALS[n][1] == "fixed"}
            result["by_t_star"] = {n: accuracy_by(Path(d) / "samples.jsonl", rows)["t_star"]
                                   for n, d in evals.items()}
            write_gates(exp.out, result)
            exp.finish(stage)
        print((exp.out / "gates.md").read_text(), flush=True)
        passed = json.loads((exp.out / "gates.json").read_text())["passed"]
        if not passed:
            exp.say(f"a gate failed (table {exp.out / 'gates.md'}): the registered rule stops the "
                    f"protocol before GRPO")
        return passed


GATES = Phase0Gates()


def main() -> None:
    """``python -m soft_spatial.lab.softness run ...`` (Hydra reads the overrides from sys.argv)."""
    learning.main(PROG, GATES)

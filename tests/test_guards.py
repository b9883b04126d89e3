"""Every module of the package has a guard: a test module named for it, where the tests mirror the
package (``soft_spatial/<layer>/<module>.py`` → ``tests/<layer>/test_<module>.py``;
``soft_spatial/<module>.py`` → ``tests/test_<module>.py``; ``__main__.py`` → ``test_main.py``), or
an entry in :data:`UNGUARDED` saying why it has none and which test files exercise it instead.

    .venv/bin/python tests/test_guards.py     # lists the modules with no guard file

The rule is written in docs/development.md ("Where a test goes").
"""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "soft_spatial"
TESTS = ROOT / "tests"

_SGLANG = "SGLang's real modules: tests that need the overlay live in tests/sglang_real/"
_GPU = ("a GPU kit stage (CUDA only): run by scripts/gpu/kit.py on a lent GPU; its CPU-side parts "
        "and the dry run are tested")
_ANALYSIS = "a part of python -m soft_spatial.analysis, tested through the command's figures"
_COMMAND = "a command's entry point (an import and a call): its code has the tests named"

#: module (relative to soft_spatial/) -> (why it has no test module named for it, the test files
#: that exercise it instead). Kept exact by the tests below: an entry whose module gained its own
#: guard file, or that names a test file that is gone, fails.
UNGUARDED: dict[str, tuple[str, tuple[str, ...]]] = {
    "compat/sglang.py": (_SGLANG, ("tests/sglang_real/test_compat_sglang.py",
                                   "tests/sglang_real/test_graph_capture.py")),
    "compat/verl/checks.py": ("verl's internals are guarded in one file",
                              ("tests/compat/test_verl.py",)),
    "compat/verl/engine.py": ("verl's internals are guarded in one file", ("tests/compat/test_verl.py",)),
    "compat/verl/merger.py": ("verl's merger loads a real checkpoint: an end-to-end guarantee",
                              ("tests/e2e/test_export_safety.py", "tests/e2e/test_hostile_pickles.py")),
    "compat/verl/rollout.py": ("verl's internals are guarded in one file", ("tests/compat/test_verl.py",)),
    "compat/verl/trainer.py": ("verl's internals are guarded in one file",
                               ("tests/compat/test_verl.py", "tests/e2e/test_noise_streams.py")),
    "engines/prompts.py": ("one rendering of prompts shared by every engine: tested through them",
                           ("tests/engines/test_local.py", "tests/engines/sglang/test_engine.py")),
    "engines/replay.py": ("replay is checked against the engines' own decoding",
                          ("tests/engines/test_local.py", "tests/actor/test_train_engine.py")),
    "engines/sglang/client.py": ("the SGLang backend's CPU-side parts share one file",
                                 ("tests/engines/sglang/test_engine.py",)),
    "engines/sglang/hooks.py": (_SGLANG, ("tests/sglang_real/test_plugin_real.py",
                                          "tests/sglang_real/test_graph_capture.py")),
    "engines/sglang/runtime.py": ("the SGLang backend's CPU-side parts share one file",
                                  ("tests/engines/sglang/test_engine.py",)),
    "engines/sglang/server_args.py": ("the SGLang backend's CPU-side parts share one file",
                                      ("tests/engines/sglang/test_engine.py",)),
    "infra/hydra_args.py": ("renamed Hydra groups on real command lines", ("tests/e2e/test_settings_names.py",)),
    "infra/ray_session.py": ("a local Ray session never outlives its driver: real processes",
                             ("tests/test_train.py", "tests/e2e/test_train_signals.py")),
    "infra/run_dir.py": ("resume step and metrics of a run directory", ("tests/test_train.py",)),
    "infra/signals.py": ("real signals to real commands", ("tests/e2e/test_train_signals.py",
                                                           "tests/e2e/test_eval_signals.py")),
    "integration/platform.py": ("the CPU platform every verl test runs on", ("tests/compat/test_verl.py",
                                                                             "tests/test_plugin.py")),
    "integration/task_runner.py": ("verl's TaskRunner with the soft worker and trainer swapped in: each of its methods "
                                   "runs in the TaskRunner actor of a real training run (no part of it runs alone): "
                                   "test_train_cpu.py::test_train_resume_export_and_evaluate",
                                   ("tests/e2e/test_train_cpu.py", "tests/lab/paper/test_ablation.py")),
    "rollout/sglang_server.py": (_SGLANG + " (it subclasses verl's SGLang server and adapter: importing it "
                                           "imports sglang)", ("tests/sglang_real/test_verl_server.py",)),
    "lab/paper/analysis/data.py": (_ANALYSIS, ("tests/lab/paper/analysis/test_cli.py",)),
    "lab/paper/analysis/plotting.py": (_ANALYSIS, ("tests/lab/paper/analysis/test_cli.py",)),
    "lab/paper/analysis/spread.py": (_ANALYSIS, ("tests/lab/paper/analysis/test_cli.py",)),
    "lab/paper/analysis/tau_entropy.py": (_ANALYSIS, ("tests/lab/paper/analysis/test_cli.py",)),
    "lab/paper/analysis/trace_html.py": (_ANALYSIS, ("tests/lab/paper/analysis/test_cli.py",)),
    "lab/paper/analysis/training.py": (_ANALYSIS, ("tests/lab/paper/analysis/test_cli.py",)),
    "bench/gpu/actor_update.py": (_GPU, ("tests/bench/gpu/test_headline.py",)),
    "bench/gpu/context.py": (_GPU, ("tests/bench/gpu/test_headline.py",)),
    "bench/gpu/embedded.py": (_GPU, ("tests/bench/gpu/test_headline.py",)),
    "bench/gpu/graphs.py": (_GPU, ("tests/bench/gpu/test_headline.py",
                                   "tests/sglang_real/test_gpu_headline_dry_run.py")),
    "bench/gpu/measure.py": (_GPU, ("tests/bench/gpu/test_headline.py",)),
    "bench/gpu/prompts.py": (_GPU, ("tests/bench/gpu/test_headline.py",)),
    "bench/gpu/report.py": (_GPU, ("tests/bench/gpu/test_headline.py",)),
    "bench/gpu/sampler_sync.py": (_GPU, ("tests/engines/sglang/test_engine.py",)),
    "bench/gpu/sglang_args.py": (_GPU, ("tests/bench/gpu/test_headline.py",)),
    "bench/gpu/soft_parity.py": (_GPU, ("tests/bench/gpu/test_headline.py",)),
    "bench/gpu/softthink_sizes.py": (_GPU, ("tests/bench/gpu/test_headline.py",)),
    "bench/gpu/stages.py": (_GPU, ("tests/bench/gpu/test_grpo.py", "tests/sglang_real/test_gpu_kit_stage_e.py")),
    "bench/gpu/selftest.py": ("jobs that test the plan's runner itself", ("tests/bench/gpu/test_runner.py",)),
    "lab/learning/report.py": ("the learning experiment's report", ("tests/lab/learning/test_experiment.py",)),
    "lab/paper/calibration/cli.py": ("python -m soft_spatial.stats", ("tests/lab/paper/calibration/test_entropy.py",)),
    "stats.py": (_COMMAND, ("tests/lab/paper/calibration/test_entropy.py",
                            "tests/e2e/test_stats_entropy_usage.py")),
    "ablation.py": (_COMMAND, ("tests/lab/paper/test_ablation.py",)),
    "analysis.py": (_COMMAND, ("tests/lab/paper/analysis/test_cli.py",)),
    "lab/learn.py": (_COMMAND + " (the learning experiment's former name)",
                     ("tests/lab/learning/test_experiment.py",)),
    "lab/learning/__main__.py": (_COMMAND, ("tests/lab/learning/test_experiment.py",)),
    "lab/softness/__main__.py": (_COMMAND + " (run or the decision, by the first argument)",
                                 ("tests/lab/softness/test_phase0.py", "tests/e2e/test_softness_phase0.py")),
}


def modules() -> list[str]:
    """Every module of the package (relative to soft_spatial/), package ``__init__`` files aside."""
    return sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if p.name != "__init__.py")


def guard_file(module: str) -> Path:
    """The test module named for ``module`` (relative to soft_spatial/)."""
    path = Path(module)
    name = "main" if path.stem == "__main__" else path.stem
    return TESTS / path.parent / f"test_{name}.py"


def unguarded() -> list[str]:
    return [m for m in modules() if not guard_file(m).is_file()]


def test_every_module_has_a_guard_file_or_a_reason():
    missing = [m for m in unguarded() if m not in UNGUARDED]
    assert not missing, ("modules with no tests/<layer>/test_<module>.py and no reason in "
                         f"tests/test_guards.py UNGUARDED: {missing}")


def test_the_list_of_reasons_is_exact():
    mods = set(modules())
    assert not [m for m in UNGUARDED if m not in mods], "UNGUARDED names modules that are gone"
    guarded = [m for m in UNGUARDED if guard_file(m).is_file()]
    assert not guarded, f"these modules have their own guard file now: remove them from UNGUARDED: {guarded}"
    for module, (reason, files) in UNGUARDED.items():
        assert reason and files, module
        gone = [f for f in files if not (ROOT / f).is_file()]
        assert not gone, f"{module}: the test files named are gone: {gone}"


def test_tests_mirror_the_layers():
    """A test file lives in the folder of the layer it guards (the package's folders), in
    ``tests/e2e/`` (guarantees across layers), at the top (the package's own modules and the
    house's checks) or in ``tests/sglang_real/``; helpers (no tests) in ``tests/support/``."""
    folders = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*") if p.is_dir()
               and p.name != "__pycache__"}
    allowed = folders | {".", "e2e", "sglang_real"}
    misplaced = [str(p.relative_to(TESTS)) for p in TESTS.rglob("test_*.py")
                 if "sglang_stubs" not in p.parts and "support" not in p.parts
                 and str(p.parent.relative_to(TESTS)) not in allowed]
    assert not misplaced, misplaced
    helpers_named_as_tests = [str(p.relative_to(TESTS)) for p in (TESTS / "support").rglob("test_*.py")]
    assert not helpers_named_as_tests, helpers_named_as_tests


if __name__ == "__main__":
    for m in unguarded():
        print(m, "-", UNGUARDED.get(m, ("NO REASON",))[0])

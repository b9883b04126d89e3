"""Every module of the package has a guard: a test module named for it, where the tests mirror the
package (``soft_spatial/<layer>/<module>.py`` → ``tests/<layer>/test_<module>.py``;
``soft_spatial/<module>.py`` → ``tests/test_<module>.py``; ``__main__.py`` → ``test_main.py``; the
benchmarks' ``soft_spatial_bench/<module>.py`` → ``tests/bench/test_<module>.py``), or
an entry in :data:`UNGUARDED` saying why it has none and which test files exercise it instead.

    .venv/bin/python tests/test_guards.py     # lists the modules with no guard file

The rule is written in docs/development.md ("Where a test goes").
"""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "soft_spatial"
BENCH = ROOT / "soft_spatial_bench"  # its modules are named bench/... here, their tests' folder
TESTS = ROOT / "tests"

_SGLANG = "SGLang's real modules: tests that need the overlay live in tests/sglang_real/"
_COMMAND = "a command's entry point (an import and a call): its code has the tests named"
_PLAN = ("the headline plan's {} jobs (an SGLang engine each, CUDA on a lent GPU): only the plan's runner "
         "runs them, on SGLang's real CPU engine with --dry-run: "
         "tests/sglang_real/test_gpu_headline_dry_run.py::test_the_headline_plan_runs_whole_on_the_cpu; their "
         "server arguments for every engine of the plan: tests/bench/gpu/test_headline.py")

#: module (relative to soft_spatial/) -> (why it has no test module named for it, and which test runs it;
#: the test files that exercise it instead). Only modules that an end-to-end run alone can exercise, or
#: that are an import and a call. Kept exact by the tests below: an entry whose module gained its own
#: guard file, or that names a test file that is gone, fails.
UNGUARDED: dict[str, tuple[str, tuple[str, ...]]] = {
    **{f"compat/sglang/{m}.py": (_SGLANG + " (SGLang's internals by area: check_internals asks each "
                                           "module what moved)",
                                  ("tests/sglang_real/test_compat_sglang.py",
                                   "tests/sglang_real/test_graph_capture.py"))
       for m in ("checks", "graph_log", "graphs", "ops", "phases", "records", "requests", "sampler",
                 "scheduler")},
    "engines/sglang/hooks.py": (_SGLANG, ("tests/sglang_real/test_plugin_real.py",
                                          "tests/sglang_real/test_graph_capture.py")),
    "rollout/sglang_server.py": (_SGLANG + " (it subclasses verl's SGLang server and adapter: importing it "
                                           "imports sglang)", ("tests/sglang_real/test_verl_server.py",)),
    "integration/task_runner.py": ("verl's TaskRunner with the soft worker and trainer swapped in: each of its methods "
                                   "runs in the TaskRunner actor of a real training run (no part of it runs alone): "
                                   "test_train_cpu.py::test_train_resume_export_and_evaluate",
                                   ("tests/e2e/test_train_cpu.py", "tests/lab/paper/test_ablation.py")),
    "bench/gpu/soft_parity.py": (_PLAN.format("D and G"), ("tests/sglang_real/test_gpu_headline_dry_run.py",
                                                           "tests/bench/gpu/test_headline.py")),
    "bench/gpu/selftest.py": ("jobs that exist to be run by the plan's runner in its watched child process (they "
                              "kill or hang that process): every test of tests/bench/gpu/test_runner.py runs them",
                              ("tests/bench/gpu/test_runner.py",)),
    "stats.py": (_COMMAND, ("tests/lab/paper/calibration/test_cli.py",
                            "tests/e2e/test_stats_entropy_usage.py")),
    "ablation.py": (_COMMAND, ("tests/lab/paper/test_ablation.py",)),
    "analysis.py": (_COMMAND, ("tests/lab/paper/analysis/test_cli.py",)),
    "lab/learning/__main__.py": (_COMMAND, ("tests/lab/learning/test_experiment.py",)),
    "lab/softness/__main__.py": (_COMMAND + " (run or the decision, by the first argument)",
                                 ("tests/lab/softness/test_phase0.py", "tests/e2e/test_softness_phase0.py")),
    "data/synthetic/__main__.py": (_COMMAND, ("tests/data/synthetic/test_cli.py",)),
}


def modules() -> list[str]:
    """Every module of the package (relative to soft_spatial/) and of the benchmarks (``bench/``
    and its path in soft_spatial_bench/), package ``__init__`` files aside."""
    return sorted([str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"]
                  + [f"bench/{p.relative_to(BENCH)}" for p in BENCH.rglob("*.py") if p.name != "__init__.py"])


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
    folders = ({str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*") if p.is_dir()
                and p.name != "__pycache__"}
               | {"bench"} | {f"bench/{p.relative_to(BENCH)}" for p in BENCH.rglob("*") if p.is_dir()
                              and p.name != "__pycache__"})
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

"""The GPU kit's jobs: what each measures, what it needs, how long it takes on an H200, and the
lease plan (which ``--only`` sets, in which order, for the next three 15-minute loans).

A job is data (:class:`Job`: its kind and arguments travel as JSON to the child process that runs
it); :data:`soft_spatial_bench.gpu.runner.KINDS` maps its kind to the functions that measure and
render it. The estimates (:attr:`Job.est_s`) come from the recorded runs
(docs/results/gpu-runs.md, 2026-11-26: model build 21–28 s, an F job 36–76 s with its engine's
start 28–52 s, the first engine of a call 52 s, D's references 17 s, a D engine 39–51 s, E's two
steps 244–256 s with the quick model's build; 2026-11-28: the first engine with SGLang's fused
kernels on a fresh machine about 130 s, its first graph capture 67 s) and are what :data:`LEASES` is packed with
(docs/gpu.md, "The lease plan", is checked against them by tests/bench/gpu/test_jobs.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Job", "plan", "LEASES", "LEASES_BEFORE_SPEED", "DRY_RUN", "STAGES", "RETIRED", "RETIRED_AT",
           "FIRST_ENGINE_S",
           "lease_only", "lease_seconds", "PLAN_S_PER_CALL", "PLAN_S_PER_LEASE",
           "PROFILE_PASS_S", "SAMPLER_BENCH_S"]

#: what the first engine of a kind adds to a call, by its kernels (Triton's JIT, cold caches):
#: native ops 52 s against 28–32 (2026-11-26), a warm-up engine 34 s; SGLang's fused kernels about
#: 130 s, its first CUDA-graph capture (64 rows) 67 s, against 30–42 s warm (2026-11-28)
FIRST_ENGINE_S = {"native": 25.0, "fused": 110.0}
#: a guess, never measured: flashinfer's JIT building its decode, prefill and cascade modules
FLASHINFER_BUILD_S = 180.0
#: the plan's deadline in one call (docs/gpu.md's one-call recipe: 560 s after the call began,
#: less the kit's install and the interpreter's start, ~40 s)
PLAN_S_PER_CALL = 520.0
#: guesses, never measured: an F job's profile pass (one generate of 64 rows x 24 steps under
#: torch.profiler, the trace written and summarised) and X/sampler (no engine: CUDA's start, 12
#: runtimes' graphs captured, 6 x 62 steps of two paths at the Qwen vocabulary)
PROFILE_PASS_S, SAMPLER_BENCH_S = 10.0, 20.0


@dataclass(frozen=True)
class Job:
    """One piece of the plan. ``cap_s``: the most it may take on a GPU (None: what remains);
    ``needs``: jobs that must have finished ok; ``min_left``: seconds that must remain to start
    it; ``est_s``: its expected seconds on an H200 (recorded timings); ``args``: its kind and
    parameters; ``extra``: not counted in the plan's exit status."""

    part: str
    name: str
    cap_s: float | None
    est_s: float
    needs: tuple[str, ...] = ()
    extra: bool = False
    min_left: float = 20.0
    args: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.part}/{self.name}"

    def to_dict(self) -> dict:
        return {"part": self.part, "name": self.name, "cap_s": self.cap_s, "est_s": self.est_s,
                "needs": list(self.needs), "extra": self.extra, "min_left": self.min_left,
                "args": self.args}

    @classmethod
    def from_dict(cls, d: dict) -> "Job":
        return cls(**dict(d, needs=tuple(d["needs"])))


def _f(name: str, engine: str, mode: str, *, overlap: bool, kernels: str = "native",
       model: str = "2b", graphs: bool = True, est: float = 65.0, part: str = "F",
       attention: str | None = None, cap: float | None = None, profile: bool = False) -> Job:
    needs = ("model/build-8b",) if model == "8b" else ("model/build",)
    args = {"kind": "engine", "engine": engine, "mode": mode, "graphs": graphs,
            "overlap": overlap, "kernels": kernels, "model": model}
    if attention:
        args["attention"] = attention
    if profile:  # where a decode step's time goes (graphs.profile_pass)
        args["profile"] = True
        est += PROFILE_PASS_S
    # the cap holds the kind's warm-up engine too: a fresh machine's first fused job took more
    # than 130 s (2026-11-28: killed at its cap while its warm-up engine captured its graphs)
    default = 130 + (FIRST_ENGINE_S[kernels] if kernels == "fused" else 0) + (20 if model == "8b" else 0)
    return Job(part, name, cap or default, est, needs, part == "X", 60.0, args)


def _e(name: str, est: float, part: str = "E", **spec) -> Job:
    return Job(part, name, None, est, (), part == "X", 150.0, {"kind": "grpo", **spec})


def _f_table(kernels: str) -> list[Job]:
    """Stock hard and the plugin with the same kernels, overlap off and on on both sides; with
    SGLang's fused kernels the overlap-off jobs of stock and the soft modes end with a profile
    pass (docs/gpu.md, "Where the time goes")."""
    p, fused = ("", False) if kernels == "native" else ("fused-", True)
    return [_f(f"{p}stock-hard", "stock", "hard", overlap=True, kernels=kernels),
            _f(f"{p}stock-hard-overlap-off", "stock", "hard", overlap=False, kernels=kernels,
               profile=fused),
            _f(f"{p}plugin-fixed", "plugin", "fixed", overlap=False, kernels=kernels,
               profile=fused),
            _f(f"{p}plugin-adaptsoft", "plugin", "adaptsoft", overlap=False, kernels=kernels,
               profile=fused),
            _f(f"{p}plugin-fixed-overlap-on", "plugin", "fixed", overlap=True, kernels=kernels),
            _f(f"{p}plugin-adaptsoft-overlap-on", "plugin", "adaptsoft", overlap=True,
               kernels=kernels),
            _f(f"{p}plugin-hard", "plugin", "hard", overlap=False, kernels=kernels)]


def plan() -> list[Job]:
    """Every job, in the order of the lease plan (:data:`LEASES`), then the rest."""
    jobs = _jobs()
    order = list(dict.fromkeys(k for lease in LEASES for call in lease for k in call))
    rank = {k: i for i, k in enumerate(order)}
    return sorted(jobs, key=lambda j: rank.get(j.key, len(order)))  # stable: the rest in order


def _jobs() -> list[Job]:
    jobs = [
        Job("model", "build", 150, 25.0, args={"kind": "model", "model": "2b"}),
        *_f_table("native"),
        Job("X", "sync", 90, 30.0, extra=True, min_left=40.0, args={"kind": "sync"}),
        Job("X", "sampler", 120, SAMPLER_BENCH_S, extra=True, min_left=40.0,
            args={"kind": "sampler"}),
        Job("X", "overlap-parity", 160, 80.0, ("model/build",), True, 80.0,
            {"kind": "overlap", "modes": ["adaptsoft"]}),
        *_f_table("fused"),
        Job("D", "references", 150, 17.0, ("model/build",),
            args={"kind": "refs", "modes": ["fixed", "adaptsoft"]}),
        # G's first engine captures fp32 graphs through Triton's JIT on a fresh machine: still at
        # its first capture 45 s in (2026-11-28, cut by the deadline); the cap holds that
        Job("G", "fixed", 240, 120.0, ("D/references",), args={"kind": "parity", "mode": "fixed",
                                                                 "graphs": True}),
        Job("G", "adaptsoft", 240, 50.0, ("D/references",),
            args={"kind": "parity", "mode": "adaptsoft", "graphs": True}),
        Job("D", "fixed", 130, 51.0, ("D/references",), args={"kind": "parity", "mode": "fixed"}),
        Job("D", "adaptsoft", 130, 39.0, ("D/references",),
            args={"kind": "parity", "mode": "adaptsoft"}),
        _e("fp32", 200.0, dtype="float32", weights="parity", steps=1, diagnose_dry=True),
        _e("bf16", 250.0, dtype="bfloat16", weights="parity", steps=2),
        Job("model", "build-8b", 60, 10.0, args={"kind": "model", "model": "8b"}),
        _f("8b-stock-hard", "stock", "hard", overlap=False, kernels="fused", model="8b", est=90.0),
        _f("8b-plugin-fixed", "plugin", "fixed", overlap=False, kernels="fused", model="8b",
           est=90.0),
        _e("hard", 230.0, dtype="bfloat16", weights="parity", steps=2, experiment="hard"),
        Job("X", "references-hard", 120, 20.0, ("model/build",), True, 60.0,
            {"kind": "refs", "modes": ["hard"]}),
        Job("X", "parity-hard", 130, 45.0, ("X/references-hard",), True, 60.0,
            {"kind": "parity", "mode": "hard"}),
        _f("plugin-fixed-graphs-off", "plugin", "fixed", overlap=False, graphs=False, part="X"),
        # flashinfer's attention (verl's choice for SGLang), built by its JIT on the device in
        # the first job's warm-up engine: that build's time is the number still unknown
        _f("fi-stock-hard", "stock", "hard", overlap=False, kernels="fused",
           attention="flashinfer", est=65.0 + FLASHINFER_BUILD_S, cap=480),
        _f("fi-plugin-fixed", "plugin", "fixed", overlap=False, kernels="fused",
           attention="flashinfer", cap=480),
        _e("grpo-resume", 300.0, part="X", dtype="bfloat16", weights="tiny", steps=2,
           resume=True),
        # verl's own hard GRPO, once soft_spatial.train's trainer runs a rollout without records
        # (grpo.STOCK_BLOCKED: until then it is skipped, saying why)
        _e("hard-stock", 230.0, part="X", dtype="bfloat16", weights="parity", steps=2,
           experiment="hard", stock=True),
    ]
    return jobs


#: the former per-stage command's stages (``check.py --stages``), as the plan's jobs
STAGES = {"d": ["model/build", "D/references", "D/fixed", "D/adaptsoft", "G/fixed", "G/adaptsoft"],
          "e": ["X/grpo-resume"],
          "f": ["model/build", "X/sync", "F/stock-hard", "F/plugin-fixed", "F/plugin-adaptsoft",
                "X/overlap-parity"]}
#: the first checks (the former stages a, b, c, then jobs A/embedded, B/softthink, C/actor-update:
#: the embedded engine at the 8B shape, softthink at real sizes, one actor update through verl's
#: FSDP2 engine), measured on H100s in 2026-11-23/24 (157 s, 5 s, 314 s) and retired having
#: served; the last commit that holds them
RETIRED = {"a": "A/embedded", "b": "B/softthink", "c": "C/actor-update"}
RETIRED_AT = "58b8ea7"


# The next 15-minute loans, two calls each (docs/gpu.md, "The lease plan"), in order of value. A
# loan is 900 s of device time: the machine's start (1-3 min), each call's transfer, install and
# interpreter start (~30 s), the plans; so a call's plan holds at most PLAN_S_PER_CALL and a
# loan's two at most PLAN_S_PER_LEASE by the estimates. The first loan after the sampler's host
# work went (issue 53) measures what it gained: the fused F table against stock with overlap
# off, where each step's time goes, the captured sampler against the eager one, graphs-on
# parity; the overlap-on jobs come second (overlap is decided again by its rule). A loan before
# that lands runs E (it does not depend on it): LEASES_BEFORE_SPEED.
LEASES = [
    [  # 1: the plugin at stock speed? (0.53-0.63x stock hard at 64 rows, overlap off, on
        # 2026-11-28, before the sampler's host work went), plugin hard beside them (its
        # machinery without soft thinking), where each step's time goes; the captured sampler's
        # records against the eager ones; soft parity under replayed graphs
        ["model/build", "X/sampler", "F/fused-stock-hard-overlap-off", "F/fused-plugin-fixed",
         "F/fused-plugin-adaptsoft", "F/fused-plugin-hard"],
        ["model/build", "D/references", "G/fixed", "G/adaptsoft"],
    ],
    [  # 2: the overlap-on table (overlap's default is decided again by its rule); E in fp32
        # (the replay check within 1e-3 nats)
        ["model/build", "F/fused-stock-hard", "F/fused-plugin-fixed-overlap-on",
         "F/fused-plugin-adaptsoft-overlap-on"],
        ["model/build", "E/fp32"],
    ],
    [  # 3: E in bf16 on the parity weights; the paper's shape
        ["model/build", "E/bf16"],
        ["model/build-8b", "F/8b-stock-hard", "F/8b-plugin-fixed"],
    ],
    [  # 4: hard thinking on the same pipeline; flashinfer's attention (verl's choice for
        # SGLang: its JIT build's time is the unknown)
        ["model/build", "E/hard"],
        ["model/build", "F/fi-stock-hard", "F/fi-plugin-fixed"],
    ],
]
#: what a loan runs while the speed work is still being built (it depends on none of it)
LEASES_BEFORE_SPEED = [[["model/build", "E/fp32"], ["model/build", "E/bf16"]]]
PLAN_S_PER_LEASE = 720.0  # 900 - 120 (the machine's start) - 2 x 30 (per call)

# The CPU dry run (tests/sglang_real/test_gpu_headline_dry_run.py): every code path the lease
# plan's jobs take, once, at tiny sizes (a GPU-only difference such as bf16 or graphs on is the
# same code with other arguments: tests/bench/gpu cover those; a D job is a G job without its
# warm-up generate, and its arguments are checked in tests/bench/gpu/test_headline.py). Overlap
# on is F/stock-hard's; the plugin under overlap decodes in tests/sglang_real/test_real_engine_overlap.py
# (records on against off, bit for bit), and X/overlap-parity, in no loan while overlap stays off,
# is that comparison with the kit's engines: its verdict is unit-tested in tests/bench/gpu/test_overlap.py.
# F/fused-plugin-adaptsoft's profile pass is the profile path of every profiled job. X/sampler
# (no engine) runs its dry run, the static path without a graph, in
# tests/bench/gpu/test_sampler_bench.py (the capture is CUDA's; its logic is
# tests/engines/sglang/test_runtime.py's). E/hard is E/fp32's job with experiment=hard: that
# spec's settings and verdict are unit-tested in tests/bench/gpu/test_grpo.py, the hard preset
# trains end to end in tests/e2e/test_multinode_train.py and SGLang's verl server decodes hard
# mode in tests/sglang_real/test_verl_server.py.
DRY_RUN = ["model/build", "F/stock-hard", "F/fused-plugin-adaptsoft", "X/sync", "D/references",
           "G/adaptsoft", "E/fp32", "model/build-8b", "F/8b-plugin-fixed"]


def lease_only(lease: int, call: int) -> str:
    """The ``--only`` argument of loan ``lease``'s call ``call`` (both from 1)."""
    return ",".join(LEASES[lease - 1][call - 1])


def lease_seconds(keys: list[str], jobs: list[Job] | None = None) -> float:
    """Estimated seconds of ``keys`` on an H200 in one call: the jobs' estimates, plus
    :data:`FIRST_ENGINE_S` for the first engine of each kind of kernels and model."""
    by = {j.key: j for j in (jobs or plan())}
    firsts = {(by[k].args.get("kernels"), by[k].args.get("model"), by[k].args.get("attention"))
              for k in keys if by[k].args.get("kind") == "engine"}
    return sum(by[k].est_s for k in keys) + sum(FIRST_ENGINE_S[kernels] for kernels, _, _ in firsts)

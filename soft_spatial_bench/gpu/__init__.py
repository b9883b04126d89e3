"""The GPU kit's checks, one module per concept (``scripts/gpu/check.py`` is the command;
``scripts/gpu/kit.py`` stages and installs the packages the lent machines lack; docs/gpu.md).

The plan's jobs are keyed ``<letter>/<name>`` (``jobs.py``); each job's kind is one (measure,
render) pair in ``runner.KINDS``, its measure returning a dataclass of the module that runs it.
The former stage e is ``X/grpo-resume`` (``jobs.STAGES``); a, b and c (the first checks) retired
having served (``jobs.RETIRED``).

| module (its helpers) | its jobs | what it is |
|---|---|---|
| ``headline`` | | the command (``scripts/gpu/check.py``) and the plan's report |
| ``jobs`` | | the plan's jobs as data, their estimated seconds, the lease plan, the dry run's set |
| ``runner`` | | runs jobs in a watched, tethered child; the table of kinds (measure, render) |
| ``report`` | | the live report: a JSON line per result, the Markdown rebuilt after each |
| ``context`` | ``model/...`` | what a job runs with (device, scratch, deadline); the 2B and 8B models |
| ``graphs`` (``profile``) | ``F/...``, ``X/*-graphs-off`` | an SGLang engine's decoding throughput; profiled |
| ``graphs`` (``sampler_sync``) | ``X/sync`` | the soft sampler, driven as SGLang drives it, never waits |
| ``soft_parity`` (``parity``) | ``D/...``, ``G/...``, ``X/*-hard`` | fp32 references; SGLang fp32 against them |
| ``grpo`` (``replay_inputs``) | ``E/...``, ``X/grpo-*`` | GRPO through verl with SGLang rollouts; resumed |
| ``sampler_bench`` | ``X/sampler`` | the sampler's step alone, eager against graphed, records equal |
| ``overlap`` | ``X/overlap-parity`` | overlap scheduling on against off, beside the run-to-run control |
| ``selftest`` | the runner's tests | jobs that crash, hang or leave an orphan of another session |
| ``measure`` | | the decoding modes and the versions line a report names |
| ``sglang_args`` | | every CUDA engine's server arguments and environment; which is unset |
| ``prompts`` | | image chat prompts and token-id text prompts |
"""

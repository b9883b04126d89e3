"""The GPU kit's checks, one module per concept (``scripts/gpu/check.py`` is the command;
``scripts/gpu/kit.py`` stages and installs the packages the lent machines lack; docs/gpu.md).

Which module runs what. The headline plan's jobs (``--plan headline``) are keyed
``<letter>/<name>`` (``jobs.py``), each job's kind one (measure, render) pair in ``runner.KINDS``;
the per-stage command's stages (``--stages a,b,c,e``) are ``stages.STAGES``.

| job or stage | module (and its helpers) | what it runs |
|---|---|---|
| ``model/build``, ``model/build-8b`` | ``context`` | the 2B and 8B models the plan's jobs share |
| ``F/...`` | ``graphs`` (``profile``) | an SGLang engine's decoding throughput, stock or plugin; profiled |
| ``D/references`` | ``soft_parity`` | the embedded engine's fp32 references |
| ``D/fixed``, ``D/adaptsoft`` | ``soft_parity`` (``parity``) | SGLang in fp32 against them, CUDA graphs off |
| ``G/fixed``, ``G/adaptsoft`` | ``soft_parity`` (``parity``) | the same with CUDA graphs replayed |
| ``E/...`` | ``grpo`` (``replay_inputs``: its diagnosis; ``smoke_reward``) | GRPO through verl, SGLang rollouts |
| ``X/sync`` | ``graphs`` (``sampler_sync``) | the soft sampler, driven as SGLang drives it, never waits |
| ``X/sampler`` | ``sampler_bench`` | the sampler's step alone, eager against graphed, records equal |
| ``X/overlap-parity`` | ``overlap`` | overlap scheduling on against off, fp32, beside the run-to-run control |
| other ``X/...`` | its kind's | ``X/*-hard``: ``soft_parity``; ``X/*-graphs-off``: ``graphs``; ``X/grpo-*``: ``grpo`` |
| stage ``a`` | ``embedded`` | the embedded engine on CUDA at the 8B shape: τ→0 equals greedy; decode throughput |
| stage ``b`` | ``softthink_sizes`` | softthink at real sizes: alignment's time and memory, density, replay |
| stage ``c`` | ``actor_update`` | one actor update through verl's FSDP2 engine, per mode |
| stage ``e`` | ``grpo`` | GRPO with a checkpoint and a resume (the per-stage form of ``E``) |

The rest:

| module | what it is |
|---|---|
| ``headline`` | the headline plan's command and report (like-for-like ratios, overlap, parity, E) |
| ``jobs`` | the plan's jobs as data, their estimated seconds, the lease plan, the dry run's set |
| ``runner`` | runs jobs in a watched, tethered child; the table of kinds (measure, render) |
| ``stages`` | the per-stage command (``scripts/gpu/check.py`` without ``--plan``) |
| ``report`` | the live report: a JSON line per result, the Markdown rebuilt after each |
| ``context`` | what a job runs with (device, scratch, deadline); the 2B and 8B models (``model``) |
| ``measure`` | what the stages share: their context, Markdown report, synchronised timing, peak memory |
| ``sglang_args`` | every CUDA engine's server arguments and environment; which backend is unset |
| ``parity`` | step-by-step comparison of two engines' completions and the per-row bound |
| ``selftest`` | jobs that test the runner (a crash, a hang, an orphan of another session) |
| ``prompts`` | image chat prompts and token-id text prompts |
"""

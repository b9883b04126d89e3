"""The GPU kit's checks, one module per concept (``scripts/gpu/check.py`` is the command;
``scripts/gpu/kit.py`` stages and installs the packages the lent machines lack; docs/gpu.md).

| module | what it is |
|---|---|
| ``jobs`` | the plan's jobs as data, their estimated seconds, the three-lease plan, the dry run's set |
| ``runner`` | runs jobs in a watched, tethered child; the table of kinds (measure, render) |
| ``headline`` | the command and the report (like-for-like ratios, overlap, parity, E) |
| ``report`` | the live report: a JSON line per result, the Markdown rebuilt after each |
| ``context`` | what a job runs with (device, scratch, deadline); the 2B and 8B models (``model``) |
| ``sglang_args`` | every CUDA engine's server arguments and environment; which backend is unset |
| ``graphs`` | F: one SGLang engine's decode throughput (stock or plugin, kernels, overlap); X/sync |
| ``soft_parity`` | D and G: the embedded engine's references; SGLang fp32 verdicts, graphs off/on |
| ``overlap`` | X/overlap-parity: overlap on vs off in fp32 next to the run-to-run control |
| ``parity`` | step-by-step comparison of two engines' completions and the per-row bound |
| ``grpo`` | E: GRPO through verl with SGLang rollouts (specs, verdict, time split, sync) |
| ``replay_inputs`` | E's diagnosis: the first divergent step, the soft inputs tensor by tensor |
| ``smoke_reward`` | the reward with variance E and the suite's training tests load by path |
| ``selftest`` | jobs that test the runner (a crash, a hang, an orphan of another session) |
| ``sampler_sync`` | drives the soft sampler as SGLang does and checks it never waits for the device |
| ``prompts`` | image chat prompts and token-id text prompts |
"""

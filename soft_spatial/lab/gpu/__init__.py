"""The GPU kit's checks, one module per concept (``scripts/gpu/check.py`` is the command;
``scripts/gpu/kit.py`` stages and installs the packages the lent machines lack; docs/gpu.md).

| module | what it is |
|---|---|
| ``headline`` | the one-call plan: F, D, E and extras in a watched child process, a global deadline |
| ``report`` | the live report: a JSON line per result, the Markdown rebuilt after each |
| ``context`` | what a job runs with (device, scratch, deadline); the shared 2B-shaped model |
| ``sglang_args`` | every CUDA engine's server arguments and environment; which backend is unset |
| ``graphs`` | F: one SGLang engine's decode throughput (stock or plugin, graphs, overlap, ops) |
| ``soft_parity`` | D: the embedded engine's fp32/fp64 references; SGLang fp32 verdicts per row |
| ``parity`` | step-by-step comparison of two engines' completions and the per-row bound |
| ``grpo`` | E: GRPO through verl with SGLang rollouts (runs, time split, controller sync) |
| ``sampler_sync`` | drives the soft sampler as SGLang does and checks it never waits for the device |
| ``prompts`` | image chat prompts and token-id text prompts |
"""

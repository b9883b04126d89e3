"""Engineering checks: is the implementation right and fast? (The lab asks whether the method
works; nothing here imports it, nor it this.)

Key files:

==================  ============================================================================
``workloads.py``    the workloads and timing helpers of ``scripts/bench_*.py`` (interleaved turns,
                    paired ratios, exact tensor memory) and fixtures the GPU kit shares
``sampler.py``      a decode step's host cost, stock SGLang against the soft plugin, through
                    SGLang's real classes and its real CPU engine (``scripts/bench_sampler.py``)
``overlay.py``      the CPU environment in which SGLang's real modules import (the CPU benches)
``gpu/``            the GPU kit's checks behind ``scripts/gpu/check.py`` (docs/gpu.md): the
                    headline plan's jobs (F throughput, D and G parity, E GRPO), its runner and
                    report; ``scripts/gpu/kit.py`` stages the packages a lent machine lacks
==================  ============================================================================
"""

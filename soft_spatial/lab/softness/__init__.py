"""The softness experiment: does carrying several hypotheses through soft thinking help where a
task needs it (path tracking from an ambiguous start)? Registered rules and results:
docs/learning.md, docs/results/softness.md. The line is closed by Stage 0's rule (2026-11-28); the
reading diagnostic (2026-12-07) then found that the model reads a superposition handed to it
and loses most of that gain amid its own soft mixtures: the next step is a warm start that reads
them. It builds on the learning experiment (``lab/learning/``: its runner, warm starts and effect sizes); nothing there
imports this room.

Key files:

===================  ===========================================================================
``phase0.py``        ``python -m soft_spatial.lab.softness run budget=paths [seed=S] ...``: the
                     learning runner with Phase 0's gates as its stages before GRPO
``gates.py``         Phase 0's gates G1–G5 from the warm starts' evaluations
``decision.py``      ``python -m soft_spatial.lab.softness SEED_DIR... --out DIR``: Phase 1's
                     effects per seed and pooled, and the registered decision (``decide``)
``branches.py``      the mechanism readouts of path traces (live mass, effective K, t*)
``stage0.py``        ``python -m soft_spatial.lab.softness.stage0 SEED_DIR``: the second attempt's
                     Stage 0 (can the model read a superposition?)
``oracle_decode.py`` Stage 0's decode: the true live mixture fed at branch steps (soft or hard)
``reading.py``       ``python -m soft_spatial.lab.softness.reading SEED_DIR``: the reading
                     diagnostic (the oracle decode with every other step hard, issue 54)
``__main__.py``      the two commands above by the first argument (``run``, or seed directories)
===================  ===========================================================================

The task's leak audits (learned probes included) are ``soft_spatial/data/path_audit.py``.
"""

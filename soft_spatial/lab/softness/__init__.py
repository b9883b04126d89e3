"""The softness experiment: does carrying several hypotheses through soft thinking help where a
task needs it (path tracking from an ambiguous start)? Registered rules and results:
docs/learning.md, docs/results/softness.md. The line is closed (Stage 0, 2026-11-28).

Key files:

===================  ===========================================================================
``decision.py``      ``python -m soft_spatial.lab.softness SEED_DIR... --out DIR``: Phase 1's
                     effects per seed and pooled, and the registered decision (``decide``)
``gates.py``         Phase 0's gates G1–G5 from the warm starts' evaluations (run as a stage of
                     ``python -m soft_spatial.lab.learning budget=paths``)
``branches.py``      the mechanism readouts of path traces (live mass, effective K, t*)
``effects.py``       effect sizes in plain Python: pass@k, random-effects pooling, paired means,
                     a trend's slope with its interval
``stage0.py``        ``python -m soft_spatial.lab.softness.stage0 SEED_DIR``: the second attempt's
                     Stage 0 (can the model read a superposition?)
``oracle_decode.py`` Stage 0's decode: the true live mixture fed at branch steps
===================  ===========================================================================

The task's leak audits (learned probes included) are ``soft_spatial/data/path_audit.py``.
"""

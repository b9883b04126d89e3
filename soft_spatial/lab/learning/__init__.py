"""The learning experiment: does GRPO with soft thinking and AdaptSoft learn, on a CPU, through the
real commands? ``python -m soft_spatial.lab.learning [budget=demo|full] [seed=S]``
(docs/learning.md; its results: docs/results/learning.md). Experiments built on it hand its runner
stages of their own (``BeforeGRPO``; ``budget=paths`` is the softness experiment's, ``lab/softness/``)
and are never imported here.

Key files:

=========================  =====================================================================
``experiment.py``          the stages over one ``out=`` (data, model, warm starts, parquet, GRPO
                           per mode, export, evaluation, report), each keyed by the settings that
                           made it; the ``BeforeGRPO`` hook
``config.py``              every setting's default, constraint and why, once (``LearnConfig``)
``warmstart.py``           ``python -m soft_spatial.lab.learning.warmstart``: the supervised warm
                           start (a resumable PyTorch loop)
``path_views.py``          the warm start's views of a path question (hard, soft, no-chain)
``report.py``              ``report.md``, ``results.json``, the reward and τ plots of a run
``effects.py``             effect sizes in plain Python: paired means, a trend's slope with its
                           interval, pass@k, random-effects pooling
``configs/learning/``      the experiment's deltas (``learn.yaml``, ``budget/``, ``warmstart.yaml``)
                           and the GRPO preset it trains with (``recipe/``)
=========================  =====================================================================
"""

"""The lab: experiments built on the commands. The learning experiment on the synthetic benchmark
(``python -m soft_spatial.lab.learning``, with its warm start ``lab.warmstart``, whose knobs are
``lab.warmstart_settings``, and ``lab.report``),
the paper's Table 4 (``ablation``), the entropy statistics μ_H, σ_H (``stats/``), Figures 4–7
(``analysis/``) and the workloads of ``scripts/bench_*.py`` (``bench``)."""

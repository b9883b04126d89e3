"""The paper's tables and figures, reproduced on any run; the commands are
``python -m soft_spatial.ablation``, ``python -m soft_spatial.stats`` and
``python -m soft_spatial.analysis`` (docs/paper.md).

Key files:

==================  ============================================================================
``ablation.py``     Table 4: one training and evaluation per ablation row, the paper's layout
``calibration/``    μ_H and σ_H, AdaptSoft's entropy standardisation, for a new backbone
                    (``python -m soft_spatial.stats entropy``)
``analysis/``       Figures 4–7 from a run's ``metrics.jsonl`` and an evaluation's ``steps.jsonl``
==================  ============================================================================
"""

"""What AdaptSoft learned, as in the paper's Figures 4–7: ``python -m soft_spatial.analysis``.

Inputs are files: a training run's ``metrics.jsonl`` (Fig. 5) and an evaluation directory with
``samples.jsonl`` and ``steps.jsonl`` (Figs. 4, 6, 7; ``python -m soft_spatial.eval`` writes
both). Each module computes the numbers (pure numpy, tested) and draws the figure.
"""

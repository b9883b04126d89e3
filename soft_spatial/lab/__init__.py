"""The lab: experiments built on the commands, one room per question; a room imports only the rooms
listed before it (paper ← learning ← softness: tests/test_layers.py). Engineering checks of speed
and correctness are ``soft_spatial_bench/``.

==============  ================================================================================
``paper/``      the paper's Table 4 and Figures 4–7, and μ_H/σ_H for a new backbone
                (``python -m soft_spatial.ablation``, ``analysis``, ``stats``)
``learning/``   does GRPO with soft thinking and AdaptSoft learn on a CPU?
                (``python -m soft_spatial.lab.learning``; ``lab.learn`` is its former name)
``softness/``   does soft thinking help where several hypotheses must be carried? Built on the
                learning experiment's runner (``python -m soft_spatial.lab.softness run
                budget=paths``: the gates; Stage 0; the registered decision)
==============  ================================================================================
"""

"""The lab: experiments built on the commands, one room per question (engineering checks of
speed and correctness are ``soft_spatial/bench/``).

==============  ================================================================================
``learning/``   does GRPO with soft thinking and AdaptSoft learn on a CPU?
                (``python -m soft_spatial.lab.learning``; ``lab.learn`` is its former name)
``softness/``   does soft thinking help where several hypotheses must be carried?
                (the path-tracking experiment: gates, Stage 0, the registered decision)
``paper/``      the paper's Table 4 and Figures 4–7, and μ_H/σ_H for a new backbone
==============  ================================================================================
"""

"""End-to-end experiments on the synthetic benchmark: the warm start
(``python -m soft_spatial.lab.warmstart``) and the learning experiment
(``python -m soft_spatial.lab.learn``)."""

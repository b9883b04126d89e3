"""Statistics of a policy that configure the method: ``python -m soft_spatial.stats entropy``
(μ_H, σ_H of AdaptSoft's entropy feature, :mod:`.entropy`)."""

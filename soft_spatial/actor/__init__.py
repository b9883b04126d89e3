"""verl training side: the soft FSDP engine (replay + per-step likelihoods), the GRPO policy
loss, and the AdaptSoft trainer; `soft_spatial.plugin.register()` registers the engine and the loss with verl."""

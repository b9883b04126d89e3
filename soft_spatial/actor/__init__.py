"""verl training side: the soft FSDP engine (replay + per-step likelihoods), the GRPO policy
loss, and the AdaptSoft trainer. Import `soft_spatial.actor.train_engine` to register the engine."""

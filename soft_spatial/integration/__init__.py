"""verl wiring: the worker, trainer and task-runner subclasses (upstream internals: `compat`)."""

"""verl wiring: the CPU platform (`platform`) and the one module that touches verl internals
(`verl_compat`)."""

"""verl rollout side: the local_soft backend (replica, server, weight-sync adapter), the soft
agent loop and the collation of SoftTraces into batch tensors. Imports verl lazily."""

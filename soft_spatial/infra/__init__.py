"""Leaf helpers: atomic files, JSON lines, directory locks, processes, the cache directory,
the Ray environment and session, the run directory."""

"""``python -m soft_spatial.eval``: OmniSpatial, SpatiaLab and MindCube evaluation."""
from .report import markdown_table, summarize
from .runner import EvalConfig, evaluate, read_results

__all__ = ["EvalConfig", "evaluate", "markdown_table", "read_results", "summarize"]

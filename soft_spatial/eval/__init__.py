"""``python -m soft_spatial.eval``: OmniSpatial, SpatiaLab and MindCube evaluation."""
from soft_spatial.eval.report import markdown_table, summarize
from soft_spatial.eval.runner import EvalConfig, evaluate, read_results

__all__ = ["EvalConfig", "evaluate", "markdown_table", "read_results", "summarize"]

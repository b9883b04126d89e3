"""Benchmark data: loaders (OmniSpatial, SpatiaLab, MindCube), prompts, answer extraction and
the verl parquet builder (``python -m soft_spatial.data.prepare``)."""

from .benchmarks import BENCHMARKS, load_benchmark
from .errors import DataFormatError
from .extract import extract_answer, extract_ours
from .layouts import LAYOUTS, detect
from .mindcube import load_mindcube
from .omnispatial import load_omnispatial
from .prompt import SYSTEM_PROMPT, build_messages
from .record import LETTERS, QuestionRecord, index_to_letter, letter_to_index, option_letters
from .spatialab import SpatialabColumns, load_spatialab

__all__ = [
    "BENCHMARKS",
    "LAYOUTS",
    "LETTERS",
    "SYSTEM_PROMPT",
    "DataFormatError",
    "QuestionRecord",
    "SpatialabColumns",
    "build_messages",
    "detect",
    "extract_answer",
    "extract_ours",
    "index_to_letter",
    "letter_to_index",
    "load_benchmark",
    "load_mindcube",
    "load_omnispatial",
    "load_spatialab",
    "option_letters",
]

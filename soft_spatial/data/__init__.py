"""Benchmark data: loaders (OmniSpatial, SpatiaLab, MindCube), prompts, answer extraction and
the verl parquet builder (``python -m soft_spatial.data.prepare``)."""

from soft_spatial.data.benchmarks import BENCHMARKS, load_benchmark
from soft_spatial.data.errors import DataFormatError, SkippedRecord
from soft_spatial.data.extract import extract_answer, extract_ours
from soft_spatial.data.layouts import LAYOUTS, detect
from soft_spatial.data.mindcube import load_mindcube
from soft_spatial.data.omnispatial import load_omnispatial
from soft_spatial.data.prompt import SYSTEM_PROMPT, build_messages
from soft_spatial.data.record import LETTERS, QuestionRecord, index_to_letter, letter_to_index, option_letters
from soft_spatial.data.spatialab import SpatialabColumns, load_spatialab

__all__ = [
    "BENCHMARKS",
    "LAYOUTS",
    "LETTERS",
    "SYSTEM_PROMPT",
    "DataFormatError",
    "SkippedRecord",
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

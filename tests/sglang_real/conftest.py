"""Tests against SGLang 0.5.12's REAL modules on the CPU (run by scripts/test.sh in a second
pytest process).

That process puts the overlay of ``scripts/setup_sglang_overlay.sh`` (sglang and its pure-Python
imports, installed --no-deps) and ``tests/sglang_stubs`` (an import-only ``sgl_kernel``) in front
of ``.venv`` on PYTHONPATH; .venv supplies torch, triton, torchvision, transformers and verl. In
the main suite's process sglang is not importable and this folder is not collected, so the main
suite keeps testing the package without sglang.
"""
import importlib.util
import os

if importlib.util.find_spec("sglang") is None:
    collect_ignore_glob = ["test_*.py"]
else:
    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")  # the rotary embedding would import vllm

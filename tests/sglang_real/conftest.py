"""Tests against SGLang 0.5.12's REAL modules on the CPU (run by scripts/test.sh in a second
pytest process).

That process puts the overlay of ``scripts/setup_sglang_overlay.sh`` (sglang and its pure-Python
imports, installed --no-deps) and ``tests/sglang_stubs`` (an import-only ``sgl_kernel``, CPU accommodations) in front
of ``.venv`` on PYTHONPATH; .venv supplies torch, triton, torchvision, transformers and verl. In
the main suite's process sglang is not importable and this folder is not collected, so the main
suite keeps testing the package without sglang.

The ``test_real_engine_*`` modules, ``test_eval_engine`` and ``test_gpu_kit_stage_*`` start SGLang's
real engine on the CPU (real_engine.py; one engine per module, no process left behind; the CPU
stand-ins are listed in tests/sglang_stubs/README.md).
"""
import importlib.util
import os

if importlib.util.find_spec("sglang") is None:
    collect_ignore_glob = ["test_*.py"]
else:
    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")  # the rotary embedding would import vllm


if importlib.util.find_spec("sglang") is not None:
    import pytest

    @pytest.fixture(scope="session")
    def think_tiny(tiny_qwen3_vl_small, tmp_path_factory):
        """Tiny Qwen3-VL whose rows switch to discrete decoding, stop on eos or run to the
        length limit within 16 steps (real_engine.think_model)."""
        from real_engine import think_model
        return think_model(tiny_qwen3_vl_small, tmp_path_factory.mktemp("think") / "model")

    def _controller(request):
        """The module's ``controller`` fixture (an AdaptSoft checkpoint) in adaptsoft mode."""
        soft = request.module.SOFT
        return request.getfixturevalue("controller") if soft.mode == "adaptsoft" else None

    @pytest.fixture(scope="module")
    def reference(request, think_tiny):
        """The local engine on ``think_tiny`` in the module's ``SOFT`` mode, fp32 and fp64
        (real_engine.reference)."""
        from real_engine import reference as make
        return make(think_tiny, request.module.SOFT, controller=_controller(request))

    @pytest.fixture(scope="module")
    def engine(request, think_tiny, tmp_path_factory):
        """SGLang's real offline engine on ``think_tiny`` in the module's ``SOFT`` mode, one per
        module (real_engine.running_engine: no process left behind)."""
        from real_engine import running_engine
        soft = request.module.SOFT
        with running_engine(think_tiny, soft, tmp_path_factory.mktemp(f"sglang_{soft.mode}"),
                            controller=_controller(request)) as eng:
            yield eng

"""The SGLang soft backend (:mod:`soft_spatial.engines.sglang`) without sglang installed: the package
and its CPU-side modules import, and using it says what is missing.

:class:`~soft_spatial.engines.sglang.engine.SGLangEngine` itself needs SGLang (its constructor
imports the hooks): its input checks and the evaluation command on SGLang's real engine are
tests/sglang_real/test_eval_engine.py. The CPU-side modules have their own guards:
tests/engines/sglang/test_runtime.py (the scheduler-side sampler), test_client.py (the verl-server
side) and test_server_args.py (the server arguments and the scheduler settings); the SGLang glue
(:mod:`soft_spatial.engines.sglang.hooks`) is tested against SGLang 0.5.12's real classes in
tests/sglang_real/ (test_plugin_real.py, test_real_engine_*.py).
"""
from __future__ import annotations

import subprocess
import sys

import pytest


def test_imports_without_sglang_and_errors_clearly_on_use():
    code = (
        "import sys\n"
        "import soft_spatial.engines.sglang as p, soft_spatial.engines.sglang.runtime, "
        "soft_spatial.engines.sglang.client\n"
        "assert 'sglang' not in sys.modules\n"
        "try:\n    p.install()\nexcept ImportError as e:\n    print('ERR', e)\n")
    try:
        import sglang  # noqa: F401  (pyflakes: used only to probe)
        del sglang
        pytest.skip("sglang is installed in this interpreter")
    except ImportError:
        pass
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "ERR" in out.stdout and "sglang==0.5.12" in out.stdout

"""The one place that touches upstream internals: verl 0.9.1 (:mod:`.verl`, a package by verl
area), SGLang 0.5.12 (:mod:`.sglang`) and Ray (:mod:`.ray`).

Each use of an upstream private name (or of an undocumented attribute or behaviour) is one named
function here whose docstring says what it touches, where and for which version; a
``check_internals()`` (``sglang``, ``ray``, ``verl.checks``) lists what moved, and
``tests/compat/test_*.py`` fail loudly on it. This layer imports only upstream packages, never the
rest of soft_spatial.
"""

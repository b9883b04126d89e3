"""Imported by Python at start-up in every process of the SGLang test process tree (this folder is
on its PYTHONPATH; see README.md): applies :mod:`sglang_cpu`'s accommodations that must hold in
processes that never run SGLang's ``load_plugins()`` (verl's training workers), when the SGLang
module they concern is imported."""
from sglang_cpu import install_import_hooks

install_import_hooks()

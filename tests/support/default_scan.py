"""Finds a setting's default defined or restated outside its dataclass: an AST scan of Python
source, for the tests that keep each default in one place (``tests/softthink/test_config.py``: the
method's hyperparameters; ``tests/lab/learning/test_config.py``: the lab's settings).

A *table* maps each setting's name (a parameter, attribute or key name) to its dataclass default;
*only* lists the names that mean nothing else in the package, so that any literal default of theirs
is one of these settings' (the other names count where they restate the default's value).
"""
from __future__ import annotations

import ast
from collections.abc import Collection, Mapping
from typing import Any

__all__ = ["restated_defaults"]


def _literal(node: ast.AST):
    """(True, value) when ``node`` is a literal (a number, string, tuple of them, -1.5, None)."""
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return False, None


def _same(a, b) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is not bool and type(b) is not bool and a == b if a is not None else b is None


def restated_defaults(source: str, where: str, table: Mapping[str, Any],
                      only: Collection[str]) -> list[str]:
    """Every place in ``source`` that defines or restates the default of a setting of ``table``:

    * a parameter default, a class attribute or a module constant named after a setting (any
      case) whose value is a literal other than None (None: "not given", "off"): any value for
      the names in ``only``, the default's for the others;
    * a call keyword or a dict entry named after one whose literal value is its default.
    """
    found = []

    def defines(name: str | None, value) -> bool:
        if name not in table or value is None:
            return False
        return name in only or _same(value, table[name])

    def hit(node, name, what):
        found.append(f"{where}:{node.lineno}: {what} {name!r}")

    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            pos = a.posonlyargs + a.args
            pairs = list(zip(pos[len(pos) - len(a.defaults):], a.defaults))
            pairs += [(arg, d) for arg, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
            for arg, default in pairs:
                ok, value = _literal(default)
                if ok and defines(arg.arg, value):
                    hit(default, arg.arg, "literal default of parameter")
        elif isinstance(node, (ast.ClassDef, ast.Module)):
            for stmt in node.body:
                targets = (stmt.targets if isinstance(stmt, ast.Assign) else
                           [stmt.target] if isinstance(stmt, ast.AnnAssign) and stmt.value else [])
                for t in targets:
                    name = t.id.lower() if isinstance(t, ast.Name) else None
                    ok, value = _literal(stmt.value)
                    if ok and defines(name, value):
                        kind = "class attribute" if isinstance(node, ast.ClassDef) else "constant"
                        hit(stmt, t.id, f"literal {kind}")
        elif isinstance(node, ast.Call):
            for kw in node.keywords:
                ok, value = _literal(kw.value)
                if kw.arg in table and ok and _same(value, table[kw.arg]):
                    hit(kw.value, kw.arg, "call restating the default of")
        elif isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and k.value in table:
                    ok, value = _literal(v)
                    if ok and _same(value, table[k.value]):
                        hit(v, k.value, "dict entry restating the default of")
    return found

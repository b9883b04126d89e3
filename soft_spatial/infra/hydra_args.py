"""Command-line overrides under renamed Hydra names (docs/design.md §6).

The soft settings' Hydra group was ``soft_thinking`` (``configs/soft_thinking/``); it is ``soft``
(``configs/soft/``) now, so that ``soft_thinking`` names one thing only: the decoding group
inside the settings (``soft_thinking.mode``, ``soft_thinking.top_k``, ...). A command line
written for the old group name (``soft_thinking=paper``, ``+soft_thinking@pkg=paper``,
``~soft_thinking``) selected a group, never a value: :func:`renamed_overrides` rewrites it to the
new name, with a warning naming the new key. Value overrides are untouched: a key under it
(``soft_thinking.mode=fixed``) and a whole value (``soft_thinking={mode:hard,top_k:3}``, which sets
the decoding group's node: a group is selected by an option's name, never by a ``{...}`` or
``[...]`` value).
"""
from __future__ import annotations

import re
import sys
from collections.abc import Sequence

__all__ = ["RENAMED_GROUPS", "renamed_overrides", "rename_argv"]

#: Hydra config groups renamed: old name -> new name
RENAMED_GROUPS = {"soft_thinking": "soft"}

_GROUP = re.compile(r"^(?P<prefix>\+{0,2}|~)(?P<group>[A-Za-z_][\w]*)(?P<rest>(@[^=]*)?(=(?P<value>.*))?)$",
                    re.S)
#: what selects a group's option: its name (``paper``, ``sub/dir``, ``null``); a value of another
#: shape (``{...}``, ``[...]``, a quoted string) overrides the node of the same name instead
_OPTION = re.compile(r"[\w./-]*")


def renamed_overrides(overrides: Sequence[str], warn=None) -> list[str]:
    """``overrides`` with every selection of a renamed group under its new name; ``warn`` (default:
    a line on stderr) is told each rewrite, naming the new key."""
    out = []
    for o in overrides:
        m = _GROUP.match(o)
        new = RENAMED_GROUPS.get(m["group"]) if m else None
        value = m["value"] if m else None
        if (new is None or not (m["rest"] or m["prefix"] == "~")
                or (value is not None and not _OPTION.fullmatch(value.strip()))):
            out.append(o)
            continue
        rewritten = f"{m['prefix']}{new}{m['rest']}"
        message = (f"warning: the settings group {m['group']!r} is now {new!r} (configs/{new}/): "
                   f"read {o!r} as {rewritten!r}")
        (warn or (lambda line: print(line, file=sys.stderr)))(message)
        out.append(rewritten)
    return out


def rename_argv(argv: list[str] | None = None) -> None:
    """Apply :func:`renamed_overrides` to ``sys.argv`` in place (before ``@hydra.main`` reads it)."""
    argv = sys.argv if argv is None else argv
    argv[1:] = renamed_overrides(argv[1:])

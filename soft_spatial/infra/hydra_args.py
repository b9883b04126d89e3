"""A command line that selects a renamed Hydra group under its old name is refused, naming the new
one (docs/design.md §6).

The soft settings' Hydra group was ``soft_thinking`` (``configs/soft_thinking/``); it is ``soft``
(``configs/soft/``), so that ``soft_thinking`` names one thing only: the decoding group inside the
settings (``soft_thinking.mode``, ``soft_thinking.top_k``, ...). Until 729c705 a selection under
the old name (``soft_thinking=paper``, ``+soft_thinking@pkg=paper``, ``~soft_thinking``) was
rewritten to the new one with a warning; now it ends the command before anything runs, in one
line saying what to write. Value overrides are not selections and pass: a key under the group
(``soft_thinking.mode=fixed``) and a whole value (``soft_thinking={mode:hard,top_k:3}``: a group is
selected by an option's name, never by a ``{...}`` or ``[...]`` value).
"""
from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["RENAMED_GROUPS", "RenamedGroup", "refuse_renamed"]

#: Hydra config groups renamed: old name -> new name
RENAMED_GROUPS = {"soft_thinking": "soft"}

_GROUP = re.compile(r"^(?P<prefix>\+{0,2}|~)(?P<group>[A-Za-z_][\w]*)(?P<rest>(@[^=]*)?(=(?P<value>.*))?)$",
                    re.S)
#: what selects a group's option: its name (``paper``, ``sub/dir``, ``null``); a value of another
#: shape (``{...}``, ``[...]``, a quoted string) overrides the node of the same name instead
_OPTION = re.compile(r"[\w./-]*")


class RenamedGroup(SystemExit):
    """A renamed group selected under its old name (the message says the new override)."""


def refuse_renamed(overrides: Sequence[str], command: str) -> None:
    """Raise :class:`RenamedGroup` (one line: ``command``, the old and the new override) for the
    first override in ``overrides`` that selects a renamed group under its old name."""
    for o in overrides:
        m = _GROUP.match(o)
        new = RENAMED_GROUPS.get(m["group"]) if m else None
        value = m["value"] if m else None
        if (new is None or not (m["rest"] or m["prefix"] == "~")
                or (value is not None and not _OPTION.fullmatch(value.strip()))):
            continue
        raise RenamedGroup(f"{command}: the settings group {m['group']!r} is now {new!r} "
                           f"(configs/{new}/): write {m['prefix'] + new + m['rest']!r} for {o!r}")

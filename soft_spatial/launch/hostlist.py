"""Slurm hostlist expressions, expanded as ``scontrol show hostnames`` does (Slurm's
src/common/hostlist.c, ``hostlist_create`` then ``hostlist_shift`` until empty).

An expression is a list of host expressions separated by commas or whitespace; a comma inside
brackets belongs to the brackets. A host expression is literal text with bracket groups, each a
comma-separated list of numbers and ``lo-hi`` ranges: ``gpu[01-03,07]`` is gpu01 gpu02 gpu03 gpu07.
A number is zero-padded to the width of the range's lower bound as written (``[08-10]`` gives 08 09
10, ``[8-10]`` gives 8 9 10). Several groups in one name give every combination, the leftmost group
varying slowest (``rack[1-2]-gpu[01-02]``: rack1-gpu01 rack1-gpu02 rack2-gpu01 rack2-gpu02). Order is
kept and duplicates are kept, as Slurm keeps them.

Slurm is lenient about a few malformed forms (``a[1-]`` is a1, ``a]`` is a host, ``a[+1]`` is a01);
they are refused here, as are unbalanced or nested brackets, ``a[3-1]``, empty groups or items, and
hostlist functions (``{...}``, which only the Slurm controller expands). Every error names the
variable the expression came from and the bad part.
"""
from __future__ import annotations

import itertools
import math
import re

MAX_HOSTS = 64 * 1024  # Slurm's MAX_SLURM_NODES: no allocation has more nodes
_ITEM = re.compile(r"([0-9]+)(?:-([0-9]+))?")


class HostlistError(ValueError):
    """A malformed hostlist expression (the message names its variable and the bad part)."""


def expand(expr: str, name: str = "hostlist") -> list[str]:
    """The host names of the Slurm hostlist ``expr``, in Slurm's order (``name``: the variable it
    came from, for error messages). An empty or blank expression gives an empty list."""
    hosts: list[str] = []
    for token in _tokens(expr, name):
        hosts.extend(_expand_host(token, expr, name))
        if len(hosts) > MAX_HOSTS:
            raise HostlistError(f"{name}={expr!r}: more than {MAX_HOSTS} hosts")
    return hosts


def _tokens(expr: str, name: str) -> list[str]:
    """Split at commas and whitespace outside brackets; check the brackets pair up, unnested."""
    tokens, start, depth = [], 0, 0
    for i, ch in enumerate(expr):
        if ch == "[":
            if depth:
                raise HostlistError(f"{name}={expr!r}: nested '[' at position {i}")
            depth = 1
        elif ch == "]":
            if not depth:
                raise HostlistError(f"{name}={expr!r}: ']' without '[' at position {i}")
            depth = 0
        elif ch in "{}":
            raise HostlistError(f"{name}={expr!r}: hostlist functions ({{...}}) are not supported: "
                                "give the expanded list")
        elif not depth and (ch == "," or ch.isspace()):
            if i > start:
                tokens.append(expr[start:i])
            start = i + 1
    if depth:
        raise HostlistError(f"{name}={expr!r}: '[' without ']' in {expr[start:]!r}")
    if len(expr) > start:
        tokens.append(expr[start:])
    return tokens


def _expand_host(token: str, expr: str, name: str) -> list[str]:
    """Every name of one host expression (brackets already checked by ``_tokens``)."""
    parts = re.split(r"\[([^\]]*)\]", token)  # literal, group, literal, group, ..., literal
    choices = []
    for i, part in enumerate(parts):
        choices.append([part] if i % 2 == 0 else _numbers(part, token, expr, name))
    if math.prod(len(c) for c in choices) > MAX_HOSTS:
        raise HostlistError(f"{name}={expr!r}: {token!r} names more than {MAX_HOSTS} hosts")
    return ["".join(combo) for combo in itertools.product(*choices)]


def _numbers(group: str, token: str, expr: str, name: str) -> list[str]:
    """The numbers of one bracket group ("01-03,07"), zero-padded, in order."""
    if not group:
        raise HostlistError(f"{name}={expr!r}: empty brackets in {token!r}")
    out = []
    for item in group.split(","):
        m = _ITEM.fullmatch(item)
        if not m:
            what = "empty item" if not item else f"{item!r} is not a number or a lo-hi range"
            raise HostlistError(f"{name}={expr!r}: {what} in [{group}] of {token!r}")
        lo_text, hi_text = m.group(1), m.group(2)
        if max(len(lo_text), len(hi_text or "")) > 18:  # Slurm's numbers are unsigned longs
            raise HostlistError(f"{name}={expr!r}: {item!r} in {token!r}: number too long")
        lo = int(lo_text)
        hi = lo if hi_text is None else int(hi_text)
        if lo > hi:
            raise HostlistError(f"{name}={expr!r}: range {item!r} in {token!r} runs backwards "
                                f"({lo} > {hi})")
        if len(out) + hi - lo + 1 > MAX_HOSTS:
            raise HostlistError(f"{name}={expr!r}: [{group}] of {token!r} names more than {MAX_HOSTS} hosts")
        width = len(lo_text)
        out.extend(f"{n:0{width}d}" for n in range(lo, hi + 1))
    return out

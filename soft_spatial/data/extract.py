"""Answer extractors: which option letter a model response chose.

``ours`` (the reward's parser, used for every benchmark under our protocol):
    only the text after the LAST ``</think>`` counts (no ``</think>``: no answer). In that tail,
    in order: ``<answer>…</answer>`` content; a bare letter with decoration ("C", "(c)", "C.",
    "**C**"); an explicit cue ("Answer: C", "the answer is (b)", "I choose D"); the tail being an
    option's text; the last stand-alone capital letter that is not the English article "A"
    ("A cat is on the left, so B" -> B). Lower-case letters count only as a bare answer or right
    after a cue, and only when no word follows them ("answer is a cat" is not A).

``official``, per benchmark (notes/benchmarks.md):
    OmniSpatial ``re``: case-insensitive ``Answer\\s*:\\s*([A-D])\\b``, last match. With
    ``compat=True`` (official-compatible) the captured letter is returned as written, so
    "answer: b" yields "b", which never equals "B" (the official case bug), and no match yields
    "A" (the official fallback). With ``compat=False`` (strict) the letter is upper-cased and no
    match yields None. ``direct`` (first character) and ``json`` (``answer[:1]``, fallback "A")
    follow the same rule.
    MindCube: the official raw-QA cascade, run on the whole response (no think stripping), no
    case folding; None when nothing matches.
    SpatiaLab publishes no extractor. Our stand-in: the ``ours`` parser (`parse_choice`, whose
    "Answer: X" cue rule matches the stand-in prompt's format line) on the text after the last
    ``</think>``, or on the whole response if there is none. It is the project's own protocol,
    not an official one.
"""

from __future__ import annotations

import json
import re
from typing import Iterable, Sequence

from .record import LETTERS

THINK_END = "</think>"
_THINK_END_RE = re.compile(re.escape(THINK_END), re.IGNORECASE)

# Words that may follow the option letter "A" ("A is correct"); any other lower-case word after a
# capital "A" makes it the English article ("A cat is ...").
_VERBS_AFTER_LETTER = frozenset(
    "is was would will seems seem should could must might appears appear matches match fits fit "
    "best correct looks look describes describe remains and or".split()
)
# An explicit answer cue: "Answer: X", "the answer is (X)", "final answer - X", "I choose X",
# "the correct option is X". Matched case-insensitively; the letter's own case is checked apart.
_CUE = (
    r"(?i:\b(?:answer|correct\s+(?:option|choice)|i\s+(?:choose|pick|select))"
    r"(?:\s+(?:is|would\s+be|should\s+be))?\s*[:=\-]?[\s*]*(?:option\s*)?)"
)
_CUE_PREFIX = re.compile(r"^(?:the\s+)?(?:final\s+)?answer\s*(?:is)?\s*[:=]?\s*", re.IGNORECASE)


def answer_tail(response: str) -> str | None:
    """The text after the last ``</think>`` (case-insensitive), or None if there is none."""
    parts = _THINK_END_RE.split(response)
    return parts[-1] if len(parts) > 1 else None


def normalise_option_text(text: str) -> str:
    """Lower case, single spaces, no surrounding quotes/asterisks, no trailing period."""
    text = re.sub(r"\s+", " ", text.strip().lower())
    text = text.strip("*\"'`“”‘’ ")
    return text.rstrip(". ").strip()


def _allowed(letters: str) -> str:
    return "".join(sorted(set(letters.upper())))


def parse_choice(text: str, options: Sequence[str] | None = None, letters: str | None = None) -> str | None:
    """The option letter that ``text`` (an answer, not a reasoning chain) chooses, or None.

    ``letters`` restricts the answer letters; by default the first ``len(options)`` letters, or
    A-D without options.
    """
    if letters is None:
        letters = LETTERS[: len(options)] if options else "ABCD"
    allowed = _allowed(letters)
    if not allowed:
        return None
    text = text.strip()
    if not text:
        return None
    tags = re.findall(r"<answer>(.*?)(?:</answer>|$)", text, flags=re.IGNORECASE | re.DOTALL)
    for inner in reversed(tags):
        found = parse_choice(inner, options, allowed)
        if found:
            return found
    up, low = f"[{allowed}]", f"[{allowed.lower()}]"
    bare = re.fullmatch(rf"[\s*_\"'`(\[]*({up}|{low})[\s*_\"'`)\].:]*", text)
    if bare:
        return bare.group(1).upper()
    cued = list(
        re.finditer(
            rf"{_CUE}[(\[*\"']*\s*(?:({up})(?![\w'’-])|({low})(?=[.)\]:,*\"']|[ \t]*$))", text, re.MULTILINE
        )
    )
    if cued:
        return (cued[-1].group(1) or cued[-1].group(2)).upper()
    found = _match_option_text(text, options)
    if found and found in allowed:
        return found
    for match in reversed(list(re.finditer(rf"(?<![\w'’-])({up})(?![\w'’-])", text))):
        if not _is_article(text, match):
            return match.group(1)
    return None


def _is_article(text: str, match: re.Match[str]) -> bool:
    """True for a capital "A" used as the English article ("A cat ...")."""
    if match.group(1) != "A":
        return False
    following = re.match(r"[ \t]+([a-z][a-z'’-]*)", text[match.end() :])
    return bool(following) and following.group(1) not in _VERBS_AFTER_LETTER


def _match_option_text(text: str, options: Sequence[str] | None) -> str | None:
    """Letter of the first option whose text equals ``text`` (after normalisation and cue removal)."""
    if not options:
        return None
    candidates = {normalise_option_text(text)}
    candidates.add(normalise_option_text(_CUE_PREFIX.sub("", text.strip())))
    for i, option in enumerate(options):
        if normalise_option_text(str(option)) in candidates:
            return LETTERS[i]
    return None


def extract_ours(response: str, options: Sequence[str] | None = None, letters: str | None = None) -> str | None:
    """Our extractor (the reward's): parse the text after the last ``</think>``; None without it."""
    tail = answer_tail(response)
    return None if tail is None else parse_choice(tail, options, letters)


# --- official extractors ------------------------------------------------------------------------

_OMNI_RE = re.compile(r"Answer\s*:\s*([A-D])\b", re.IGNORECASE)


def extract_omnispatial_official(response: str, eval_type: str = "re", *, compat: bool = True) -> str | None:
    """OmniSpatial's official extraction (see the module docstring for ``compat``)."""
    fallback = "A" if compat else None
    if eval_type == "re":
        found = _OMNI_RE.findall(response)
        if not found:
            return fallback
        return found[-1] if compat else found[-1].upper()
    if eval_type == "direct":
        first = response.strip().upper()[:1]
        return first if (first or compat) else None
    if eval_type == "json":
        cleaned = response.strip().removeprefix("```json").removesuffix("```").strip()
        try:
            return json.loads(cleaned).get("answer", "A").strip().upper()[:1]
        except (ValueError, AttributeError, TypeError):
            return fallback
    raise ValueError(f"unsupported OmniSpatial eval_type {eval_type!r}; expected re, direct or json")


# MindCube's raw-QA cascade (notes §2.2): each rule is tried in order and the LAST match of the
# first rule that matches wins. Letters A-E, case-sensitive. Some later rules can never fire (they
# need an "X." that the first rule already caught); they are kept so the list reads like the spec.
_MC_SIMPLE = r"([A-E])\."
_MC_IN_ANSWER_TAG = (
    r"[Mm]y answer is ([A-E])",
    r"[Mm]y answer is ([A-E])\.",
    r"[Tt]he answer is ([A-E])",
    r"(?:Answer: )?([A-E])\.",
    r"\b([A-E])\b",
)
_MC_RULES = (
    r"(?:Answer: )?([A-E])\. [A-Za-z0-9 \-()'\",]+(?=(?:\n|$|\.|\"))",
    r"(?:Answer: )?([A-E])\. [A-Za-z0-9 \-()'\"]+",
    r"(?:Answer: )?([A-E])(?:\.|$|\s)",
    r"(?:^|\n)(?:Answer: )?([A-E])(?:\.|$|\s)",
    r"[*\"]([A-E])[*\"]",
    r"\bAnswer:?\s*([A-E])\b",
    r"[Mm]y answer is ([A-E])",
    r"[Mm]y answer is ([A-E])\.",
    r"answer is ([A-E])",
)
_MC_LINE_DESC = r"([A-E])\. [A-Za-z0-9 \-()'\",]+"


def _last(pattern: str, text: str) -> str | None:
    found = list(re.finditer(pattern, text))
    return found[-1].group(1) if found else None


def _first_rule(patterns: Iterable[str], text: str) -> str | None:
    for pattern in patterns:
        found = _last(pattern, text)
        if found:
            return found
    return None


def extract_mindcube_official(response: str) -> str | None:
    """MindCube's official cascade (notes §2.2), on the raw response, no case folding."""
    if not response:
        return None
    found = _last(_MC_SIMPLE, response)
    if found:
        return found
    section = re.search(r"<Answer>(.*?)(?:<|$)", response, re.DOTALL)
    if section:
        found = _first_rule(_MC_IN_ANSWER_TAG, section.group(1))
        if found:
            return found
    found = _first_rule(_MC_RULES, response)
    if found:
        return found
    lines = response.split("\n")
    for line in reversed(lines):
        match = re.search(_MC_LINE_DESC, line)
        if match:
            return match.group(1)
    for line in reversed(lines):
        match = re.search(r"\b([A-E])\b", line)
        if match:
            return match.group(1)
    return None


def extract_spatialab(response: str, options: Sequence[str] | None = None) -> str | None:
    """Our stand-in for SpatiaLab (no official extractor exists; see the module docstring)."""
    tail = answer_tail(response)
    return parse_choice(response if tail is None else tail, options)


def extract_answer(
    benchmark: str,
    response: str,
    protocol: str = "ours",
    *,
    options: Sequence[str] | None = None,
    compat: bool = True,
    eval_type: str = "re",
) -> str | None:
    """The chosen letter under ``protocol`` ("ours" or "official") for ``benchmark``."""
    if protocol == "ours":
        return extract_ours(response, options)
    if protocol != "official":
        raise ValueError(f"unknown protocol {protocol!r}; expected 'ours' or 'official'")
    name = benchmark.lower()
    if name == "omnispatial":
        return extract_omnispatial_official(response, eval_type, compat=compat)
    if name == "mindcube":
        return extract_mindcube_official(response)
    if name == "spatialab":
        return extract_spatialab(response, options)
    raise ValueError(f"unknown benchmark {benchmark!r}")

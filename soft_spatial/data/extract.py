"""Answer extractors: which option letter a model response chose.

``ours`` (the reward's parser, used for every benchmark under our protocol):
    only the text after the LAST ``</think>`` counts (no ``</think>``: no answer). In that tail,
    in order: ``<answer>…</answer>`` content; a bare letter with decoration ("C", "(c)", "C.",
    "**C**"); an explicit cue ("Answer: C", "the answer is (b)", "I choose D"); the tail being an
    option's text; the one stand-alone capital letter that is not the English article "A"
    ("A cat is on the left, so B" -> B). Lower-case letters count only as a bare answer or right
    after a cue, and only when no word follows them ("answer is a cat" is not A). A hedge names
    no answer: a cued letter followed by a list of others ("Answer: A or B", "answer: B, C, D")
    or, without a cue, several different stand-alone letters ("A or B"). A negated letter is no
    answer ("not A", "A is wrong", "rule out A"; "A, not B" is A): docs/design.md §2.11. When
    the tail has ``<answer>`` tags, only their content is read. Only the last `ANSWER_WINDOW`
    (32,768) characters of the tail are read, NFKC-normalised without zero-width characters
    (full-width "Ｂ" is B); finding the tail is one linear split, so any response parses in linear
    time, without recursion.

``official``, per benchmark (docs/notes/benchmarks.md):
    OmniSpatial ``re``: case-insensitive ``Answer\\s*:\\s*([A-D])\\b``, last match. With
    ``compat=True`` (official-compatible) the captured letter is returned as written, so
    "answer: b" yields "b", which never equals "B" (the official case bug), and no match yields
    "A" (the official fallback). With ``compat=False`` (strict) the letter is upper-cased and no
    match yields None. ``direct`` (first character) and ``json`` (``answer[:1]``, fallback "A")
    follow the same rule.
    MindCube: the official raw-QA cascade, run on the whole response (no think stripping), no
    case folding; None when nothing matches.
    Both read at most the last `OFFICIAL_WINDOW` (1 MiB) characters of a response, which changes
    nothing for any response of the configured lengths and bounds the cost of any other. Both
    stay faithful to their code, negations included ("Answer: A is wrong" is A): comparability
    with published numbers (docs/design.md §2.11).
    SpatiaLab publishes no extractor. Our stand-in: the ``ours`` parser (`parse_choice`, whose
    "Answer: X" cue rule matches the stand-in prompt's format line) on the text after the last
    ``</think>``, or on the whole response if there is none. It is the project's own protocol,
    not an official one.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Sequence

from soft_spatial.data.gold import DEFAULT_LETTERS, normalise_option_text
from soft_spatial.data.record import LETTERS

THINK_END = "</think>"
#: characters at the end of an answer text that `parse_choice` reads: more than a whole response
#: of the configured lengths (2,048 training / 3,072 evaluation tokens, ~4 characters each), so
#: only pathological inputs are cut, and every parse costs at most this much
ANSWER_WINDOW = 32_768
#: characters at the end of a response that the official extractors read: 1 MiB, some 80 times
#: the longest evaluation response (3,072 tokens), so only pathological inputs are cut (they then
#: cost what 1 MiB costs, about a tenth of a second at worst)
OFFICIAL_WINDOW = 1 << 20
_THINK_END_RE = re.compile(re.escape(THINK_END), re.IGNORECASE)

# Words that may follow the option letter "A" ("A is correct"); any other lower-case word after a
# capital "A" makes it the English article ("A cat is ...").
_VERBS_AFTER_LETTER = frozenset(
    "is was would will seems seem should could must might appears appear matches match fits fit "
    "best correct looks look describes describe remains and or "
    # and the words of a negation ("A isn't right", "not only A but also B"): never after an article
    "not but nor rather instead cannot isn't wasn't doesn't won't can't isn’t wasn’t doesn’t won’t can’t".split()
)
# Every pattern below runs in time linear in the text: no two adjacent quantifiers can match the
# same characters (so a long run of spaces or asterisks is scanned once, not once per split).
#
# An explicit answer cue: "Answer: X", "the answer is (X)", "final answer - X", "I choose X",
# "the correct option is X". Matched case-insensitively; the letter's own case is checked apart.
_CUE = (
    r"(?i:\b(?:answer|correct\s+(?:option|choice)|i\s+(?:choose|pick|select))"
    r"(?:\s+(?:is|would\s+be|should\s+be))?[\s*]*(?:[:=\-][\s*]*)?(?:option[\s*]*)?)"
    r"(?:[(\[\"'][(\[*\"'\s]*)?"
)
_CUE_PREFIX = re.compile(r"^(?:the\s+)?(?:final\s+)?answer\s*(?:is)?\s*[:=]?\s*", re.IGNORECASE)
_ANSWER_TAG = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.IGNORECASE | re.DOTALL)
_TAG_MARKUP = re.compile(r"</?answer>", re.IGNORECASE)
# after "A": not a lower-case word other than those verbs (that would make "A" the article)
_NOT_ARTICLE = r"(?![ \t]+(?!(?:" + "|".join(sorted(_VERBS_AFTER_LETTER)) + r")(?![a-z'’-]))[a-z])"
# "A or B", "B, C, D", "A/B", "C and D", "A or maybe B": after a chosen letter, another letter in a list
_LIST_NEXT = (r"[ \t)\]*\"']*(?:,|/|&|\bor\b(?:[ \t]+(?:maybe|perhaps|possibly)\b)?|\band\b)"
              r"[ \t]*(?:[(\[*\"'][(\[*\"' \t]*)?")
# Negation (docs/design.md §2.11): a negator right before a letter ("not A", "isn't (B)",
# "rule out option C", "except D") or a refusing predicate right after it ("A is wrong", "B is not
# correct", "C can be ruled out") takes the letter, and the list it heads or ends ("not A or B",
# "A and B are wrong"), out of the candidates. "not only A" is no negation.
_NEGATORS = ("not never nor neither cannot except excluding exclude excludes excluded eliminate eliminates "
             "eliminated eliminating").split() + ["rule out", "rules out", "ruled out", "ruling out", "rather than",
                                                  "instead of", "other than"]
_NEGATOR_FILLERS = "be the option options choice choices answer letter choose pick select".split()


def _backwards(phrase: str) -> str:
    """A pattern for ``phrase`` read from its end ("rule out" -> "tuo\\s+elur")."""
    return r"\s+".join(re.escape(word[::-1]) for word in reversed(phrase.split()))


# A negator read backwards from the letter, on the reversed text before it: brackets and spaces,
# filler words ("not the option A"), then the negator ("not", or "n't" ending "isn't"). Anchored at
# the letter, so a look costs the same on any text. "not only A" is no negation ("only" is no filler).
_NEGATOR_BACKWARDS = re.compile(
    r"(?i)[\s*_\"'`(\[]*(?:(?:" + "|".join(map(_backwards, _NEGATOR_FILLERS)) + r")\b\s+)*"
    r"(?:t['’]n|(?:" + "|".join(map(_backwards, sorted(_NEGATORS, key=len, reverse=True))) + r")\b)"
)
_JUDGED = r"(?:correct|right|true|valid|possible|likely|answer|case|it|one|work|fit|match|apply)"
_REFUSING = (
    r"(?i:[\s*_\"'`)\]]*(?:"
    r"(?:is|was|are|were|seems?|looks?|appears?|sounds?|(?:would|must|should|can|could|will|may|might)\s+be)"
    r"\s+(?:(?:clearly|definitely|certainly|also|therefore|thus|obviously|surely|probably)\s+)?"
    r"(?:(?:the|an?)\s+)?(?:wrong|incorrect|false|invalid|impossible|unlikely|ruled\s+out|excluded|"
    r"eliminated|rejected)"
    r"|(?:(?:is|was|are|were|does|do|did|would|could|should|must|might|ca|wo)n[’']t"
    r"|(?:is|was|are|were|does|do|did|would|could|can|should|must|will|may|might)\s+not|cannot)"
    r"\s+(?:be\s+)?(?:(?:the|an?)\s+)?" + _JUDGED + r")\b)"
)
_REFUSING_RE = re.compile(_REFUSING)
#: how far before a letter `_negated` looks for its negator: the longest negator with its words
#: ("instead of the option") and some spacing
NEGATION_REACH = 64
# characters that change no reading of an answer: zero-width spaces and joiners, soft hyphen, BOM
_INVISIBLE = re.compile("[\u00ad\u200b-\u200d\u2060\ufeff]")


class _Patterns:
    """The compiled patterns for one set of allowed letters (cached: a handful of sets occur)."""

    _cache: dict[str, "_Patterns"] = {}

    def __init__(self, allowed: str):
        up, low = f"[{allowed}]", f"[{allowed.lower()}]"
        self.bare = re.compile(rf"[\s*_\"'`(\[]*({up}|{low})[\s*_\"'`)\].:]*")
        self.cued = re.compile(
            rf"{_CUE}(?:({up})(?![\w'’-])|({low})(?=[.)\]:,*\"']|[ \t]*$))", re.MULTILINE)
        self.listed = re.compile(rf"{_LIST_NEXT}(?:({up})|({low}))(?![\w'’-])")
        # a letter standing alone, "A" not as the article ("A cat")
        others = allowed.replace("A", "")
        alone = "|".join(([f"[{others}](?![\\w'’-])"] if others else [])
                         + (["A(?![\\w'’-])" + _NOT_ARTICLE] if "A" in allowed else []))
        self.letter = re.compile(rf"(?<![\w'’-])(?:{alone})")
        self.alone = {letter: re.compile(rf"(?<![\w'’-]){letter}(?![\w'’-])" + (_NOT_ARTICLE if letter == "A" else ""))
                      for letter in allowed}  # one pattern per letter: is it there at all?
        # a list of such letters ("A", "A or B", "B, C and D"): a negation takes the whole list
        self.group = re.compile(rf"{self.letter.pattern}(?:{_LIST_NEXT}{self.letter.pattern})*")

    @classmethod
    def get(cls, allowed: str) -> "_Patterns":
        if allowed not in cls._cache:
            cls._cache[allowed] = cls(allowed)
        return cls._cache[allowed]


def think_ends(response: str | None) -> tuple[int, str | None]:
    """(number of ``</think>`` (case-insensitive), the text after the last one or None)."""
    response = response or ""
    low = response.lower()
    if len(low) == len(response):  # lower() kept every position (always so for ASCII): str search
        last = low.rfind(THINK_END)
        return low.count(THINK_END), (None if last < 0 else response[last + len(THINK_END):])
    parts = _THINK_END_RE.split(response)
    return len(parts) - 1, (parts[-1] if len(parts) > 1 else None)


def answer_tail(response: str | None) -> str | None:
    """The text after the last ``</think>`` (case-insensitive), or None if there is none."""
    return think_ends(response)[1]


def _allowed(letters: str) -> str:
    return "".join(sorted(set(letters.upper())))


def parse_choice(text: str | None, options: Sequence[str] | None = None, letters: str | None = None) -> str | None:
    """The option letter that ``text`` (an answer, not a reasoning chain) chooses, or None.

    ``letters`` restricts the answer letters; by default the first ``len(options)`` letters, or
    A-D without options. A hedge ("A or B", "B, C, D", "Answer: A/B") chooses nothing. Only the
    last `ANSWER_WINDOW` characters are read (an answer ends its text), so the parse costs the
    same on any input, without recursion.
    """
    if letters is None:
        letters = LETTERS[: len(options)] if options else DEFAULT_LETTERS
    allowed = _allowed(letters)
    if not allowed or not text:
        return None
    text = text.strip()[-ANSWER_WINDOW:]
    if not text.isascii():  # full-width letters, NBSP, zero-width spaces: read as what they show
        text = _INVISIBLE.sub("", unicodedata.normalize("NFKC", text)).strip()[-ANSWER_WINDOW:]
    if not text:
        return None
    pats = _Patterns.get(allowed)
    tags = [m.group(1) for m in _ANSWER_TAG.finditer(text)]
    if tags:  # the tags hold the answer: the last one that names one letter, nothing outside them
        for inner in reversed(tags):
            found = _parse_plain(_TAG_MARKUP.sub(" ", inner).strip(), options, allowed, pats)
            if found:
                return found
        return None
    return _parse_plain(text, options, allowed, pats)


def _parse_plain(text: str, options: Sequence[str] | None, allowed: str, pats: _Patterns) -> str | None:
    """`parse_choice` without ``<answer>`` tags: bare letter, cue, option text, lone letter; a
    negated letter (`_negated`) is never the one chosen."""
    if not text:
        return None
    bare = pats.bare.fullmatch(text)
    if bare:
        return bare.group(1).upper()
    last_cue = None
    for cue in pats.cued.finditer(text):
        if _REFUSING_RE.match(text, cue.end()) is None:  # "Answer: A is wrong" chooses nothing
            last_cue = cue
    if last_cue is not None:
        letter = (last_cue.group(1) or last_cue.group(2)).upper()
        return None if _hedged(text, last_cue.end(), letter, pats) else letter
    found = _match_option_text(text, options)
    if found and found in allowed:
        return found
    present = {letter for letter, alone in pats.alone.items() if alone.search(text)}
    chosen: set[str] = set()
    for m in pats.group.finditer(text) if present else ():  # maximal lists: linear in the text
        start, end = m.span()
        letters = text[start] if end - start == 1 else set(pats.letter.findall(text, start, end))
        if set(letters) <= chosen or _negated(text, start, end):
            continue
        chosen.update(letters)
        if len(chosen) > 1:
            return None  # several different letters: a hedge
        if chosen == present:
            break  # every letter there is chosen: the rest can change nothing
    return chosen.pop() if chosen else None


def _negated(text: str, start: int, end: int) -> bool:
    """Whether the list of letters at ``text[start:end]`` follows a negator (within
    `NEGATION_REACH` characters) or precedes a refusing predicate."""
    before = text[max(0, start - NEGATION_REACH):start][::-1]
    return _NEGATOR_BACKWARDS.match(before) is not None or _REFUSING_RE.match(text, end) is not None


def _hedged(text: str, end: int, letter: str, pats: _Patterns) -> bool:
    """Whether the letter ending at ``end`` starts a list naming another letter ("A or B")."""
    pos = end
    while True:
        more = pats.listed.match(text, pos)
        if more is None:
            return False
        if (more.group(1) or more.group(2)).upper() != letter:
            return True
        pos = more.end()


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


def extract_ours(response: str | None, options: Sequence[str] | None = None, letters: str | None = None) -> str | None:
    """Our extractor (the reward's): parse the text after the last ``</think>``; None without it."""
    tail = answer_tail(response)
    return None if tail is None else parse_choice(tail, options, letters)


# --- official extractors ------------------------------------------------------------------------

_OMNI_RE = re.compile(r"Answer\s*:\s*([A-D])\b", re.IGNORECASE)


def extract_omnispatial_official(response: str, eval_type: str = "re", *, compat: bool = True) -> str | None:
    """OmniSpatial's official extraction (see the module docstring for ``compat``)."""
    fallback = "A" if compat else None
    if eval_type == "re":
        found = _OMNI_RE.findall(response[-OFFICIAL_WINDOW:])
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


# MindCube's raw-QA cascade (docs/notes/benchmarks.md §2.2): each rule is tried in order and the
# LAST match of the first rule that matches wins. Letters A-E, case-sensitive. Some later rules can
# never fire (they need an "X." that the first rule already caught); they are kept so the list
# reads like the spec, and skipped at run time (`_MC_LATER`), which saves a scan of the response
# per rule.
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


def _without_letter_dot(patterns: Iterable[str]) -> tuple[str, ...]:
    """The rules that can still match once the first rule found no "X." in the response."""
    return tuple(p for p in patterns if _MC_SIMPLE not in p)


_MC_LATER = {"tag": _without_letter_dot(_MC_IN_ANSWER_TAG), "rules": _without_letter_dot(_MC_RULES),
             "lines": _without_letter_dot([_MC_LINE_DESC, r"\b([A-E])\b"])}


#: a literal every match of a rule contains (or one of several): a rule whose literal is absent
#: cannot match, and `str.find` rules that out far faster than the regex scan
_MC_NEEDS = {
    r"[*\"]([A-E])[*\"]": ("*", '"'),
    r"\bAnswer:?\s*([A-E])\b": ("Answer",),
    r"[Mm]y answer is ([A-E])": ("y answer is ",),
    r"answer is ([A-E])": ("answer is ",),
    r"[Tt]he answer is ([A-E])": ("he answer is ",),
}
#: once a response has no "X.", this rule matches exactly at the capitals A-E followed by
#: whitespace or the end (its optional "Answer: " prefix holds no such capital), so its last match
#: is the last such capital: found by a search that starts from the end
_MC_LETTER_WS = r"(?:Answer: )?([A-E])(?:\.|$|\s)"
_LAST_LETTER_WS = re.compile(r"(?s:.*)([A-E])(?:\s|\Z)")
_MC_LINE_START_LETTER_WS = r"(?:^|\n)" + _MC_LETTER_WS
_MC_LONE_LETTER = r"\b([A-E])\b"
_LAST_LONE_LETTER = re.compile(r"(?s:.*)" + _MC_LONE_LETTER)


def _last(pattern: str, text: str) -> str | None:
    needs = _MC_NEEDS.get(pattern)
    if needs is not None and not any(n in text for n in needs):
        return None
    found = re.findall(pattern, text)  # one group: the letters of all matches, scanned in C
    return found[-1] if found else None


def _in_last_line_with(pattern: str, text: str) -> str | None:
    """The first match of ``pattern`` in the last line that has one, as a loop over the lines in
    reverse finds it (``pattern`` never spans lines), in one scan instead of a search per line."""
    if pattern == _MC_LONE_LETTER:
        # one-character matches never overlap: the last one is at the last position the pattern
        # matches at, found by a search from the end
        m = _LAST_LONE_LETTER.match(text)
        at = None if m is None else m.start(1)
    else:
        at = None
        for m in re.finditer(pattern, text):
            at = m.start()
    if at is None:
        return None
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    return re.search(pattern, text[start : end if end >= 0 else len(text)]).group(1)


def _first_rule(patterns: Iterable[str], text: str) -> str | None:
    for pattern in patterns:
        if pattern == _MC_LETTER_WS:
            m = _LAST_LETTER_WS.match(text)
            if m:
                return m.group(1)
            continue
        if pattern == _MC_LINE_START_LETTER_WS:
            continue  # its matches are a subset of the previous rule's, which found none
        found = _last(pattern, text)
        if found:
            return found
    return None


def extract_mindcube_official(response: str) -> str | None:
    """MindCube's official cascade (docs/notes/benchmarks.md §2.2), on the raw response, no case
    folding."""
    if not response:
        return None
    response = response[-OFFICIAL_WINDOW:]
    if not any(letter in response for letter in "ABCDE"):
        return None  # every rule captures one of these capitals
    found = _last(_MC_SIMPLE, response)
    if found:
        return found
    # from here on the response has no "X.", so rules that need one are skipped (_MC_LATER)
    section = re.search(r"<Answer>(.*?)(?:<|$)", response, re.DOTALL) if "<Answer>" in response else None
    if section:
        found = _first_rule(_MC_LATER["tag"], section.group(1))
        if found:
            return found
    found = _first_rule(_MC_LATER["rules"], response)
    if found:
        return found
    for pattern in _MC_LATER["lines"]:
        found = _in_last_line_with(pattern, response)
        if found:
            return found
    return None


def extract_spatialab(response: str | None, options: Sequence[str] | None = None) -> str | None:
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
    """The chosen letter under ``protocol`` ("ours" or "official") for ``benchmark``; a missing
    response (None) is treated as empty."""
    response = response or ""
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

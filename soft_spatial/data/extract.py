"""Answer extractors: which option letter a model response chose.

``ours`` (the reward's parser, used for every benchmark under our protocol; the grading rule of
docs/design.md §2.11): credit only an unambiguous final answer statement.
    Only the text after the LAST ``</think>`` counts (no ``</think>``: no answer), its last
    `ANSWER_WINDOW` (32,768) characters, NFKC-normalised without zero-width characters (full-width
    "Ｂ" is B). With ``<answer>`` tags, only the last tag's content is read. That text is cut into
    statements: lines; sentences (after ``.``, ``!``, ``?`` or ``;`` and a space); a clause that
    draws a conclusion (", so ...", ", therefore ..."); a dash ("Not A — the answer is B"; but a
    bare option after a dash belongs to what precedes it: "Maybe — B" is one statement). The last
    statement is the final answer statement: it earns the option it names if it is an answer
    statement naming exactly one option, else nothing. Statements before it do not count (a
    response may correct itself: the last answer statement counts); nothing may follow it. A bare
    option right after an answer statement naming another is a list ("A. left" / "B. right").

    An answer statement is, whole (markdown emphasis, headings, bullets, double quotes, backticks,
    ``\\boxed{}``, ``\\( \\)`` and ``$`` ignored, whitespace collapsed): an optional opener ("so",
    "thus", "therefore", "finally", "actually", "clearly", "in conclusion", "correction:", ...), an
    optional cue ("Answer:", "the (final/correct) answer is", "the correct option is", "my choice
    is", "I choose/pick/select/go with", "it is"), then the option, by its letter ("B", "(b)",
    "[B]", "Option B", with or without its own text: "B. right", "B (right)") or by its exact text
    ("right", "right (B)"); or "B is correct", "B is the (correct) answer". Nothing else may be in
    it: a negation, a doubt, a question mark, a second option, a word of an explanation all make
    it no answer statement, so a phrasing this grammar does not know earns no credit, never a wrong
    one. Lower-case "a" is the article unless it stands alone or right after a cue. A sign or a
    comparison before a number is part of it, not a bullet or a separator: with options -1, 0, 1,
    2, "- 1" and "The answer is - 1" are -1, "+ 1" is 1, "> 1" names no option (a spaced en dash or
    an em dash stays a separator; "C - 1" is C with its text 1). Parsing is linear in the text.

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

import functools
import json
import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence

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
_ANSWER_TAG = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.IGNORECASE | re.DOTALL)
_TAG_MARKUP = re.compile(r"</?answer>", re.IGNORECASE)
# characters that change no reading of an answer: zero-width spaces and joiners, soft hyphen, BOM
_INVISIBLE = re.compile("[\u00ad\u200b-\u200d\u2060\ufeff]")

# -- ours: the final answer statement (docs/design.md §2.11) --------------------------------------
# Every pattern runs in time linear in its text: a run of spaces or commas is tried once, from
# its start (the lookbehinds), and the statement grammar matches a prefix of bounded length.
#
# where one statement ends and the next begins: a line break; a space after . ! ? or ; (one run of
# spaces, taken from its start); a clause drawing a conclusion (", so B"); a dash, captured: a bare
# option right after one belongs to what precedes it ("Maybe — B" is one statement, "Not A — the
# answer is B" two). A hyphen or an en dash that is a number's sign ("is - 1", "–1") ends nothing.
# after a run of spaces: what follows is something, and no number (signed or not)
_NO_NUMBER = r"(?:(?=[^ \t])(?![-−–+]?\.?\d)|$)"
_STATEMENT_END = re.compile(
    rf"\n|(?<=[.!?;])[ \t]+|((?<![ \t])[ \t]*(?:—|–(?!\.?\d))[ \t]*|(?<![ \t])[ \t]+(?:--[ \t]+|-[ \t]+{_NO_NUMBER}))"
    r"|,[ \t]*(?=(?:so|thus|therefore|hence)\b)",
    re.IGNORECASE)
# markup that changes no reading of a statement: markdown emphasis, headings, quotes, list bullets
# (removed at the start, but for a sign or comparison before a number: "- 1" is -1, "> 1" is no
# number), double quotes, backticks, LaTeX's \boxed{...}, \text{...} and math delimiters
_MARKUP = re.compile(r"\\(?:boxed|text|textbf|mathrm|mathbf)\b|\\[()\[\]]|[*_`\"“”${}#]"
                     rf"|^[ \t]*(?:•[ \t]+|[>+-][ \t]+{_NO_NUMBER})+")
# a sign or a comparison before a number belongs to it: the key an option's text and a statement
# are compared by writes it joined, a minus as "-" ("- 1", "−1" and "–1" are -1), without a plus
# ("+ 1" is 1: a sign or a bullet, either way the number 1); a comparison stays ("> 1" names no
# number, so no option "1")
_SIGNED = re.compile(r"(?<![\w.])([<>]=|[-−+±<>≤≥≈~]|–(?=\.?\d))[ \t]*(?=\.?\d)")
_SIGN_AS = {"−": "-", "–": "-", "+": ""}
_SPACES = re.compile(r"\s+")
_OPENER = (r"(?:(?:so|thus|therefore|hence|then|finally|overall|consequently|accordingly|actually|clearly|"
           r"definitely|certainly|obviously|in conclusion|in summary|in short|to conclude|to summarize|"
           r"to sum up|correction|update|conclusion|result|verdict)[,:]? ){0,3}")
_CUE = (r"(?:(?:(?:the|my|our) )?(?:(?:final|correct|right|best|only|true) ){0,2}"
        r"(?:answer|choice|option|selection)(?: is)?(?: ?(?:[:=—]|--|-(?! ?\.?\d)|–(?!\.?\d)))? ?"
        r"|(?:i|we)(?: will|['’]ll)? (?:choose|pick|select|go with) ?:? ?"
        r"|(?:it|that)(?:['’]s| is) )")
_OPTION_WORD = r"(?:(?:option|choice|letter) ?)?"
# a statement's grammar up to its letter; what follows the letter (`_rest`) is checked apart
_BY_LETTER = re.compile(rf"(?P<opener>{_OPENER})(?P<cue>{_CUE})?{_OPTION_WORD}[(\[']*(?P<letter>[a-z])"
                        r"(?![\w’-])[)\]']*(?P<rest>.*)", re.IGNORECASE | re.DOTALL)
_BEFORE_TEXT = re.compile(rf"(?P<opener>{_OPENER})(?P<cue>{_CUE}{_OPTION_WORD})?", re.IGNORECASE)
# after the letter: "is correct", "is the (correct) answer"
_JUDGED_RIGHT = re.compile(r"is (?:(?:correct|right)|(?:the )?(?:(?:correct|right|best|final) )?"
                           r"(?:answer|option|choice))", re.IGNORECASE)
# between a letter and its option's text: "B. right", "B) right", "B - right", "B (right)"
_TEXT_SEPARATORS = " .:)-–—,("
_END_MARKS = " .!:"
_TRAILING_LETTER = re.compile(r" ?[(\[]([a-z])[)\]][ .!]*$", re.IGNORECASE)
# a statement that is a letter alone, decorated ("B", "(b)", "**B**.", "[B]")
_BARE_LETTER = re.compile(r"[(\[*_`'\"\s]*([A-Za-z])[)\]*_`'\"\s.!:]*")


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


@functools.lru_cache(maxsize=64)
def _allowed(letters: str) -> str:
    return "".join(sorted(set(letters.upper())))


def parse_choice(text: str | None, options: Sequence[str] | None = None, letters: str | None = None) -> str | None:
    """The option letter that ``text`` (an answer, not a reasoning chain) chooses, or None: the
    option its final answer statement names (the module docstring; docs/design.md §2.11).

    ``letters`` restricts the answer letters; by default the first ``len(options)`` letters, or
    A-D without options. Only the last `ANSWER_WINDOW` characters are read (an answer ends its
    text), so the parse costs the same on any input, without recursion.
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
    bare = _BARE_LETTER.fullmatch(text)  # the common case, the format the reward asks for: "B"
    if bare:
        return bare[1].upper() if bare[1].upper() in allowed else None
    tags = [m.group(1) for m in _ANSWER_TAG.finditer(text)] if "<" in text else []
    if tags:  # the tags hold the answer: the last one's content, nothing outside them
        text = _TAG_MARKUP.sub(" ", tags[-1])
    return _final_answer(text, _option_texts(tuple(map(str, options or ()))), allowed)


@functools.lru_cache(maxsize=4096)
def _option_texts(options: tuple[str, ...]) -> dict[str, str]:
    """Each option's `_text_key` -> the letter of its first option (a question's options are read
    once per process, not once per response)."""
    return {_text_key(o): LETTERS[i] for i, o in reversed(list(enumerate(options)))}


def _text_key(text: str) -> str:
    """What an option's text and a statement are compared by: `normalise_option_text`, each sign
    or comparison joined to the number it stands before (`_SIGNED`)."""
    return _SIGNED.sub(lambda m: _SIGN_AS.get(m[1], m[1]), normalise_option_text(text))


def _text_after_letter(rest: str) -> str:
    """An option's text after its letter ("B. right", "B - 3"): the separators before it taken
    off, but a sign joined to its number ("B -3", "B. -3": B and -3)."""
    text = rest.lstrip(_TEXT_SEPARATORS)
    cut = len(rest) - len(text)
    return rest[cut - 1] + text if cut and rest[cut - 1] in "-–" and text[:1].isdigit() else text


def _clean(piece: str) -> str:
    """A statement as the grammar reads it: markup removed, whitespace collapsed."""
    return _SPACES.sub(" ", _MARKUP.sub("", piece)).strip()


def _statements(text: str) -> Iterator[tuple[int, str, str | None]]:
    """The non-empty statements of ``text``, last first: (line number, statement, the statement
    joined to the one before it when a dash separates them, else None)."""
    lines = text.split("\n")
    for number in range(len(lines) - 1, -1, -1):
        parts = _STATEMENT_END.split(lines[number])  # piece, dash or None, piece, ...
        for k in range(len(parts) - 1, -1, -2):
            statement = _clean(parts[k])
            if statement:
                dash = parts[k - 1] if k else None
                yield number, statement, _clean(parts[k - 2] + dash + parts[k]) if dash else None


def _final_answer(text: str, texts: dict[str, str], allowed: str) -> str | None:
    """The one option the final answer statement of ``text`` (its last statement) names, or None.
    ``texts``: each normalised option text -> its (first) letter."""
    statements = _statements(text)
    last = next(statements, None)
    if last is None:
        return None
    line, statement, joined = last
    found = _answer_statement(statement, texts, allowed)
    if found is not None and found[1] and joined is not None:  # "Maybe — B": one statement
        found = _answer_statement(joined, texts, allowed)
        next(statements, None)  # the part before the dash, read with it
    if found is None:
        return None
    named, plain, _ = found
    if plain:  # the statements before matter only to a bare option (read lazily: the common
        earlier = next(statements, None)  # "Answer: B" reads no other line)
        if earlier is not None and earlier[0] == line and _text_key(statement) in texts:
            before = _answer_statement(earlier[1], texts, allowed)
            if before is not None and before[2]:  # "B. right": a bare letter and a text, one answer
                named, plain = named | before[0], before[1]
                earlier = next(statements, None)
        if plain and earlier is not None:  # "A. left / B. right": a list of options, no answer
            before = _answer_statement(earlier[1], texts, allowed)
            if before is not None and before[0] != named:
                return None
    return next(iter(named)) if len(named) == 1 and named <= set(allowed) else None


def _answer_statement(statement: str, texts: dict[str, str], allowed: str) -> tuple[set[str], bool, bool] | None:
    """If ``statement`` is an answer statement (the module docstring): the letters of the options
    it names, whether it is plain (no opener, no cue: "B", "right", "B is correct") and whether
    it is a bare letter (nothing after the letter: "B", "Answer: (B)."); else None."""
    named: set[str] = set()
    plain = bare = False
    m = _BY_LETTER.fullmatch(statement)
    if m is not None:
        letter, rest = m["letter"], m["rest"].strip(_END_MARKS)
        if letter.islower() and (letter.upper() not in allowed or m["cue"] is None and (rest or m["opener"])):
            letter = None  # "x", "a cat", "so a": lower case is an option's letter alone or after a cue
        if letter is not None:
            plain, bare = not m["opener"] and m["cue"] is None, not rest
            if bare or _JUDGED_RIGHT.fullmatch(rest):
                named.add(letter.upper())
            else:
                own = texts.get(_text_key(_text_after_letter(rest).rstrip(") ")))
                if own is not None:  # "B. right": the letter and an option's text
                    named |= {letter.upper(), own}
    prefix = _BEFORE_TEXT.match(statement)
    own_letter = _TRAILING_LETTER.search(statement)  # "left (A)": an option's text and its letter
    for start in {0, len(prefix["opener"]), prefix.end()}:  # "right", "so right", "the answer is right"
        own = texts.get(_text_key(statement[start:]))
        if own is None and own_letter is not None and own_letter.start() > start:
            own = texts.get(_text_key(statement[start:own_letter.start()]))
            if own is not None:
                named.add(own_letter[1].upper())
        if own is not None:
            named.add(own)
            plain = plain or start == 0
    return (named, plain, bare) if named else None


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

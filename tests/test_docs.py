"""The repository documents itself: every "§" citation resolves to a numbered section of a document
in the repository (docs/design.md unless another document is named), every section cited by its
title (``docs/x.md, "Title"``) to a heading of that document, every relative link of README.md and
docs/ to a file and its ``#anchor`` to a heading (rules above the link checks), every test a
document cites by path (``tests/<path>.py``, ``tests/<path>.py::<name>``) exists, and nothing
points outside it.

Citation rules (what the scanner below enforces):
* a document is named by its repository path, ``docs/design.md §2.6``, ``docs/notes/benchmarks.md §2.2``;
* in code, configs and scripts a bare ``§x`` refers to the document named last before it in the
  same file, or to docs/design.md when none was; in Markdown a ``§x`` right after a document path
  refers to it, otherwise to the file itself (README.md: to docs/design.md);
* ranges and lists are checked at both ends and every item (``§2.1–2.4``, ``§2.5,2.7``);
* a section exists when the document has a heading numbered so (``## 2.``, ``### 2.6 ...``).
No model, no network: it reads files only.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DESIGN = "docs/design.md"
SKIP_DIRS = {".git", ".venv", "__pycache__", ".pytest_cache", ".ruff_cache", "node_modules"}
CODE_DIRS = ("soft_spatial", "soft_spatial_bench", "tests", "scripts", "configs", "slurm")
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sh", ".sbatch", ".toml", ".txt", ".cfg", ".ini"}
# spelled in pieces so that this file does not mention them itself
OUTSIDE = ("../" + "shared", "/work/" + "shared")

DOC_REF = re.compile(r"docs/[\w./-]+?\.md")
CITE = re.compile(r"§\s?(\d+(?:\.\d+)*)((?:\s*[–,-]\s*\d+(?:\.\d+)*)*)")
HEADING = re.compile(r"^#{1,6}\s+(\d+(?:\.\d+)*)\.?(?:\s|$)", re.M)
STALE = re.compile(r"\bDESIGN(?:\.md)?\s*§|(?<![\w/])DESIGN\.md|(?<!docs/)\bnotes/[\w-]+\.md|"
                   r"(?<![\w/])notes\s+§")


def sections(doc: str) -> set:
    """The section numbers of a repository Markdown document (empty if it does not exist)."""
    path = ROOT / doc
    return set(HEADING.findall(path.read_text(encoding="utf-8"))) if path.is_file() else set()


def citations(text: str, own: str, markdown: bool):
    """(document, section, line) for every § citation in ``text`` (rules in the module docstring)."""
    refs = [(m.start(), m.end(), m.group()) for m in DOC_REF.finditer(text)]
    for m in CITE.finditer(text):
        before = [r for r in refs if r[1] <= m.start()]
        if markdown:
            near = [r for r in before if re.fullmatch(r"[`\s]*", text[r[1]:m.start()])]
            doc = near[-1][2] if near else own
        else:
            doc = before[-1][2] if before else own
        nums = [m.group(1)] + re.findall(r"\d+(?:\.\d+)*", m.group(2))
        line = text.count("\n", 0, m.start()) + 1
        for n in nums:
            yield doc, n, line


def repo_files():
    """The repository's own files: what git tracks or would track (not what .gitignore drops, such
    as build outputs and egg-info); every file under ROOT less SKIP_DIRS outside a git checkout."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             cwd=ROOT, capture_output=True, check=True).stdout
        rels = sorted({Path(r) for r in out.decode().split("\0") if r})
    except (OSError, subprocess.CalledProcessError):
        rels = [p.relative_to(ROOT) for p in ROOT.rglob("*")]
    for rel in rels:
        path = ROOT / rel
        if any(part in SKIP_DIRS for part in rel.parts) or not path.is_file():
            continue
        yield rel, path


def cited_files():
    """Code, configs, scripts and docs: the files whose § citations must resolve."""
    for rel, path in repo_files():
        top = rel.parts[0]
        if rel == Path(__file__).relative_to(ROOT):
            continue  # holds deliberately broken examples
        if path.suffix in TEXT_SUFFIXES and (top in CODE_DIRS or top == "docs"
                                             or rel == Path("README.md")):
            yield rel, path


def unresolved(text: str, own: str, markdown: bool):
    cache: dict = {}
    bad = []
    for doc, num, line in citations(text, own, markdown):
        if doc not in cache:
            cache[doc] = sections(doc)
        if num not in cache[doc]:
            bad.append(f"line {line}: {doc} §{num}")
    return bad


def test_design_has_the_contract_sections():
    got = sections(DESIGN)
    assert got, f"{DESIGN} is missing or has no numbered sections"
    # the sections the issue asks for: method, equations 2.1-2.10, record, layers, seams, config,
    # tests, the training-step picture
    want = {"1", "2", "3", "4", "5", "6", "7", "8"} | {f"2.{i}" for i in range(1, 11)}
    assert want <= got, sorted(want - got)


def test_every_section_citation_resolves():
    problems = []
    for rel, path in cited_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        markdown = path.suffix == ".md"
        own = rel.as_posix() if markdown and rel.parts[0] == "docs" else DESIGN
        problems += [f"{rel}: {p}" for p in unresolved(text, own, markdown)]
        problems += [f"{rel}: line {text.count(chr(10), 0, m.start()) + 1}: {m.group()!r} "
                     f"(cite a document in the repository, e.g. {DESIGN} §x)"
                     for m in STALE.finditer(text)]
    assert not problems, "unresolved citations:\n" + "\n".join(problems)


def test_cited_documents_exist():
    missing = []
    for rel, path in cited_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        missing += [f"{rel}: {d}" for d in sorted(set(DOC_REF.findall(text)))
                    if not (ROOT / d).is_file()]
    assert not missing, "references to documents that do not exist:\n" + "\n".join(missing)


def test_nothing_refers_outside_the_repository():
    hits = []
    for rel, path in repo_files():
        if path.stat().st_size > 5_000_000:
            continue  # run outputs, checkpoints: not documentation
        data = path.read_bytes()
        hits += [f"{rel}: {s}" for s in OUTSIDE if s.encode() in data]
    assert not hits, "files that refer outside the repository:\n" + "\n".join(hits)


TEST_REF = re.compile(r"(?<![\w/.])(tests/[\w/]+\.py)(?:::(\w+))?")


def stale_test_refs(text: str) -> list:
    """The ``tests/<path>.py`` files, and ``tests/<path>.py::<name>`` tests or names, that ``text`` cites
    and the repository does not have (a test moved or renamed without its citations)."""
    bad = []
    for m in TEST_REF.finditer(text):
        path = ROOT / m.group(1)
        if not path.is_file():
            bad.append(m.group(0))
        elif m.group(2) and not re.search(rf"^(?:(?:async )?def|class) {m.group(2)}\b|^{m.group(2)}\s*[:=]",
                                          path.read_text(encoding="utf-8"), re.M):
            bad.append(m.group(0))
    return bad


def test_every_cited_test_exists():
    bad = []
    for rel, path in repo_files():
        if path.suffix == ".md" and (rel.parts[0] == "docs" or rel == Path("README.md")):
            bad += [f"{rel}: {ref}" for ref in stale_test_refs(path.read_text(encoding="utf-8"))]
    assert not bad, "documents cite tests that do not exist:\n" + "\n".join(bad)


@pytest.mark.parametrize("text, bad", [
    ("(`tests/test_docs.py::test_every_cited_test_exists`, `tests/test_docs.py`)", []),
    ("`tests/test_docs.py::TEST_REF` and `tests/test_docs.py::stale_test_refs`", []),
    ("`tests/test_docs.py::test_gone`", ["tests/test_docs.py::test_gone"]),
    ("moved: tests/nowhere/test_x.py::test_y", ["tests/nowhere/test_x.py::test_y"]),
    ("a folder (`tests/e2e/`) and a helper (`tests/support/barrier.py`)", []),
])
def test_the_test_citation_check_sees_a_moved_test(text, bad):
    assert stale_test_refs(text) == bad


README_MAX_LINES = 200
RESULTS = "docs/results"


def test_the_readme_is_a_short_guide():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail to docs/ (results to {RESULTS}/)"


def unlisted(index: str, names: list) -> list:
    """The names (paths relative to the results folder) that the index does not mention in backticks."""
    listed = set(re.findall(r"`([^`]+)`", index))
    return [n for n in names if n not in listed]


def test_every_result_is_in_the_index():
    folder = ROOT / RESULTS
    index = (folder / "README.md").read_text(encoding="utf-8")
    names = sorted(rel.relative_to(RESULTS).as_posix() for rel, _ in repo_files()
                   if rel.as_posix().startswith(RESULTS + "/") and rel != Path(RESULTS, "README.md"))
    assert names, f"{RESULTS}/ holds no results"
    missing = unlisted(index, names)
    assert not missing, f"files in {RESULTS}/ that {RESULTS}/README.md does not list:\n" + "\n".join(missing)


def test_the_index_check_sees_a_missing_file():
    index = "| `learn/a.md` | run a |\n| `b.png` (and c.png) | figure |"
    assert unlisted(index, ["learn/a.md", "b.png", "c.png", "a.md"]) == ["c.png", "a.md"]


# -- the scanner itself catches what it must ---------------------------------------------------

@pytest.mark.parametrize("text, markdown, bad", [
    ("see docs/design.md §2.6 and §3", False, []),
    ("see docs/design.md §2.19", False, ["docs/design.md §2.19"]),
    ("x (docs/design.md §2.1–2.19)", False, ["docs/design.md §2.19"]),
    ("controller §2.5,2.7 and §9.9", False, ["docs/design.md §9.9"]),
    ("docs/notes/benchmarks.md §2.2 then §7.1", False, ["docs/notes/benchmarks.md §7.1"]),
    ("docs/notes/benchmarks.md §2.2", False, []),
    ("docs/nowhere.md §1", False, ["docs/nowhere.md §1"]),
    ("in `docs/design.md` §8; `docs/sglang.md` covers it; §2.6 here", True, []),
    ("[`docs/design.md` §42](docs/design.md)", True, ["docs/design.md §42"]),
])
def test_scanner_reports_missing_sections(text, markdown, bad):
    got = [b.split(": ", 1)[1] for b in unresolved(text, DESIGN, markdown)]
    assert got == bad


@pytest.mark.parametrize("text", ["(DESIGN §2.8)", "DESIGN.md §2", "see notes/benchmarks.md",
                                  "(notes §3.2)"])
def test_scanner_rejects_citations_outside_the_repository(text):
    assert STALE.search(text)


@pytest.mark.parametrize("text", ["docs/design.md §2.8", "docs/notes/benchmarks.md §2.2",
                                  "design notes", "release notes"])
def test_scanner_accepts_repository_citations(text):
    assert not STALE.search(text)


# -- links, anchors and section titles resolve -------------------------------------------------
# Rules (what the checks below enforce):
# * every relative Markdown link or image in README.md and docs/**/*.md (``[text](path)``,
#   ``[text](path#anchor)``, ``[text](#anchor)``, ``[ref]: path``) names a file or folder of the
#   repository, and its ``#anchor`` a heading of the Markdown file it names, slugged as GitHub
#   slugs headings (lowercase; every character but letters, digits, ``_``, ``-`` and spaces
#   dropped; spaces become ``-``; the n-th repeat of a slug gets ``-n``);
# * a section named by its title after a document's path, ``docs/x.md, "Title"`` or
#   ``docs/x.md ("Title"`` (backticks allowed around the path), in any cited file (code, configs,
#   scripts, docs), is a heading of that document or a paragraph opening with a bold title
#   (``**Title...**``), matched case-insensitively and across line breaks; a title may be the
#   start or any run of words of the heading's text. A quote right before a line break is a
#   string's end, not a title: not checked.
FENCE = re.compile(r"^\s*(```|~~~)")
ATX = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
TITLE_REF = re.compile(r"(docs/[\w./-]+?\.md)`{0,2}(?:,\s*|\s+\(\s*)[\"“](?!\s)([^\"”]{2,200})[\"”]")
BOLD_TITLE = re.compile(r"^\s*\*\*(.+?)\*\*")


def _prose_lines(text: str):
    """(line number, line) of a Markdown text outside fenced code blocks."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield n, line


def _plain(heading: str) -> str:
    """A heading's text as rendered: inline code, emphasis and link targets dropped."""
    text = INLINE_CODE.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"(\*\*|__|(?<!\w)[*_]|[*_](?!\w))", "", text)


def headings(text: str) -> list:
    """The rendered texts of a Markdown text's headings (``#`` .. ``######``, not in code)."""
    return [_plain(m.group(2)) for _, line in _prose_lines(text) if (m := ATX.match(line))]


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading's rendered text (without the ``-n`` of a repeat)."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set:
    """Every anchor GitHub gives the headings of a Markdown text (repeats as ``slug-1``, ...)."""
    seen: dict = {}
    out = set()
    for h in headings(text):
        slug = github_slug(h)
        n = seen.get(slug, 0)
        out.add(slug if n == 0 else f"{slug}-{n}")
        seen[slug] = n + 1
    return out


def _links(text: str):
    """(line number, target) of every link, image and reference definition outside code."""
    for n, line in _prose_lines(text):
        bare = INLINE_CODE.sub("", line)
        for m in LINK.finditer(bare):
            yield n, m.group(1)
        if m := REF_DEF.match(bare):
            yield n, m.group(1)


def link_problems(root: Path, doc: Path) -> list:
    """The relative links of the Markdown file ``doc`` (under ``root``) whose file or anchor
    does not exist."""
    text = doc.read_text(encoding="utf-8")
    bad = []
    for n, target in _links(text):
        if SCHEME.match(target):
            continue  # http:, https:, mailto: ...
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if path and (not dest.exists() or root.resolve() not in (dest, *dest.parents)):
            bad.append(f"line {n}: {target} (no such file in the repository)")
        elif anchor and dest.suffix == ".md" and dest.is_file() and anchor not in anchors(
                dest.read_text(encoding="utf-8")):
            bad.append(f"line {n}: {target} (no heading with the anchor #{anchor})")
    return bad


def section_titles(text: str) -> list:
    """What a quoted title may name in a Markdown text: its headings and bold paragraph titles,
    whitespace-normalised and lowercased."""
    bold = [_plain(m.group(1)) for _, line in _prose_lines(text) if (m := BOLD_TITLE.match(line))]
    return [" ".join(t.split()).lower() for t in headings(text) + bold]


def _unquote(title: str) -> str:
    """A quoted title as written across lines of code: comment marks and indentation dropped."""
    return " ".join(re.sub(r"\n\s*(?:#+|//|\*)?\s*", " ", title).split()).lower()


def title_problems(root: Path, text: str) -> list:
    """The ``docs/x.md, "Title"`` citations of ``text`` whose document has no such section (or
    does not exist)."""
    bad = []
    cache: dict = {}
    for m in TITLE_REF.finditer(text):
        doc, title = m.group(1), _unquote(m.group(2))
        if doc not in cache:
            path = root / doc
            cache[doc] = section_titles(path.read_text(encoding="utf-8")) if path.is_file() else None
        line = text.count("\n", 0, m.start()) + 1
        if cache[doc] is None:
            bad.append(f"line {line}: {doc} (no such document)")
        elif not any(title in t for t in cache[doc]):
            bad.append(f"line {line}: {doc}, \"{m.group(2)}\" (no such section)")
    return bad


def markdown_docs():
    """README.md and docs/**/*.md: the files whose links must resolve."""
    for rel, path in repo_files():
        if path.suffix == ".md" and (rel == Path("README.md") or rel.parts[0] == "docs"):
            yield rel, path


def test_every_link_and_anchor_resolves():
    bad = [f"{rel}: {p}" for rel, path in markdown_docs() for p in link_problems(ROOT, path)]
    assert not bad, "links to files or headings that do not exist:\n" + "\n".join(bad)


def test_every_section_cited_by_title_exists():
    bad = []
    for rel, path in cited_files():
        bad += [f"{rel}: {p}" for p in title_problems(ROOT, path.read_text(encoding="utf-8",
                                                                            errors="replace"))]
    assert not bad, "sections cited by title that their document does not have:\n" + "\n".join(bad)


@pytest.mark.parametrize("heading, slug", [
    ("The softness line, closed: what it learned, and what a larger study would need",
     "the-softness-line-closed-what-it-learned-and-what-a-larger-study-would-need"),
    ("2026-11-28 (later) — Stage 0: +3.4 points on m = 2",
     "2026-11-28-later--stage-0-34-points-on-m--2"),
    ("Ambiguous-start path tracking (`path_known`, `path_two`)",
     "ambiguous-start-path-tracking-path_known-path_two"),
    ("Δ₀ and τ", "δ₀-and-τ"),
])
def test_headings_are_slugged_as_github_slugs_them(heading, slug):
    assert github_slug(_plain(heading)) == slug


def test_a_renamed_heading_breaks_the_links_and_titles_that_point_to_it(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    target = docs / "a.md"
    target.write_text("# A\n\n## The line, closed: what it learned\n\ntext\n\n## Notes\n\n## Notes\n\n"
                      "**Attention on Hopper, and why.** text\n\n```\n## Not a heading\n```\n")
    (docs / "b.md").write_text(
        "[closed](a.md#the-line-closed-what-it-learned), [again](a.md#notes-1), "
        "[top](#b), [away](https://example.com/x#y), `[code](nowhere.md)`\n\n# B\n")
    code = ('"""See docs/a.md, "The line, closed" and `docs/a.md` ("what it\n    learned"),\n'
            'docs/a.md, "Attention on Hopper"; a string ends: "docs/a.md, "\n    f"x"."""\n')
    assert link_problems(tmp_path, docs / "b.md") == []
    assert title_problems(tmp_path, code) == []
    # a heading renamed, a fenced "heading" linked, a missing file: each is reported
    target.write_text(target.read_text().replace("The line, closed", "The line, shut"))
    (docs / "c.md").write_text("[gone](a.md#not-a-heading) [lost](missing.md) [x](a.md#notes-2)\n")
    assert link_problems(tmp_path, docs / "b.md") == [
        "line 1: a.md#the-line-closed-what-it-learned (no heading with the anchor "
        "#the-line-closed-what-it-learned)"]
    assert [p.split(" (")[0] for p in link_problems(tmp_path, docs / "c.md")] == [
        "line 1: a.md#not-a-heading", "line 1: missing.md", "line 1: a.md#notes-2"]
    assert [p.split(": ", 1)[0] for p in title_problems(tmp_path, code)] == ["line 1"]
    assert title_problems(tmp_path, 'docs/b.md, "B" and docs/z.md, "Zed"') == [
        "line 1: docs/z.md (no such document)"]

"""Imports point down: every soft_spatial module imports only its own component or the tiers
below, and no modules import each other in a cycle (imports read with ``ast``, nothing runs;
imports inside functions count too). The scripts sit above the package: they import it, nothing in
it imports them, and they import each other in no cycle.

    .venv/bin/python -m pytest tests/test_layers.py -q
    .venv/bin/python tests/test_layers.py        # prints the component graph and any problem

The tiers (bottom to top): a module of tier n may import its own component and components of
tiers < n, never a sibling of its own tier (so ``engines`` and ``actor`` stay independent, and
``softthink`` ← ``engines`` ← ``rollout``, ``softthink`` ← ``actor``). Each folder of ``lab/`` is a
component of its own, ``lab.<room>`` (one experiment or study per room, built on the rooms below
it); ``lab``'s own modules (``lab/__init__.py``, the ``lab/learn.py`` alias) are the component
``lab``. ``TIERS`` is the one map; docs/design.md §4 shows it in a ``layers`` block, and a test keeps
the two equal. The benchmarks (``soft_spatial_bench/``: the CPU benchmarks' workloads, the GPU kit)
are a package of their own above the library, as the scripts are: they import it, nothing in it
imports them, and their modules import each other in no cycle.
"""
from __future__ import annotations

import ast
import collections
import re
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "soft_spatial"
BENCH = PACKAGE.parent / "soft_spatial_bench"
DESIGN = PACKAGE.parent / "docs" / "design.md"

TIERS = [
    {"compat", "infra"},  # upstream internals (one function per touch); files, locks, processes, Ray
    {"softthink", "models", "data"},  # the method (pure PyTorch) and its settings; models; benchmark data
    {"engines", "actor"},  # rollout engines behind one interface; the soft training engine
    {"rollout"},  # verl's rollout servers around the engines
    {"integration", "eval"},  # verl wiring (platform, worker, trainer, task runner); evaluation
    {"plugin", "export"},  # registration in every verl process; the Hugging Face export
    {"train", "launch"},  # commands: training, the cluster launcher
    {"lab.paper"},  # the paper's tables and figures
    {"lab.learning"},  # the learning experiment (does the method learn?): its runner and warm starts
    {"lab.softness"},  # the softness experiment, built on the learning experiment's runner
    {"lab", "ablation", "stats", "analysis"},  # the lab's commands (and its map, lab/__init__.py)
]
TIER = {component: n for n, tier in enumerate(TIERS) for component in tier}


def modules(package: Path = PACKAGE) -> dict:
    """``{dotted name: path}`` of every module of ``package`` (packages by their name)."""
    out = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(mods: dict) -> dict:
    """``{module: {imported module of mods: line}}`` (``from pkg import sub`` → ``pkg.sub``)."""
    graph = collections.defaultdict(dict)
    for name, path in mods.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package[:len(package) - node.level + 1] if node.level else []
                base = ".".join(base + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                           for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in mods:  # a name inside a module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].setdefault(target, node.lineno)
    return graph


def component(module: str) -> str:
    """A module's component: its folder under soft_spatial/ (or its own name at the top), and for
    a module in a folder of ``lab/`` that room, ``lab.<room>``."""
    parts = module.split(".")
    if parts[1] == "lab" and len(parts) > 2 and (PACKAGE / "lab" / parts[2]).is_dir():
        return f"lab.{parts[2]}"
    return parts[1]


def upward_imports(graph: dict) -> list:
    problems = []
    for src, targets in sorted(graph.items()):
        for dst, line in sorted(targets.items()):
            a, b = component(src), component(dst)
            if a != b and TIER[b] >= TIER[a]:
                problems.append(f"{src} (line {line}) imports {dst}: {a} (tier {TIER[a]}) may "
                                f"not import {b} (tier {TIER[b]})")
    return problems


def cycles(graph: dict) -> list:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while not scc or scc[-1] != v:
                scc.append(stack.pop())
                on_stack.discard(scc[-1])
            if len(scc) > 1:
                found.append(sorted(scc))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def documented_tiers(text: str) -> list:
    """The map in a document's fenced ``layers`` block: one ``n | a, b | what`` line per tier,
    bottom to top, as a list of component sets (a line out of order or malformed is an error)."""
    blocks = re.findall(r"^```layers\n(.*?)^```", text, re.M | re.S)
    assert len(blocks) == 1, f"want one ```layers block, found {len(blocks)}"
    tiers = []
    for line in blocks[0].splitlines():
        if not line.strip():
            continue
        number, components, _what = (field.strip() for field in line.split("|", 2))
        assert number == str(len(tiers)), f"tier {number!r} out of order: {line!r}"
        tiers.append({c.strip() for c in components.split(",")})
    return tiers


#: a module named in the tree: a bare ``name.py`` (not the tail of a path, ``integration/collate.py``,
#: nor a pattern, ``test_*.py``)
_MODULE = re.compile(r"(?<![\w./*-])([A-Za-z_]\w*\.py)\b")


def documented_modules(text: str, root: str = "soft_spatial/") -> dict:
    """The tree in a document's fenced ``tree`` block (docs/design.md §4, "Who lives where"):
    ``{folder relative to root ("" for the top): {module file names}}``. Under the ``root`` line, a
    line at indentation 2 opens a folder (its first word, ending in ``/``) or holds modules of the
    top; every bare ``name.py`` in the text up to the next such line is a module of that folder. A
    line at indentation 0 other than ``root`` ends the package."""
    blocks = re.findall(r"^```tree\n(.*?)^```", text, re.M | re.S)
    assert len(blocks) == 1, f"want one ```tree block, found {len(blocks)}"
    tree, folder, inside = {}, None, False
    for line in blocks[0].splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        words = line.split()
        if indent == 0:
            inside, folder = words[0] == root, None
            continue
        if not inside:
            continue
        if indent == 2:
            folder = words[0] if words[0].endswith("/") else ""
            line = line.strip()[len(folder):]
            tree.setdefault(folder, set())
        assert folder is not None, f"a module line before any folder: {line!r}"
        tree[folder] |= {m for m in _MODULE.findall(line) if m != "__init__.py"}
    return tree


def tree_problems(tree: dict, package: Path = PACKAGE) -> list:
    """Every module of ``package`` missing from ``tree``, every module or folder it names that
    does not exist (``__init__.py`` files aside: a folder stands for its own)."""
    actual = {str(p.relative_to(package)) for p in package.rglob("*.py") if p.name != "__init__.py"}
    named = {folder + m for folder, ms in tree.items() for m in ms}
    top = package.name
    return ([f"missing from the tree: {top}/{m}" for m in sorted(actual - named)]
            + [f"named in the tree, not in the package: {top}/{m}" for m in sorted(named - actual)]
            + [f"a folder the package does not have: {top}/{f}" for f in sorted(tree)
               if f and not (package / f).is_dir()])


def test_the_design_tree_lists_every_module():
    text = DESIGN.read_text(encoding="utf-8")
    assert tree_problems(documented_modules(text)) == []
    assert tree_problems(documented_modules(text, "soft_spatial_bench/"), BENCH) == []


def test_the_tree_reader_sees_a_missing_and_an_invented_module():
    text = DESIGN.read_text(encoding="utf-8")
    assert "tether.py (a child command" in text and "  compat/verl/  " in text
    broken = (text.replace("tether.py (a child command", "tether (a child command")
              .replace("  compat/verl/  verl by area:", "  compat/verl/  verl by area: magic.py,")
              .replace("  launch/  ", "  launcher/  ").replace("  gpu/  ", "  cpu/  "))
    problems = tree_problems(documented_modules(broken))
    assert "missing from the tree: soft_spatial/infra/tether.py" in problems
    assert "named in the tree, not in the package: soft_spatial/compat/verl/magic.py" in problems
    assert "a folder the package does not have: soft_spatial/launcher/" in problems
    assert "a folder the package does not have: soft_spatial_bench/cpu/" in tree_problems(
        documented_modules(broken, "soft_spatial_bench/"), BENCH)
    # a module of another folder named with its folder, and a pattern, are not this folder's
    tree = documented_modules("```tree\nsoft_spatial/\n  eval/   runner.py, see integration/collate.py "
                              "and tests/eval/test_*.py\n  train.py  the command\nconfigs/  x.py\n```\n")
    assert tree == {"eval/": {"runner.py"}, "": {"train.py"}}


def test_the_design_shows_the_same_map():
    assert documented_tiers(DESIGN.read_text(encoding="utf-8")) == TIERS


def test_the_map_reader_sees_a_difference():
    block = "```layers\n" + "".join(f"{n} | {', '.join(sorted(t))} | x\n" for n, t in enumerate(TIERS)) + "```\n"
    assert documented_tiers(block) == TIERS
    assert documented_tiers(block.replace("rollout |", "rollout, extra |")) != TIERS
    assert documented_tiers(block.replace("lab.paper |", "lab.paper, bench |")) != TIERS


def test_every_component_has_a_tier():
    assert {component(m) for m in modules() if m != "soft_spatial"} <= set(TIER)


def test_no_module_imports_upward():
    assert upward_imports(imports(modules())) == []


def test_no_import_cycles():
    assert cycles(imports(modules())) == []


def _imported_packages(path: Path) -> set:
    """The top-level packages ``path`` imports (absolute imports)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_the_library_never_imports_its_benchmarks():
    """soft_spatial_bench/ sits above the library (module docstring): nothing in soft_spatial/
    imports it, and the benchmarks import each other in no cycle."""
    assert [str(p.relative_to(PACKAGE.parent)) for p in sorted(PACKAGE.rglob("*.py"))
            if "soft_spatial_bench" in _imported_packages(p)] == []
    bench = modules(BENCH)
    assert len(bench) > 20 and cycles(imports(bench)) == []
    graph = imports(bench)
    assert graph["soft_spatial_bench.gpu.runner"]  # the reader sees the benchmarks' own imports
    assert "soft_spatial" in _imported_packages(BENCH / "gpu" / "runner.py") | _imported_packages(
        BENCH / "gpu" / "context.py")


def test_the_checks_catch_an_upward_import_and_a_cycle():
    graph = {"soft_spatial.engines.local": {"soft_spatial.rollout.server": 3},
             "soft_spatial.rollout.server": {"soft_spatial.engines.local": 5}}
    assert len(upward_imports(graph)) == 1 and f"tier {TIER['rollout']}" in upward_imports(graph)[0]
    assert cycles(graph) == [["soft_spatial.engines.local", "soft_spatial.rollout.server"]]
    sibling = {"soft_spatial.actor.train_engine": {"soft_spatial.engines.step": 1}}
    assert upward_imports(sibling)  # engines and actor are siblings
    # the lab's rooms: the learning runner importing the softness experiment (as it did) goes up
    room = {"soft_spatial.lab.learning.experiment": {"soft_spatial.lab.softness.gates": 1},
            "soft_spatial.lab.softness.stage0": {"soft_spatial.lab.learning.experiment": 2}}
    assert upward_imports(room) == [
        f"soft_spatial.lab.learning.experiment (line 1) imports soft_spatial.lab.softness.gates: "
        f"lab.learning (tier {TIER['lab.learning']}) may not import lab.softness (tier {TIER['lab.softness']})"]
    assert component("soft_spatial.lab.learn") == "lab" and component("soft_spatial.lab") == "lab"
    assert component("soft_spatial.lab.paper.analysis.cli") == "lab.paper"


if __name__ == "__main__":
    g = imports(modules())
    edges = collections.defaultdict(set)
    for src, targets in g.items():
        edges[component(src)].update(component(d) for d in targets if component(d) != component(src))
    for n, tier in enumerate(TIERS):
        for c in sorted(tier):
            print(f"tier {n} {c:10s} -> {', '.join(sorted(edges.get(c, ()))) or '-'}")
    problems = upward_imports(g) + [f"cycle: {c}" for c in cycles(g)]
    print("\n".join(problems) or "OK: no upward import, no cycle")
    sys.exit(1 if problems else 0)


# -- the scripts: the tier above the package ------------------------------------------------------
SCRIPTS = PACKAGE.parent / "scripts"


def script_imports() -> dict:
    """``{script: {imported script or package module}}`` for every Python file under scripts/
    (a script imports another by its file name, with its folder on the path)."""
    names = {p.stem: p for p in SCRIPTS.rglob("*.py")}
    mods = modules()
    graph = collections.defaultdict(set)
    for stem, path in names.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                       [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level
                       else [])
            for target in targets:
                top = target.split(".")[0]
                if top in names and top != stem:
                    graph[f"scripts.{stem}"].add(f"scripts.{top}")
                elif top == "soft_spatial":
                    while target not in mods:
                        target = target.rpartition(".")[0]
                    graph[f"scripts.{stem}"].add(target)
    return graph


def test_scripts_import_the_package_and_nothing_imports_a_script():
    graph = script_imports()
    assert any(t.startswith("soft_spatial.") for ts in graph.values() for t in ts)  # it reads imports
    assert cycles({k: dict.fromkeys(v) for k, v in graph.items()}) == []
    stems = {p.stem for p in SCRIPTS.rglob("*.py")}
    upward = []
    for name, path in modules().items():  # a package module importing a script (by its name)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                tops = ([a.name.split(".")[0] for a in node.names] if isinstance(node, ast.Import)
                        else [(node.module or "").split(".")[0]] if not node.level else [])
                upward += [f"{name} (line {node.lineno}) imports {t}" for t in tops
                           if t in stems | {"scripts"}]
    assert upward == []

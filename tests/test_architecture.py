"""One way through: no import cycle between utu's packages (and top-level modules), imports inside functions
and under TYPE_CHECKING included, so each layer can be read without the ones above it."""

import ast
import re
import sys
from collections import defaultdict

from tests.conftest import ROOT

PACKAGE = ROOT / "utu"


def unit(module: str) -> str | None:
    """utu.practice.loop -> practice; utu.app -> app."""
    parts = module.split(".")
    return parts[1] if parts[0] == "utu" and len(parts) > 1 else None


def imports_between_units() -> dict[tuple[str, str], list[str]]:
    """(from, to) -> where: every import of one unit by another, anywhere in a file."""
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        package = parts[:-1]  # what a relative import starts from
        source = unit(".".join(parts))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                targets = [".".join([*base, node.module] if node.module else base)]
            else:
                continue
            for target in targets:
                destination = unit(target)
                if source and destination and destination != source:
                    edges[(source, destination)].append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return edges


def test_no_import_cycle_between_packages():
    edges = imports_between_units()
    graph = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)

    def reachable(start: str) -> set[str]:
        seen, stack = set(), [start]
        while stack:
            for nxt in graph[stack.pop()] - seen:
                seen.add(nxt)
                stack.append(nxt)
        return seen

    cycles = [f"{a} -> {b} ({edges[(a, b)][0]}) and back" for (a, b) in edges if a in reachable(b)]
    assert not cycles, cycles


def test_the_check_sees_a_cycle_when_there_is_one(tmp_path, monkeypatch):
    package = tmp_path / "utu"
    (package / "a").mkdir(parents=True)
    (package / "b").mkdir()
    (package / "a" / "__init__.py").write_text("from utu.b import x\n")
    (package / "b" / "__init__.py").write_text("def f():\n    from ..a import y\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", package)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    edges = imports_between_units()
    assert ("a", "b") in edges and ("b", "a") in edges


def modules(package=None) -> dict[str, object]:
    """utu's modules by dotted name (a package by its own name), to their files."""
    found = {}
    for path in (package or PACKAGE).rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports_between_modules(package=None) -> dict[str, set[str]]:
    """module -> the utu modules it imports (`from utu.a import b` is utu.a.b when that is a module, else utu.a),
    anywhere in its file."""
    known = modules(package)

    def resolve(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = defaultdict(set)
    for module, path in known.items():
        package_parts = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package_parts[: len(package_parts) - node.level + 1] if node.level else []
                source = ".".join([*base, node.module] if node.module else base)
                targets = [f"{source}.{alias.name}" for alias in node.names]
            else:
                continue
            for target in targets:
                resolved = resolve(target)
                if resolved and resolved != module:
                    edges[module].add(resolved)
    return edges


def module_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return cycles


def test_no_import_cycle_between_modules_inside_a_package_either():
    assert module_cycles(imports_between_modules()) == []


def test_the_module_check_sees_a_cycle_inside_a_package(tmp_path, monkeypatch):
    package = tmp_path / "utu" / "p"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from utu.p.b import x\n")
    (package / "b.py").write_text("def f():\n    from . import a\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert module_cycles(imports_between_modules(tmp_path / "utu")) == [["utu.p.a", "utu.p.b"]]


COMPAT = {"utu.utils", "utu.rl.agilerl"}  # other projects' names and APIs (Youtu-Agent's, AgileRL's)


def test_the_compatibility_modules_are_imported_by_nothing_of_utu():
    edges = imports_between_modules()
    importers = sorted(f"{m} -> {t}" for m, targets in edges.items() for t in targets & COMPAT if m not in COMPAT)
    assert not importers, importers


def layers_as_documented() -> list[str]:
    """The units in the order docs/architecture.md's layer block (the code block that starts with `commands/`)
    lists them, top layer first: each a package or module of utu, listed once."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = re.search(r"^```[^\n]*\n(commands/.*?)^```", text, re.DOTALL | re.MULTILINE)
    assert block, "docs/architecture.md: no code block starting with commands/"
    order = [line.split()[0] for line in block.group(1).splitlines() if line[:1].isalpha()]
    assert len(order) == len(set(order)), f"listed twice: {[u for u in order if order.count(u) > 1]}"
    stale = [u for u in order if not (PACKAGE / u.removesuffix("/")).exists()]
    assert not stale, f"listed in docs/architecture.md but not in utu/: {stale}"
    return [u.removesuffix("/").removesuffix(".py") for u in order]


def test_each_layer_imports_only_those_docs_architecture_lists_below_it():
    order = layers_as_documented()
    edges = imports_between_units()
    unlisted = {unit for edge in edges for unit in edge} - set(order)
    assert not unlisted, f"not in docs/architecture.md's layers: {sorted(unlisted)}"
    upward = [f"{a} -> {b} ({where[0]})" for (a, b), where in edges.items() if order.index(b) < order.index(a)]
    assert not upward, upward

"""One way through: no import cycle between utu's packages (and top-level modules), imports inside functions
and under TYPE_CHECKING included, so each layer can be read without the ones above it."""

import ast
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

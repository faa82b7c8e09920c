"""Dependencies between the harness's and the strategies' modules point one way: no import cycle, counting
imports inside functions too (a lazy import hides a cycle from Python, not from this test) and imports
under `if TYPE_CHECKING:` (an annotation-only cycle is still two modules that need each other)."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("harness", "strategies")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str], name: str | None = None) -> set[str]:
    """The project modules a file imports anywhere in it: top level and inside functions alike."""
    name = name or module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from . import x, from .a import b
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # from harness import x: x may be a module or a name
                target = target.rpartition(".")[0]
            if target and target != name and target not in PACKAGES:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    files = [p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")]
    modules = {module_name(p) for p in files}
    return {module_name(p): imports_of(p, modules) for p in files}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path [a, b, ..., a], or None (depth-first search, white/grey/black)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_the_graph_sees_function_local_imports(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from harness import cli\n"
                      "def f():\n    from harness import report\n    import harness.plots as p\n"
                      "    from .tables import fmt\n")
    modules = {"harness.report", "harness.plots", "harness.tables", "harness.cli", "harness"}
    assert imports_of(source, modules, "harness.m") == {"harness.report", "harness.plots", "harness.tables",
                                                        "harness.cli"}


def test_no_import_cycle_in_harness_and_strategies():
    graph = import_graph()
    assert "harness.report" in graph and "harness.articles" in graph
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_reporting_depends_one_way():
    graph = import_graph()
    assert graph["harness.tables"] <= {"harness.records", "harness.stats", "strategies.registry"}
    assert "harness.report" not in graph["harness.articles"] | graph["harness.plots"]
    assert "harness.articles" not in graph["harness.plots"] and "harness.plots" not in graph["harness.articles"]
    assert graph["harness.records"] <= {"harness.metrics", "harness.stats"}

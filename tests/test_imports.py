"""Dependencies between the harness's and the strategies' modules point one way: no import cycle, counting
imports inside functions too (a lazy import hides a cycle from Python, not from this test) and imports
under `if TYPE_CHECKING:` (an annotation-only cycle is still two modules that need each other).

`harness/` is in wings that follow one run (the core), and a wing imports only the wings below it in WINGS (and
the shared base modules); the side features (FEATURES: each check under harness/checks/, ...) import the core
wings below `commands` and the base modules, never another feature, and no core wing imports a feature;
`strategies/` never imports `harness/`; no command imports another (what two commands share lives in a wing).
The scripts (scripts/*.py, scripts/gpu/*.py, scripts/s3/*.py) keep the same size rules and call the wings,
never a command or the command line."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("harness", "strategies")
# lowest first: a module of a wing may import its own wing and the wings before it, never one after it
WINGS = ("measure", "lab", "data", "config", "device", "train", "results", "analysis", "run", "report", "history",
         "commands")
BASE = {"harness.errors", "harness.progress", "harness.safewrite"}  # imported by any wing; they import no other
# harness module but each other
TOP = {"harness.cli", "harness.cli.parsers", "harness.cli.fromargs"}  # the door: may import every wing and feature
# the side features, one package each (its command, measuring, judgement and table): a feature imports the core
# wings (all but `commands`) and BASE, never another feature; no core module imports one. Every package under
# harness/checks/ is a feature of its own; harness/checks/__init__.py only holds them (it imports nothing).
FEATURE_HOLDERS = ("harness.checks",)
FEATURES = tuple(sorted(f"harness.checks.{p.name}" for p in (REPO / "harness" / "checks").iterdir()
                        if (p / "__init__.py").exists())) + ("harness.gates", "harness.loaderonly")
PARSER = "harness.cli.parsers"  # the one module that imports argparse
SCRIPT_GLOBS = ("scripts/*.py", "scripts/gpu/*.py", "scripts/s3/*.py")


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
            # from a.b import c: the module a.b.c if there is one, else the module a.b (c is a name in it)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
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
                      "def f():\n    from harness.report import report\n    import harness.report.plots as p\n"
                      "    from .tables import fmt\n")
    modules = {"harness.report.report", "harness.report.plots", "harness.report.tables", "harness.report",
               "harness.cli", "harness"}
    assert imports_of(source, modules, "harness.report.m") == {"harness.report.report", "harness.report.plots",
                                                               "harness.report.tables", "harness.cli"}


def wing_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "harness" and len(parts) > 1 and parts[1] in WINGS else None


def feature_of(module: str, features: tuple[str, ...] = FEATURES) -> str | None:
    """The feature (a package prefix of FEATURES) a module belongs to, or None (a core or base module)."""
    return next((f for f in features if module == f or module.startswith(f + ".")), None)


def order_violations(graph: dict[str, set[str]], features: tuple[str, ...] = FEATURES) -> list[str]:
    """Every import of harness/ that points up the wing order (or from a base module to any other), from a
    feature to another feature or to the commands wing, or from the core to a feature."""
    rank = {w: i for i, w in enumerate(WINGS)}
    bad = []
    for module, targets in graph.items():
        if module.startswith("strategies"):
            bad += [f"{module} -> {t}" for t in targets if t.startswith("harness")]
            continue
        for target in targets:
            if not target.startswith("harness.") or module in TOP or target in BASE:
                continue
            if module in BASE or target in TOP:
                bad.append(f"{module} -> {target}")
                continue
            mine, theirs = feature_of(module, features), feature_of(target, features)
            if mine or theirs:  # a feature's own modules, or a feature on the core below `commands`
                ok = theirs == mine or (theirs is None and wing_of(target) not in (None, "commands"))
            else:
                ok = None not in (wing_of(module), wing_of(target)) and rank[wing_of(target)] <= rank[wing_of(module)]
            if not ok:
                bad.append(f"{module} -> {target}")
    return sorted(bad)


def test_the_order_check_finds_an_upward_import():
    assert order_violations({"harness.data.generator": {"harness.report.tables"}}) == [
        "harness.data.generator -> harness.report.tables"]
    assert order_violations({"harness.report.tables": {"harness.data.generator", "harness.errors"}}) == []
    assert order_violations({"harness.errors": {"harness.data.generator"}}) != []
    assert order_violations({"strategies.cache.lru": {"harness.data.generator"}}) != []


def test_the_feature_check_finds_a_feature_that_imports_another_and_the_core_that_imports_one():
    features = ("harness.checks.a", "harness.checks.b", "harness.gates")
    graph = {"harness.checks.a.command": {"harness.checks.a.verdict", "harness.run.launch", "harness.errors",
                                          "harness.checks.b.table"},
             "harness.checks.b.table": {"harness.report.tables", "harness.commands.bench"},
             "harness.gates.gate": {"harness.checks.a.verdict"},
             "harness.run.launch": {"harness.checks.a.verdict"},
             "harness.cli": {"harness.checks.a.command", "harness.gates.gate"},
             "harness.checks.a.verdict": {"harness.checks"}}
    assert order_violations(graph, features) == [
        "harness.checks.a.command -> harness.checks.b.table",  # a feature imports another
        "harness.checks.a.verdict -> harness.checks",  # the holder of the checks is no wing
        "harness.checks.b.table -> harness.commands.bench",  # a feature imports a command
        "harness.gates.gate -> harness.checks.a.verdict",  # a future feature imports a check
        "harness.run.launch -> harness.checks.a.verdict"]  # the core imports a feature
    assert feature_of("harness.checks.ab.x", features) is None and feature_of("harness.gates", features)


def test_every_harness_module_is_in_a_wing():
    graph = import_graph()
    loose = [m for m in graph if m.startswith("harness.") and m not in BASE | TOP and wing_of(m) not in WINGS
             and not feature_of(m) and m not in FEATURE_HOLDERS]
    assert loose == []
    assert all((REPO / "harness" / w / "__init__.py").read_text().strip() for w in WINGS), "a wing without a docstring"
    packages = [f for f in FEATURES if (REPO / f.replace(".", "/") / "__init__.py").exists()]
    assert len(packages) >= 4 and all((REPO / f.replace(".", "/") / "__init__.py").read_text().strip()
                                      for f in packages), "a feature without a docstring"
    assert all(graph[h] == set() for h in FEATURE_HOLDERS), "a holder of features imports"


def test_wings_depend_downward_only():
    assert order_violations(import_graph()) == []


def test_no_import_cycle_in_harness_and_strategies():
    graph = import_graph()
    assert "harness.report.report" in graph and "harness.report.articles" in graph
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_reporting_depends_one_way():
    graph = import_graph()
    assert "harness.report.report" not in graph["harness.report.articles"] | graph["harness.report.plots"]
    assert "harness.report.articles" not in graph["harness.report.plots"]
    assert "harness.report.plots" not in graph["harness.report.articles"]
    assert graph["harness.results.cellresult"] <= {"harness.results.metrics", "harness.results.cellorder",
                                                   "harness.results.cellparts",
                                                   "harness.results.cellsversions", "harness.measure.rankrecord",
                                                   "harness.measure.jsonrecord", "strategies.storage.advice"}
    assert graph["harness.results.repeats"] <= {"harness.results.cellresult", "harness.results.stats"}
    assert graph["harness.results.vsprobe"] <= {"harness.results.cellresult"}
    # the per-rank record is written in measure and train and read in results: it depends on the record base
    # (harness.measure.jsonrecord, which depends on nothing) only
    assert graph["harness.measure.rankrecord"] == {"harness.measure.jsonrecord"}
    assert graph["harness.measure.jsonrecord"] == set()
    assert graph["harness.results.cellparts"] == {"harness.measure.jsonrecord"}
    # the versioned files' helper: any results module uses it; it writes through the base module safewrite
    assert graph["harness.results.fileformat"] == {"harness.safewrite"}


def script_files() -> list[Path]:
    return sorted(p for pattern in SCRIPT_GLOBS for p in REPO.glob(pattern))


def too_long(path: Path, text: str | None = None) -> list[str]:
    """A module past 400 lines, each function past 60."""
    text = path.read_text() if text is None else text
    where = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    out = [f"{where}: {len(text.splitlines())} lines"] if len(text.splitlines()) > 400 else []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 60:
            out.append(f"{where}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1} lines")
    return out


def test_the_size_check_finds_a_long_function_and_a_long_module(tmp_path):
    body = "def f():\n" + "    x = 1\n" * 60
    assert too_long(tmp_path / "m.py", body) == [f"{tmp_path / 'm.py'}:1 f: 61 lines"]
    assert too_long(tmp_path / "m.py", "x = 1\n" * 401) == [f"{tmp_path / 'm.py'}: 401 lines"]
    assert too_long(tmp_path / "m.py", "def f():\n" + "    x = 1\n" * 59) == []


def test_modules_and_functions_stay_small():
    """A module past 400 lines, or a function past 60, holds two things: in harness/, strategies/ and the
    scripts alike."""
    files = [p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")] + script_files()
    assert len(script_files()) >= 10
    assert [line for path in files for line in too_long(path)] == []


def test_no_two_classes_share_a_name():
    seen: dict[str, list[str]] = {}
    for pkg in PACKAGES:
        for path in (REPO / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    seen.setdefault(node.name, []).append(str(path.relative_to(REPO)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}


def command_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a command module (harness.commands.X, a feature's command.py) by another command module."""
    commands = {m for m in graph if m.startswith("harness.commands.") or (feature_of(m) and m.endswith(".command"))}
    return sorted(f"{m} -> {t}" for m in commands for t in graph[m] if t in commands)


def test_the_command_check_finds_a_command_that_imports_another():
    graph = {"harness.commands.a": {"harness.commands.b", "harness.run.launch"}, "harness.commands.b": set(),
             "harness.run.launch": set()}
    assert command_imports(graph) == ["harness.commands.a -> harness.commands.b"]


def test_no_command_imports_another():
    """What two commands share is in the wing it belongs to (harness.run, harness.analysis, harness.report ...)."""
    assert command_imports(import_graph()) == []


def script_violations(scripts: list[Path], modules: set[str]) -> list[str]:
    """Each harness module a script imports that is not in a wing, a base module or a feature's module (a
    feature's command excepted), or is a command or the command line: a script calls the wings, as a command
    does."""
    bad = []
    for path in scripts:
        for target in sorted(imports_of(path, modules, f"scripts.{path.stem}")):
            allowed = target in BASE or wing_of(target) not in (None, "commands") or (
                feature_of(target) and not target.endswith("command"))  # a feature's judgement, not its command
            if target.startswith("harness") and not allowed:
                bad.append(f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path} -> {target}")
    return bad


def test_the_script_check_finds_a_script_that_uses_a_command(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("def f():\n    from harness.commands import ab_gate\n    from harness.cli import main\n"
                      "    from harness.run import abruns\n    from harness.errors import UsageError\n")
    modules = {"harness", "harness.commands", "harness.commands.ab_gate", "harness.cli", "harness.run",
               "harness.run.abruns", "harness.errors"}
    assert script_violations([script], modules) == [f"{script} -> harness.cli", f"{script} -> harness.commands.ab_gate"]


def test_scripts_call_the_wings_never_a_command_or_the_command_line():
    assert script_violations(script_files(), set(import_graph())) == []


def argparse_importers() -> list[str]:
    """The modules of harness/ and strategies/ that import argparse anywhere (inside functions too)."""
    out = []
    for pkg in PACKAGES:
        for path in (REPO / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                if any(n == "argparse" or n.startswith("argparse.") for n in names):
                    out.append(module_name(path))
    return sorted(set(out))


def test_only_the_cli_imports_argparse():
    """The command line is parsed at the door alone; every lower module takes typed values."""
    assert argparse_importers() == [PARSER]


def test_every_module_is_listed_in_the_architecture_page():
    """docs/architecture.md names every module of harness/ (as `wing/module.py`, `cli/...` or `harness/x.py`)."""
    text = (REPO / "docs" / "architecture.md").read_text()
    missing = []
    for path in (REPO / "harness").rglob("*.py"):
        rel = path.relative_to(REPO / "harness")
        if rel.name == "__init__.py" and rel.parent != Path("cli"):
            continue
        if str(rel) not in text and f"harness/{rel}" not in text:
            missing.append(str(rel))
    assert sorted(missing) == []

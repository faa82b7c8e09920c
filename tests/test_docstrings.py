"""Docstrings in harness/ and strategies/ stay under 100 columns (issue 51): prose a newcomer reads in a
terminal or a narrow editor pane without wrapping; code and comments keep ruff's 120."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WIDTH = 100  # a docstring line is shorter than this


def long_lines(path: Path, root: Path = REPO) -> list[str]:
    """`path:line (columns)` for each line of a module, class or function docstring at WIDTH or over."""
    src = path.read_text().split("\n")
    found = []
    for node in ast.walk(ast.parse("\n".join(src), filename=str(path))):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                found += [f"{path.relative_to(root)}:{i + 1} ({len(src[i])})"
                          for i in range(first.lineno - 1, first.end_lineno) if len(src[i]) >= WIDTH]
    return found


def test_docstrings_stay_under_100_columns():
    files = [p for root in ("harness", "strategies") for p in sorted((REPO / root).rglob("*.py"))]
    assert len(files) > 100
    too_long = [line for p in files for line in long_lines(p)]
    assert not too_long, f"{len(too_long)} docstring lines at {WIDTH} columns or more: {too_long[:10]}"


def test_a_long_docstring_line_is_found(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('"""' + "x" * 120 + '"""\n\n\ndef f():\n    """short"""\n    return "' + "y" * 110 + '"\n')
    assert long_lines(module, tmp_path) == ["m.py:1 (126)"]  # the docstring, not the code's long string

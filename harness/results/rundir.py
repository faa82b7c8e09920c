"""A run's directory under results/: env.json (results.environment), cells.jsonl (appended per cell), probe.jsonl,
summary.csv, report.md."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from harness.errors import UsageError
from harness.results.cellresult import CellResult
from harness.results.environment import Environment
from harness.results.probeline import ProbeLine, ProbeSeries


def new_run_dir(out_root: Path, scenario_name: str) -> Path:
    """Create results/<UTC time>-<scenario>/; a one-line UsageError if out_root is not writable."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    run_dir = Path(out_root) / f"{stamp}-{scenario_name}"
    n = 1
    while run_dir.exists():
        n += 1
        run_dir = Path(out_root) / f"{stamp}-{scenario_name}-{n}"
    try:
        run_dir.mkdir(parents=True)
        probe = run_dir / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise UsageError(f"output directory {out_root} is not writable ({err.strerror}); "
                         f"pass --out with a writable directory") from None
    return run_dir


def _nearest_existing(path: Path) -> Path:
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_writable_dir(path: Path, flag: str, shown: Path | None = None) -> None:
    """Before anything is measured: ``path`` is a writable directory or can be created as one (nothing is
    created); else a one-line UsageError naming ``flag`` (and ``shown``, default ``path``)."""
    base = _nearest_existing(path)
    path = shown if shown is not None else path
    if not base.is_dir():
        raise UsageError(f"{flag} {path}: {base} is a file, not a directory; pass a directory")
    probe = base / f".write-test-{os.getpid()}"
    try:  # a real write (access() says yes to root on a read-only or pseudo file system)
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise UsageError(f"{flag} {path}: {base} is not writable ({err.strerror or err}); pass {flag} with a "
                         f"writable directory") from None


def check_writable_file(path: Path, flag: str) -> None:
    """Before anything is measured: a file can be written at ``path`` (its directory exists or can be
    created, and ``path`` is not a directory); else a one-line UsageError naming ``flag``."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{flag} {path} is a directory; pass a file path (e.g. {path / 'baseline.json'})")
    if path.exists() and not os.access(path, os.W_OK):
        raise UsageError(f"{flag} {path}: the file is not writable; pass {flag} with a writable path")
    check_writable_dir(path.parent, flag, shown=path)


def write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def append_line(path: Path, obj: dict) -> None:
    """Append one object as one JSON line and flush it to disk at once."""
    with open(path, "a") as f:
        f.write(json.dumps(obj, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def append_cell(run_dir: Path, cell: dict) -> None:
    append_line(Path(run_dir) / "cells.jsonl", cell)


class ResultsError(ValueError):
    """A run directory's file that cannot be read (not JSON, not the expected shape); one line, with the path."""


_WARNED: set[str] = set()  # files whose cut last line was already reported by this process


def read_lines(path: Path) -> list[dict]:
    """The JSON objects of a .jsonl file, one per non-empty line; [] when the file does not exist.

    A last line that is not valid JSON was cut off by a crash while it was written: it is skipped with one
    warning. A bad line anywhere else is a ResultsError."""
    if not path.exists():
        return []
    lines = [(n, line) for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
             if line.strip()]
    out = []
    for i, (number, line) in enumerate(lines):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as err:
            if i < len(lines) - 1:
                raise ResultsError(f"{path}:{number} is not valid JSON ({err.msg}), and it is not the last "
                                   f"line (a cut last line is skipped; a damaged line elsewhere is not); "
                                   f"repair or delete that line (a deleted cell line runs again with --resume)"
                                   ) from None
            if str(path) not in _WARNED:
                _WARNED.add(str(path))
                print(f"run_bench.py: warning: {path}:{number}: the last line is cut off (the run was "
                      f"killed while writing it); skipped", file=sys.stderr)
    return out


def drop_cut_tail(path: Path) -> bool:
    """Remove a last line cut off by a crash (no final newline, not JSON), so that lines appended later
    stay whole; True when one was removed."""
    path = Path(path)
    if not path.exists():
        return False
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return False
    start = data.rfind(b"\n") + 1
    try:
        json.loads(data[start:])
        with open(path, "ab") as f:  # a whole object that only lacks its newline
            f.write(b"\n")
        return False
    except ValueError:
        with open(path, "r+b") as f:
            f.truncate(start)
        if str(path) not in _WARNED:
            _WARNED.add(str(path))
            number = data.count(b"\n") + 1
            print(f"run_bench.py: warning: {path}:{number}: the last line is cut off (the run was killed while "
                  f"writing it); removed, and that cell runs again", file=sys.stderr)
        return True


def read_results(run_dir: Path) -> list[CellResult]:
    """cells.jsonl as CellResults, in file order; [] when it does not exist."""
    path = Path(run_dir) / "cells.jsonl"
    out = []
    for number, obj in enumerate(read_lines(path), 1):
        try:
            out.append(CellResult.from_json(obj))
        except ValueError as err:
            raise ResultsError(f"{path}: line {number}: {err}") from None
    return out


read_cells = read_results  # the older name


def read_probe(run_dir: Path) -> ProbeSeries:
    """probe.jsonl as the probe's figures per repeat (empty when the file does not exist)."""
    path = Path(run_dir) / "probe.jsonl"
    try:
        return ProbeSeries.from_lines([ProbeLine.from_json(p) for p in read_lines(path)])
    except (KeyError, TypeError, ValueError) as err:
        raise ResultsError(f"{path} lacks {err} in a line; it is not a probe.jsonl of this harness") from None


def read_env(run_dir: Path) -> Environment:
    """env.json as an Environment (upgraded on read); an empty Environment when it does not exist."""
    path = Path(run_dir) / "env.json"
    if not path.exists():
        return Environment()
    try:
        env = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ResultsError(f"{path} is not valid JSON (line {err.lineno}: {err.msg})") from None
    if not isinstance(env, dict):
        raise ResultsError(f"{path} is not a JSON object")
    return Environment.from_json(env)

"""A run's directory under results/: env.json (results.environment), cells.jsonl (appended per
cell), probe.jsonl, summary.csv, report.md. Its JSON files are versioned, read (older versions
upgraded on read) and written through harness.results.fileformat; `read_lines`, `append_line` and
`write_json` are the unversioned forms for files that have no format yet."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from harness import safewrite
from harness.errors import UsageError
from harness.measure.jsonrecord import check_shape
from harness.results import fileformat
from harness.results.cellresult import CELLS, CellResult, duplicated_visit
from harness.results.environment import Environment
from harness.results.fileformat import ResultsError, drop_cut_tail
from harness.results.probeline import PROBE, ProbeLine, ProbeSeries

# defined in harness.results.fileformat: the readers' error, and the repair of a cut last line before appending
__all__ = ["ResultsError", "drop_cut_tail"]


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
    """Before anything is measured: ``path`` is a writable directory or can be created as one
    (nothing is created); else a one-line UsageError naming ``flag`` (and ``shown``, default
    ``path``)."""
    base = _nearest_existing(path)
    path = shown if shown is not None else path
    if not base.is_dir():
        raise UsageError(f"{flag} {path}: {base} is a file, not a directory; pass a directory")
    probe = base / f".write-test-{os.getpid()}"
    try:  # a real write (access() says yes to root on a read-only or pseudo file system)
        safewrite.write_text(probe, "")
        probe.unlink()
    except OSError as err:
        raise UsageError(f"{flag} {path}: {base} is not writable ({err.strerror or err}); pass {flag} with a "
                         f"writable directory") from None


def check_writable_file(path: Path, flag: str) -> None:
    """Before anything is measured: a file can be written at ``path`` (its directory exists or can
    be created, and ``path`` is not a directory); else a one-line UsageError naming ``flag``."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{flag} {path} is a directory; pass a file path (e.g. {path / 'baseline.json'})")
    if path.exists() and not os.access(path, os.W_OK):
        raise UsageError(f"{flag} {path}: the file is not writable; pass {flag} with a writable path")
    check_writable_dir(path.parent, flag, shown=path)


def write_json(path: Path, obj: dict) -> None:
    """A JSON file of no versioned format (a command's own notes), keys sorted
    (harness.safewrite)."""
    safewrite.write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def append_line(path: Path, obj: dict) -> None:
    """Append one object as one JSON line and flush it to disk at once (no format: a command's own
    lines; the run directory's files go through append_cell, append_probe); never through a
    symbolic link."""
    with safewrite.open_append(path) as f:
        f.write(json.dumps(obj, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def append_cell(run_dir: Path, cell: dict) -> None:
    """One line of cells.jsonl (a CellResult's JSON), of the current version, flushed to disk at
    once."""
    fileformat.append_line(Path(run_dir) / "cells.jsonl", cell, CELLS)


def append_probe(run_dir: Path, line: ProbeLine) -> None:
    """One repeat's line of probe.jsonl, of the current version, flushed to disk at once."""
    fileformat.append_line(Path(run_dir) / "probe.jsonl", line.to_json(), PROBE)


def read_lines(path: Path) -> list[dict]:
    """The JSON objects of a .jsonl file, one per non-empty line, versions not looked at; [] when
    the file does not exist. A cut last line is skipped with one warning; a bad line elsewhere is a
    ResultsError (harness.results.fileformat.json_lines)."""
    return [obj for _, obj in fileformat.json_lines(path)]


def read_results(run_dir: Path) -> list[CellResult]:
    """cells.jsonl as CellResults, in file order, each line upgraded on read from the version it
    was written in; [] when it does not exist. A damaged line (a value of the wrong type or below
    zero included) or one of a newer version is a ResultsError naming the line and the key."""
    path = Path(run_dir) / "cells.jsonl"
    out = []
    for where, obj in fileformat.json_lines(path):
        _check_cell_line(obj, where)
        try:
            out.append(CellResult.from_json(obj, where))
        except ResultsError:
            raise
        except ValueError as err:  # not a cell line at all: the file's damage, named with its place
            raise ResultsError(f"{err}; the line is damaged: remove it (--resume runs its cell again)") from None
    return out


def _check_cell_line(obj, where: str) -> None:
    """A line's version (a newer one is named first), then the types and signs of its keys."""
    if not isinstance(obj, dict):
        return  # CellResult.from_json names it
    CELLS.version_of(obj, where)
    try:
        check_shape(CellResult, obj)
    except ValueError as err:
        raise ResultsError(f"{where}: {err}: not the shape of {CELLS.name} this harness writes; repair or "
                           f"remove the line (--resume runs its cell again)") from None


def read_visits(run_dir: Path) -> list[CellResult]:
    """cells.jsonl as read_results reads it, each visit (a cell and a repeat) once: a visit written
    twice (two writers of one run directory) is a ResultsError naming it, for the readers that
    count visits."""
    results = read_results(run_dir)
    twice = duplicated_visit(results)
    if twice is not None:
        raise ResultsError(f"{Path(run_dir) / 'cells.jsonl'}: the visit of cell {twice.cell}, repeat "
                           f"{twice.repeat} is written twice (two runs wrote to this directory at once?); keep "
                           f"one of its lines and remove the other")
    return results


read_cells = read_results  # the older name


def read_probe(run_dir: Path) -> ProbeSeries:
    """probe.jsonl as the probe's figures per repeat (empty when the file does not exist)."""
    return ProbeSeries.from_lines(fileformat.read_lines(Path(run_dir) / "probe.jsonl", PROBE, ProbeLine.from_json))


def read_env(run_dir: Path) -> Environment:
    """env.json as an Environment (upgraded on read); an empty Environment when it does not
    exist."""
    return Environment.read(run_dir)

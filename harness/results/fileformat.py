"""The versioned files of a run directory: one helper reads and writes every JSON file a run
leaves.

Each kind of file is a `FileFormat`, declared beside the record that owns its JSON, with the
version this harness writes and its written history (what each version changed): cells.jsonl
(harness.results.cellresult), env.json (environment), probe.jsonl (probeline), loader.jsonl and
decode.jsonl (harness.loaderonly.rows), effects.jsonl (effects) and predictions.jsonl (checkcases).
docs/results-format.md gives every history.

The version is written under VERSION_KEY ("schema"): in every line of a .jsonl file (a file
appended to by two harness versions, a resumed run, holds lines of both) and at the top level of a
.json file.

Reading, the one rule (asv's: results are upgraded on read, never rewritten by reading):

- an object without the key is version 1 (written before the key existed);
- an older version is brought to the current one in memory by the kind's chain of upgrade steps,
  one function per step from version v to v + 1 (`FileFormat.upgrades`), after the kind's record is
  built;
- a newer version, or a version that is no number, is a ResultsError: one line naming the file and
  the remedy (this harness cannot know what the newer keys mean);
- a damaged file (not JSON, not an object) is a ResultsError with the path; in a .jsonl file a last
  line cut off by a crash is skipped with one warning (`json_lines`);
- a line (or a .json file) over MAX_LINE_BYTES, a file over MAX_FILE_BYTES, a number that is not
  finite or beyond 2^63, or nesting deeper than MAX_DEPTH is a ResultsError naming the file, the
  line and the key.

Writing: `write_json` (replaced atomically: a temporary file, then os.replace), `write_lines` (a
whole .jsonl file, atomically too), `append_line` (one line, flushed to disk at once: cells.jsonl
after each cell). Each writes the format's current version (`FileFormat.stamped`), through
harness.safewrite: never through a symbolic link planted at the file's name (one line, exit 2).
"""
from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from harness import safewrite

VERSION_KEY = "schema"
MAX_LINE_BYTES = 16 * 2**20  # one record: a cells.jsonl line holds ~200 bytes per rank and step (80 000 of them)
MAX_FILE_BYTES = 512 * 2**20  # one file read back (thousands of visits)
MAX_DEPTH = 32  # nesting of a record's objects and lists (the harness writes 5 levels)
MAX_INT = 2**63 - 1  # what a 64-bit counter holds
UNVERSIONED = 1  # the version of an object written before its format had the key
REMEDY = ("read it with the dlbench that wrote it (env.json's git commit) or update this checkout "
          "(git pull; pip install -e .)")

T = TypeVar("T")


class ResultsError(ValueError):
    """A run directory's file that cannot be read (not JSON, not the expected shape, a newer
    version); one line, with the path."""


def unchanged(thing: T) -> T:
    """An upgrade step for a version whose change a reader of the next one needs nothing done
    for."""
    return thing


@dataclass(frozen=True)
class FileFormat:
    """One kind of file: its name, the version this harness writes, what each version changed, and
    the upgrade steps. `upgrades[v]` takes what the kind's reader built from an object of version v
    (its record, or the dict where the kind has none) and returns it as version v + 1 reads; every
    v below `version` has one (a step that changes nothing is written out as `unchanged`, so that
    the chain says so)."""

    name: str
    version: int
    history: Mapping[int, str]
    upgrades: Mapping[int, Callable[[Any], Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if sorted(self.history) != list(range(UNVERSIONED, self.version + 1)):
            raise ValueError(f"{self.name}: the history must say what each version 1..{self.version} is")
        if sorted(self.upgrades) != list(range(UNVERSIONED, self.version)):
            raise ValueError(f"{self.name}: one upgrade step per version below {self.version}")

    def version_of(self, obj: dict, where: str) -> int:
        """The version an object was written in; a ResultsError for a newer one or one that is no
        number."""
        found = obj.get(VERSION_KEY, UNVERSIONED)
        if not isinstance(found, int) or isinstance(found, bool) or found < UNVERSIONED:
            raise ResultsError(f"{where}: {VERSION_KEY} {found!r} is not a {self.name} version (1 to "
                               f"{self.version}); repair the file or write it again")
        if found > self.version:
            raise ResultsError(f"{where}: {self.name} version {found}; this harness reads up to "
                               f"{self.version}: {REMEDY}")
        return found

    def upgrade(self, thing: T, found: int) -> T:
        """What was read at version `found`, through each upgrade step to the current version."""
        for version in range(found, self.version):
            thing = self.upgrades[version](thing)
        return thing

    def load(self, obj: Any, where: str, build: Callable[[dict], T] = unchanged) -> T:
        """One object of this format as the current version reads it: its version checked, `build`
        (the kind's from_json) applied, then the upgrade steps. A shape `build` refuses
        (ValueError, KeyError, TypeError) is a ResultsError naming `where`."""
        if not isinstance(obj, dict):
            raise ResultsError(f"{where} is not a JSON object, not the shape of {self.name} this harness "
                               f"writes; repair or remove it")
        found = self.version_of(obj, where)
        try:
            thing = build(obj)
        except ResultsError:
            raise
        except (KeyError, TypeError, ValueError) as err:
            detail = f"lacks {err}" if isinstance(err, KeyError) else str(err)
            raise ResultsError(f"{where}: {detail}: not the shape of {self.name} this harness writes; "
                               f"repair or remove it") from None
        return self.upgrade(thing, found)

    def stamped(self, obj: dict) -> dict:
        """The object as written: the current version under VERSION_KEY. An object that carries
        another version is refused (ValueError: a record read from an older file is never written
        back as current)."""
        if obj.get(VERSION_KEY, self.version) != self.version:
            raise ValueError(f"{self.name}: an object of version {obj[VERSION_KEY]} is written as version "
                             f"{self.version}; build it in this version instead")
        return {**obj, VERSION_KEY: self.version}


# --- reading ----------------------------------------------------------------------------------------------

_WARNED: set[str] = set()  # files whose cut last line was already reported by this process


def _too_big(where: str, what: str, limit: int) -> ResultsError:
    return ResultsError(f"{where}: {what} over the {limit // 2**20} MB a record of dlbench may take (damaged "
                        f"or not written by dlbench); repair or remove it")


def _numbered_lines(path: Path) -> list[tuple[int, str]]:
    """(number, text) of each line of a file, each read with a bound: a file over MAX_FILE_BYTES or
    a line over MAX_LINE_BYTES is a ResultsError, found before it is held in memory."""
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise _too_big(str(path), f"the file ({size / 2**20:.0f} MB) is", MAX_FILE_BYTES)
    out = []
    with open(path, "rb") as f:
        for number in range(1, size + 2):
            raw = f.readline(MAX_LINE_BYTES + 2).rstrip(b"\r\n")
            if len(raw) > MAX_LINE_BYTES:
                raise _too_big(f"{path}:{number}", "the line is", MAX_LINE_BYTES)
            if not raw and f.tell() >= size:
                break
            out.append((number, raw.decode(errors="replace")))
    return out


def parse(text: str, where: str) -> Any:
    """One JSON record as read back: a JSONDecodeError where it is no JSON; a ResultsError naming
    `where` and the key for nesting deeper than MAX_DEPTH, a number that is not finite (NaN,
    Infinity, 1e400) or an integer beyond MAX_INT."""
    try:
        obj = json.loads(text)
    except RecursionError:
        raise ResultsError(f"{where}: nested deeper than {MAX_DEPTH} levels, which no record of dlbench is; "
                           f"repair or remove it") from None
    except json.JSONDecodeError:
        raise
    except ValueError as err:  # an integer of more digits than Python converts
        raise ResultsError(f"{where}: {err}; repair or remove it") from None
    _check_values(obj, where)
    return obj


def _check_values(obj: Any, where: str) -> None:
    """Every number finite and within MAX_INT, nesting within MAX_DEPTH (walked without
    recursion)."""
    todo = [(obj, "", 0)]
    while todo:
        value, key, depth = todo.pop()
        if depth > MAX_DEPTH:
            raise ResultsError(f"{where}: {key or 'the record'} is nested deeper than {MAX_DEPTH} levels, "
                               f"which no record of dlbench is; repair or remove it")
        if isinstance(value, dict):
            todo += [(v, f"{key}.{k}" if key else str(k), depth + 1) for k, v in value.items()]
        elif isinstance(value, list):
            todo += [(v, f"{key}[{i}]", depth + 1) for i, v in enumerate(value)]
        elif isinstance(value, float) and not math.isfinite(value) or isinstance(value, int) \
                and not isinstance(value, bool) and abs(value) > MAX_INT:
            raise ResultsError(f"{where}: {key or 'the record'} = {str(value)[:40]} is not a finite number "
                               f"within 2^63, which dlbench never writes; repair that value")


def json_lines(path: Path) -> list[tuple[str, Any]]:
    """(where, object) of each non-empty line of a .jsonl file, `where` being "path:line"; [] when
    the file does not exist. Versions are not looked at (`read_lines` does).

    A last line that is not valid JSON was cut off by a crash while it was written: it is skipped
    with one warning. A bad line anywhere else is a ResultsError."""
    path = Path(path)
    if not path.exists():
        return []
    lines = [(n, line) for n, line in _numbered_lines(path) if line.strip()]
    out = []
    for i, (number, line) in enumerate(lines):
        try:
            out.append((f"{path}:{number}", parse(line, f"{path}:{number}")))
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
    """Remove a last line cut off by a crash (no final newline, not JSON), so that lines appended
    later stay whole; True when one was removed."""
    path = Path(path)
    if not path.exists():
        return False
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return False
    start = data.rfind(b"\n") + 1
    try:
        json.loads(data[start:])
        with safewrite.open_append(path, binary=True) as f:  # a whole object that only lacks its newline
            f.write(b"\n")
        return False
    except ValueError:
        with open(safewrite.checked(path), "r+b") as f:
            f.truncate(start)
        if str(path) not in _WARNED:
            _WARNED.add(str(path))
            number = data.count(b"\n") + 1
            print(f"run_bench.py: warning: {path}:{number}: the last line is cut off (the run was killed while "
                  f"writing it); removed, and that cell runs again", file=sys.stderr)
        return True


def read_lines(path: Path, fmt: FileFormat, build: Callable[[dict], T] = unchanged) -> list[T]:
    """Every line of a .jsonl file of format `fmt` as the current version reads it
    (`FileFormat.load`, each line on its own version), in file order; [] when the file does not
    exist."""
    return [fmt.load(obj, where, build) for where, obj in json_lines(path)]


def read_json(path: Path, fmt: FileFormat, build: Callable[[dict], T] = unchanged) -> T | None:
    """A .json file of format `fmt` as the current version reads it; None when it does not
    exist."""
    path = Path(path)
    if not path.exists():
        return None
    size = path.stat().st_size
    if size > MAX_LINE_BYTES:
        raise _too_big(str(path), f"the file ({size / 2**20:.0f} MB) is", MAX_LINE_BYTES)
    try:
        obj = parse(path.read_text(errors="replace"), str(path))
    except json.JSONDecodeError as err:
        raise ResultsError(f"{path} is not valid JSON (line {err.lineno}: {err.msg})") from None
    if not isinstance(obj, dict):
        raise ResultsError(f"{path} is not a JSON object")
    return fmt.load(obj, str(path), build)


# --- writing ----------------------------------------------------------------------------------------------

def _replace(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, then rename it over `path`: a reader sees
    the old file or the new one, never half of one (the ranks of a resumed torchrun run read
    env.json meanwhile); harness.safewrite.write_text, never through a symbolic link."""
    safewrite.write_text(path, text)


def write_json(path: Path, obj: dict, fmt: FileFormat, indent: int | None = 2) -> None:
    """A .json file, keys sorted, of the current version, replaced atomically."""
    _replace(path, json.dumps(fmt.stamped(obj), indent=indent, sort_keys=True) + "\n")


def write_lines(path: Path, objs: Iterable[dict], fmt: FileFormat) -> None:
    """A whole .jsonl file (one object a line, keys sorted, each of the current version), replaced
    atomically."""
    _replace(path, "".join(json.dumps(fmt.stamped(o), sort_keys=True) + "\n" for o in objs))


def append_line(path: Path, obj: dict, fmt: FileFormat) -> None:
    """Append one object of the current version as one JSON line and flush it to disk at once."""
    with safewrite.open_append(path) as f:
        f.write(json.dumps(fmt.stamped(obj), sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())

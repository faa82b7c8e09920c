"""The storage units of the materialisations the cells of this process read: tar shards, litdata
chunks, parquet row groups, as contiguous index ranges in order (a storage's
``shard_ranges(path)``, read from its sidecars; None for a storage without units of its own).

harness.train.pipeline.build notes them for the cell it builds; the cell's order figures
(harness.results.cellorder) read them back when rank 0 writes the cell's line, in the same process
(rank 0 builds its own pipeline of every cell it runs). ``shards(path)`` is not called here: it
also tells the readers opened on the path that a shard-streaming sampler reads them (their access
hint), which only such a sampler may do.
"""
from __future__ import annotations

from pathlib import Path

_NOTED: dict[str, list[range] | None] = {}  # cell id -> the units of the materialisation it read


def units_of(storage, path: Path) -> list[range] | None:
    """The storage's units on `path`, or None when it has none (or cannot say)."""
    ranges = getattr(storage, "shard_ranges", None)  # the built-in storages' TrackedStorage; a plugin may lack it
    if ranges is None:
        return None
    try:
        found = ranges(path)
    except (OSError, ValueError, KeyError):  # a sidecar a plugin's materialisation lacks: no units known
        return None
    return None if found is None else list(found)


def note(cell_id: str, storage, path: Path) -> None:
    _NOTED[cell_id] = units_of(storage, path)


def noted(cell_id: str) -> tuple[bool, list[range] | None]:
    """(whether this process built the cell's pipeline, the units it noted)."""
    return cell_id in _NOTED, _NOTED.get(cell_id)

"""The lines of a --loader-only run directory: loader.jsonl (one LoaderRow per read path, fields
and cache state) and decode.jsonl (one DecodeRow per source-size bin and decoder), each a record
that owns its JSON. Each line carries its file's format version (LOADER_VERSION, DECODE_VERSION),
read and written through harness.results.fileformat (LOADER, DECODE)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from harness.results import fileformat
from harness.results.fileformat import FileFormat

# loader.jsonl's format version (written under "schema" in each line), and what each version is:
LOADER_VERSION = 1
LOADER_HISTORY = {
    1: "every loader.jsonl so far: one row per read path (a storage or a reference), fields and cache state: "
       "`batch_size`, `samples`, `seconds`, `samples_per_s`, `mb_per_s`, `vs_ram`, and on cold rows "
       "`cold_verified`; the `schema` key added within version 1 (a line without it is version 1)",
}
# decode.jsonl's format version, and what each version is:
DECODE_VERSION = 1
DECODE_HISTORY = {
    1: "every decode.jsonl so far: one row per source-size bin and decoder: `source_long_side`, `images`, "
       "`decoder`, `image_size`, `ms_per_image`; the `schema` key added within version 1",
}


@dataclass
class LoaderRow:
    storage: str  # a storage's label, or a reference (ref-ram-gather, ref-article-hdf5)
    fields: str  # the workload whose fields are read: features or pixels
    cache_state: str  # warm or cold
    batch_size: int
    samples: int = 0
    seconds: float = 0.0
    samples_per_s: float | None = None
    mb_per_s: float | None = None
    vs_ram: float | None = None  # samples/s / the RAM gather's, same fields and cache state
    cold_verified: bool | None = None  # cold rows only: the page cache was verified dropped

    def to_json(self) -> dict:
        out = dataclasses.asdict(self)
        if self.cold_verified is None:
            del out["cold_verified"]
        return LOADER.stamped(out)

    @classmethod
    def from_json(cls, obj: dict) -> LoaderRow:
        return cls(**{f.name: obj[f.name] for f in dataclasses.fields(cls) if f.name in obj})


@dataclass
class DecodeRow:
    source_long_side: str  # the bin of the source image's longer side, px ("256-511", ">= 1024")
    images: int
    decoder: str
    image_size: int
    ms_per_image: float

    def to_json(self) -> dict:
        return DECODE.stamped(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, obj: dict) -> DecodeRow:
        return cls(**{f.name: obj[f.name] for f in dataclasses.fields(cls)})


LOADER = FileFormat("loader.jsonl", LOADER_VERSION, LOADER_HISTORY)
DECODE = FileFormat("decode.jsonl", DECODE_VERSION, DECODE_HISTORY)
FORMATS = {LoaderRow: LOADER, DecodeRow: DECODE}


def write_rows(path: Path, rows: list) -> None:
    """loader.jsonl or decode.jsonl (by the rows' kind), replaced atomically."""
    kinds = {type(r) for r in rows}
    if len(kinds) > 1:
        raise ValueError(f"{path}: rows of one kind a file, not {sorted(k.__name__ for k in kinds)}")
    fmt = FORMATS[kinds.pop()] if kinds else LOADER
    fileformat.write_lines(path, [r.to_json() for r in rows], fmt)


def read_rows(path: Path, kind: type) -> list:
    """The rows of a loader.jsonl (kind LoaderRow) or decode.jsonl (DecodeRow), older versions
    upgraded on read; a damaged or newer line is a harness.results.fileformat.ResultsError."""
    return fileformat.read_lines(path, FORMATS[kind], kind.from_json)

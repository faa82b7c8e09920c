"""The lines of a --loader-only run directory: loader.jsonl (one LoaderRow per read path, fields and cache
state) and decode.jsonl (one DecodeRow per source-size bin and decoder), each a record that owns its JSON."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path


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
        return out

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
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, obj: dict) -> DecodeRow:
        return cls(**{f.name: obj[f.name] for f in dataclasses.fields(cls)})


def write_rows(path: Path, rows: list) -> None:
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r.to_json()) + "\n")


def read_rows(path: Path, kind: type) -> list:
    return [kind.from_json(json.loads(line)) for line in Path(path).read_text().splitlines() if line.strip()]

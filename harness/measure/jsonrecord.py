"""`JsonRecord`: the base every record with a JSON form shares: a rank's record and its parts
(harness.measure.rankrecord) and a cells.jsonl line with its parts (harness.results.cellresult, cellparts).

It sits in the lowest wing, measure, because the records built there (RankRecord, in the ranks) and the
records of the results wing both derive from it, and a wing imports only itself and the wings below it.
It imports no other harness module. The files records are written to and read from are versioned by
harness.results.fileformat.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

_KEYS: dict[type, tuple[str, ...]] = {}


def plain(value: Any) -> Any:
    """A value as JSON-ready data: records through their to_json(), lists and dicts element by element."""
    if isinstance(value, JsonRecord):
        return value.to_json()
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


@dataclass
class JsonRecord:
    """A dataclass with a JSON object form. Its keys are its fields, less those in LOCAL (never written);
    keys this version does not know are kept in `extra` and written back unchanged. A record read with
    `from_json` writes back exactly the known keys it read (a key an older file lacks stays absent, a null
    stays null), so a line round-trips; one built in code writes every field, those in OPTIONAL only when
    not None. NESTED names the fields that hold another record (or a list of them)."""

    LOCAL: ClassVar[tuple[str, ...]] = ()
    OPTIONAL: ClassVar[tuple[str, ...]] = ()
    NESTED: ClassVar[dict[str, type[JsonRecord]]] = {}

    extra: dict[str, Any] = field(default_factory=dict, kw_only=True)  # keys this version does not know
    _keys: frozenset[str] | None = field(default=None, kw_only=True, repr=False, compare=False)  # known keys read

    @classmethod
    def json_keys(cls) -> tuple[str, ...]:
        """The keys of the JSON form that are fields, in field order."""
        if cls not in _KEYS:
            _KEYS[cls] = tuple(f.name for f in fields(cls)
                               if f.name not in ("extra", "_keys") and f.name not in cls.LOCAL)
        return _KEYS[cls]

    @classmethod
    def from_json(cls, obj: dict | None):
        obj = {} if obj is None else obj
        if not isinstance(obj, dict):
            raise ValueError(f"{cls.__name__}: expected a JSON object, got {str(obj)[:80]}")
        keys = cls.json_keys()
        known = {k: cls.decode(k, obj[k]) for k in keys if k in obj}
        return cls(**known, extra={k: v for k, v in obj.items() if k not in keys}, _keys=frozenset(known))

    @classmethod
    def decode(cls, key: str, value: Any) -> Any:
        """A known key's JSON value as the field holds it."""
        kind = cls.NESTED.get(key)
        if kind is None or value is None:
            return value
        if isinstance(value, list):
            return [kind.from_json(v) for v in value]
        return kind.from_json(value)

    def writes(self, key: str) -> bool:
        if self._keys is not None:
            return key in self._keys
        return key not in self.OPTIONAL or getattr(self, key) is not None

    def to_json(self) -> dict:
        out = {k: plain(getattr(self, k)) for k in self.json_keys() if self.writes(k)}
        out.update(self.extra)
        return out

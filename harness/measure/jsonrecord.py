"""`JsonRecord`: the base every record with a JSON form shares: a rank's record and its parts
(harness.measure.rankrecord) and a cells.jsonl line with its parts (harness.results.cellresult,
cellparts).

It sits in the lowest wing, measure, because the records built there (RankRecord, in the ranks) and
the records of the results wing both derive from it, and a wing imports only itself and the wings
below it. It imports no other harness module. The files records are written to and read from are
versioned by harness.results.fileformat.
"""
from __future__ import annotations

import types
import typing
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

_KEYS: dict[type, tuple[str, ...]] = {}
_HINTS: dict[type, dict[str, Any]] = {}


def plain(value: Any) -> Any:
    """A value as JSON-ready data: records through their to_json(), lists and dicts element by
    element."""
    if isinstance(value, JsonRecord):
        return value.to_json()
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


@dataclass
class JsonRecord:
    """A dataclass with a JSON object form. Its keys are its fields, less those in LOCAL (never
    written); keys this version does not know are kept in `extra` and written back unchanged. A
    record read with `from_json` writes back exactly the known keys it read (a key an older file
    lacks stays absent, a null stays null), so a line round-trips; one built in code writes every
    field, those in OPTIONAL only when not None. NESTED names the fields that hold another record
    (or a list of them)."""

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


# --- the shape of a record read back -------------------------------------------------------------------------

def check_shape(cls: type, obj: Any, prefix: str = "", renamed: dict[str, str] | None = None) -> None:
    """A JSON object read back checked against the fields of the dataclass `cls` (a JsonRecord or
    any other): each known key's value of its field's type (an int where a float is; a nested
    record checked in turn) and, for a field named in the class's NON_NEGATIVE, not below zero. A
    ValueError names the key (its path from `prefix`) and the value. `renamed` maps a JSON key to
    its field where they differ. Keys no field has are left alone (they are kept as `extra`)."""
    if not isinstance(obj, dict):
        raise ValueError(f"{prefix or 'the record'} = {_shown(obj)} is not a JSON object")
    hints = _hints(cls)
    non_negative = getattr(cls, "NON_NEGATIVE", ())
    for key, value in obj.items():
        name = (renamed or {}).get(key, key)
        if name not in hints or name in ("extra", "_keys"):
            continue
        where = f"{prefix}.{key}" if prefix else key
        _check_value(value, hints[name], where)
        if name in non_negative and _is_number(value) and value < 0:
            raise ValueError(f"{where} = {_shown(value)} is below zero, which it cannot be")


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        hints = typing.get_type_hints(cls)
        _HINTS[cls] = {f.name: hints[f.name] for f in fields(cls)}
    return _HINTS[cls]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_value(value: Any, hint: Any, where: str) -> None:
    """`value` of the type `hint` (None, bool, int, float, str, list[X], dict[K, V], a record, a
    union)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:
            return _check_value(value, options[0], where)
        if any(_fits(value, a) for a in options):
            return
        raise ValueError(f"{where} = {_shown(value)} is not {_named(hint)}")
    if isinstance(hint, type) and hasattr(hint, "__dataclass_fields__"):
        return check_shape(hint, value, where)
    if not _fits(value, origin or hint):
        raise ValueError(f"{where} = {_shown(value)} is not {_named(hint)}")
    if origin is list and args:
        for i, item in enumerate(value):
            _check_value(item, args[0], f"{where}[{i}]")
    elif origin is dict and len(args) == 2:
        for key, item in value.items():
            _check_value(item, args[1], f"{where}.{key}")


def _fits(value: Any, kind: Any) -> bool:
    """The outer type alone: a float field takes an int, an int or a float field no bool."""
    if kind is float:
        return _is_number(value)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind in (list, tuple, frozenset):
        return isinstance(value, list)
    if kind is dict or (isinstance(kind, type) and hasattr(kind, "__dataclass_fields__")):
        return isinstance(value, dict)
    return not isinstance(kind, type) or isinstance(value, kind)


def _named(hint: Any) -> str:
    """A type as the error line says it."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_named(a) for a in args)
    names = {float: "a number", int: "a whole number", str: "a string", bool: "true or false", dict: "an object",
             list: "a list", type(None): "null"}
    base = origin or hint
    return names.get(base, "an object" if isinstance(base, type) else str(hint))

"""Registry of strategies: axis -> name -> factory.

A strategy module registers itself with ``@register("storage", "hdf5")``. Built-in strategies and those of
installed distributions (entry-point group ``dlbench.strategies``, each entry point naming a module that
registers on import) are loaded by :func:`load_builtins`; others by ``load_plugin("package.module")``.
:func:`validate` checks a strategy's parameters by constructing it once, so a scenario fails at load time.
"""
from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from strategies.protocols import PROTOCOLS, missing

AXES = ("storage", "cache", "batching", "sampler", "precision", "preprocess", "loader")
# The strategy an axis gets when a scenario omits it. The last three axes came later: a cell whose strategy
# on one of them is this default leaves the axis out of its id, so ids of older runs and baselines still match.
DEFAULTS = {"storage": "raw", "cache": "none", "batching": "fixed", "sampler": "default",
            "precision": "amp", "preprocess": "host", "loader": "workers"}
ADDED_AXES = ("precision", "preprocess", "loader")
ENTRY_POINT_GROUP = "dlbench.strategies"

_REGISTRY: dict[str, dict[str, Callable[..., Any]]] = {axis: {} for axis in AXES}

_BUILTINS = (
    "strategies.storage.raw",
    "strategies.storage.mmap",
    "strategies.storage.hdf5",
    "strategies.storage.webdataset",
    "strategies.storage.parquet",
    "strategies.storage.lmdb",
    "strategies.sampler.shards",  # streams the shards of the three storages above
    "strategies.cache.none",
    "strategies.cache.lru",
    "strategies.batching.fixed",
    "strategies.batching.dynamic",
    "strategies.batching.adaptive",
    "strategies.sampler.default",
    "strategies.sampler.balanced",
    "strategies.precision.fp32",
    "strategies.precision.amp",
    "strategies.precision.bf16",
    "strategies.preprocess.host",
    "strategies.preprocess.device",
    "strategies.loader.workers",
    "strategies.loader.threads",
)
_scanned_path: tuple[str, ...] | None = None  # sys.path at the last entry-point scan


class UnknownStrategy(KeyError):
    """Raised when an axis or strategy name is not registered."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it plain
        return str(self.args[0])


class InvalidParams(ValueError):
    """A strategy's parameters are wrong (unknown key or bad value); the message is one line."""


class PluginError(ImportError):
    """An entry point of group ``dlbench.strategies`` failed to import; the message is one line."""


def register(axis: str, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    if axis not in _REGISTRY:
        raise UnknownStrategy(f"unknown axis {axis!r}; axes are {', '.join(AXES)}")

    def deco(factory: Callable[..., Any]) -> Callable[..., Any]:
        _REGISTRY[axis][name] = factory
        return factory

    return deco


def load_builtins() -> None:
    for module in _BUILTINS:
        importlib.import_module(module)
    load_entry_points()


def load_entry_points() -> None:
    """Import the module of every ``dlbench.strategies`` entry point; rescans when sys.path changed."""
    global _scanned_path
    path = tuple(sys.path)
    if path == _scanned_path:
        return
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            importlib.import_module(ep.module)
        except Exception as err:  # noqa: BLE001 - any failure of third-party code becomes one line
            dist = ep.dist.name if ep.dist is not None else "unknown distribution"
            reason = " ".join(f"{type(err).__name__}: {err}".split())
            raise PluginError(f"entry point {ep.name} = {ep.value} of {dist} (group {ENTRY_POINT_GROUP}) "
                              f"failed to import: {reason}") from None
    _scanned_path = path


def load_plugin(module: str) -> None:
    importlib.import_module(module)


def names(axis: str) -> list[str]:
    load_builtins()
    return sorted(_REGISTRY[axis])


def get(axis: str, name: str) -> Callable[..., Any]:
    load_builtins()
    if axis not in _REGISTRY:
        raise UnknownStrategy(f"unknown axis {axis!r}; axes are {', '.join(AXES)}")
    try:
        return _REGISTRY[axis][name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY[axis])) or "none"
        raise UnknownStrategy(f"unknown {axis} strategy {name!r}; known: {known}") from None


def create(axis: str, name: str, **params: Any) -> Any:
    """Instantiate a strategy with its parameters."""
    return get(axis, name)(**params)


def accepted(factory: Callable[..., Any]) -> list[str] | None:
    """The keyword parameters a factory takes, or None when it takes any (``**kwargs``)."""
    keys = []
    for p in inspect.signature(factory).parameters.values():
        if p.kind is p.VAR_KEYWORD:
            return None
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            keys.append(p.name)
    return sorted(keys)


def validate(axis: str, name: str, params: dict[str, Any]) -> None:
    """Construct the strategy once; a wrong key, a bad value or a missing protocol member is InvalidParams.

    Messages are one line, e.g. ``cache strategy 'lru' has no parameter 'capacity_MB'; accepted:
    capacity_mb, level, scope``.
    """
    factory = get(axis, name)
    keys = accepted(factory)
    if keys is not None:
        for key in params:
            if key not in keys:
                raise InvalidParams(f"{axis} strategy {name!r} has no parameter {key!r}; "
                                    f"accepted: {', '.join(keys) or 'none'}")
    try:
        strategy = factory(**params)
    except (ValueError, TypeError) as err:
        reason = " ".join(str(err).split())
        raise InvalidParams(f"{axis} strategy {name!r}: {reason}") from None
    lacks = missing(strategy, PROTOCOLS[axis])
    if lacks:
        raise InvalidParams(f"{axis} strategy {name!r} does not implement the {axis} protocol: missing "
                            f"{', '.join(lacks)} (see strategies.protocols)")

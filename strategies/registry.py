"""Registry of strategies: axis -> name -> factory.

A strategy module registers itself with ``@register("storage", "hdf5")``. Built-in strategies and
those of installed distributions (entry-point group ``dlbench.strategies``, each entry point naming
a module that registers on import) are loaded by :func:`load_builtins`; others by
``load_plugin("package.module")``. A name registered twice on one axis is an error
(:class:`DuplicateStrategy`) unless the second registration asks for it with ``@register(axis,
name, override=True)``; importing the same module again is not a second registration.
:func:`validate` checks a strategy's parameters by constructing it once, and :func:`check_training`
checks them against the scenario's training settings (a strategy's optional
``check_training(**settings)``, raising ValueError), so a scenario fails at load time, never inside
a rank.
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
    "strategies.storage.litdata",  # litdata itself is imported only when the storage is selected
    "strategies.sampler.shards",  # streams the shards of the three storages above
    "strategies.storage.s3",  # webdataset, parquet and raw in an S3-compatible bucket (obstore, imported lazily)
    "strategies.cache.none",
    "strategies.cache.lru",
    "strategies.batching.fixed",
    "strategies.batching.dynamic",
    "strategies.batching.adaptive",
    "strategies.sampler.default",
    "strategies.sampler.balanced",
    "strategies.sampler.shufflebuffer",  # storage order through a bounded shuffle buffer
    "strategies.precision.fp32",
    "strategies.precision.amp",
    "strategies.precision.bf16",
    "strategies.preprocess.host",
    "strategies.preprocess.device",
    "strategies.loader.workers",
    "strategies.loader.threads",
    "strategies.loader.nodes",  # torchdata.nodes and spdl are imported only when the loader is selected
    "strategies.loader.spdl",
)
_scanned_path: tuple[str, ...] | None = None  # sys.path at the last entry-point scan


class UnknownStrategy(KeyError):
    """Raised when an axis or strategy name is not registered."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it plain
        return str(self.args[0])


class InvalidParams(ValueError):
    """A strategy's parameters are wrong (unknown key or bad value); the message is one line."""


class Unavailable(InvalidParams):
    """The strategy needs a package this machine lacks; the message says how to install it."""


class PluginError(ImportError):
    """A plugin module or an entry point of group ``dlbench.strategies`` failed to import; one
    line."""


class DuplicateStrategy(ValueError):
    """A strategy registered under a name its axis already has, without ``override=True``."""


def _origin(factory: Callable[..., Any]) -> str:
    return f"{getattr(factory, '__module__', '?')}.{getattr(factory, '__qualname__', repr(factory))}"


def register(axis: str, name: str, override: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a factory under ``axis``/``name``. A name the axis already has (a built-in's,
    another plugin's) is a DuplicateStrategy unless ``override`` is true; the same factory
    registered again (its module imported twice) replaces itself silently."""
    if axis not in _REGISTRY:
        raise UnknownStrategy(f"unknown axis {axis!r}; axes are {', '.join(AXES)}")

    def deco(factory: Callable[..., Any]) -> Callable[..., Any]:
        existing = _REGISTRY[axis].get(name)
        if existing is not None and not override and _origin(existing) != _origin(factory):
            raise DuplicateStrategy(f"{axis} strategy {name!r} is already registered (by {_origin(existing)}); "
                                    f"{_origin(factory)} must pick another name, or replace it on purpose "
                                    f"with @register({axis!r}, {name!r}, override=True)")
        _REGISTRY[axis][name] = factory
        return factory

    return deco


def load_builtins() -> None:
    for module in _BUILTINS:
        importlib.import_module(module)
    load_entry_points()


def load_entry_points() -> None:
    """Import the module of every ``dlbench.strategies`` entry point; rescans when sys.path
    changed."""
    global _scanned_path
    path = tuple(sys.path)
    if path == _scanned_path:
        return
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            importlib.import_module(ep.module)
        except Exception as err:  # noqa: BLE001 - any failure of third-party code becomes one line
            dist = ep.dist.name if ep.dist is not None else "unknown distribution"
            reason = _one_line(err)
            raise PluginError(f"entry point {ep.name} = {ep.value} of {dist} (group {ENTRY_POINT_GROUP}) "
                              f"failed to import: {reason}") from None
    _scanned_path = path


def load_plugin(module: str) -> None:
    """Import a plugin module; any failure (not found, a syntax error, an exception it raises, a
    duplicate name) is a one-line PluginError naming the module."""
    load_builtins()  # first, so that a plugin reusing a built-in's name is caught
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as err:
        if err.name is not None and (module == err.name or module.startswith(err.name + ".")):
            raise PluginError(f"module {module!r} not found; check the module name and PYTHONPATH") from None
        raise PluginError(f"{module} failed to import: {_one_line(err)}") from None
    except SyntaxError as err:
        raise PluginError(f"{module} has a syntax error: {err.msg} ({err.filename}, line {err.lineno})") from None
    except Exception as err:  # noqa: BLE001 - any failure of third-party code becomes one line
        raise PluginError(f"{module} failed to import: {_one_line(err)}") from None


def _one_line(err: BaseException) -> str:
    return " ".join(f"{type(err).__name__}: {err}".split())[:300]


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
    """Construct the strategy once; a wrong key, a bad value or a missing protocol member is
    InvalidParams, a package the strategy needs and this machine lacks is Unavailable (a kind of
    InvalidParams).

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
    except Unavailable as err:
        raise Unavailable(f"{axis} strategy {name!r}: {' '.join(str(err).split())}") from None
    except (ValueError, TypeError) as err:
        reason = " ".join(str(err).split())
        raise InvalidParams(f"{axis} strategy {name!r}: {reason}") from None
    lacks = missing(strategy, PROTOCOLS[axis])
    if lacks:
        raise InvalidParams(f"{axis} strategy {name!r} does not implement the {axis} protocol: missing "
                            f"{', '.join(lacks)} (see strategies.protocols)")


def check_training(axis: str, name: str, params: dict[str, Any], settings: dict[str, Any]) -> None:
    """The strategy's parameters against the run's training settings (``batch_size`` per rank,
    ``world_size``, ``samples`` or None when not yet known, ``workers``): the strategy's own
    ``check_training(**settings)`` when it has one; its ValueError becomes InvalidParams naming the
    axis and the strategy. Called when the scenario loads, so that a value a rank would reject
    stops the run first."""
    strategy = get(axis, name)(**params)
    check = getattr(strategy, "check_training", None)
    if check is None:
        return
    try:
        check(**settings)
    except (ValueError, TypeError) as err:
        raise InvalidParams(f"{axis} strategy {name!r}: {' '.join(str(err).split())}") from None

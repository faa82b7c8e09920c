"""Registry of strategies: axis -> name -> factory.

A strategy module registers itself with ``@register("storage", "hdf5")``.
Built-in strategies are imported by :func:`load_builtins`; third-party ones by
``load_plugin("package.module")`` (the module registers on import).
"""
from __future__ import annotations

import importlib
from typing import Any, Callable

AXES = ("storage", "cache", "batching", "sampler")

_REGISTRY: dict[str, dict[str, Callable[..., Any]]] = {axis: {} for axis in AXES}

_BUILTINS = (
    "strategies.storage.raw",
    "strategies.storage.mmap",
    "strategies.storage.hdf5",
    "strategies.cache.none",
    "strategies.cache.lru",
    "strategies.batching.fixed",
    "strategies.batching.dynamic",
    "strategies.batching.adaptive",
    "strategies.sampler.default",
    "strategies.sampler.balanced",
)


class UnknownStrategy(KeyError):
    """Raised when an axis or strategy name is not registered."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it plain
        return str(self.args[0])


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

"""Checks of strategy parameter values, for ``__init__``: each raises ValueError naming the
parameter."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def integer(name: str, value: Any, minimum: int) -> int:
    """``value`` as an int >= ``minimum`` (a bool or a float is not an integer)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def number(name: str, value: Any, low: float, high: float = math.inf, low_open: bool = False) -> float:
    """``value`` as a finite float in [low, high] (or (low, high] with ``low_open``)."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) \
        and (value > low if low_open else value >= low) and value <= high
    if not ok:
        bounds = f"{'>' if low_open else '>='} {low:g}" if high == math.inf else \
            ("in (" if low_open else "in [") + f"{low:g}, {high:g}]"
        raise ValueError(f"{name} must be a finite number {bounds}, got {value!r}")
    return float(value)


def flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {value!r}")
    return value


def choice(name: str, value: Any, options: Sequence[str]) -> str:
    if value not in options:
        raise ValueError(f"{name} must be one of {', '.join(options)}; got {value!r}")
    return value

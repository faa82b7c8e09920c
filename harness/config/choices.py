"""A scenario's [matrix] table read into StrategyChoices: every entry named, every strategy known,
every parameter accepted by the strategy and checked against the run's training settings (batch
size, ranks, samples), so that a value a strategy would reject inside a rank stops the run when the
scenario loads. A strategy whose package is missing here is kept, marked unavailable: the run stops
on it only if the cells selected (--only, --exclude) need it."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from strategies import registry


@dataclass(frozen=True)
class StrategyChoice:
    """One strategy on one axis with its parameters."""

    axis: str
    name: str
    params: tuple[tuple[str, Any], ...] = ()
    # why this machine cannot run it (a package it lacks), as one line; checked once the cells are selected
    unavailable: str = field(default="", compare=False)

    @property
    def label(self) -> str:
        if not self.params:
            return self.name
        return f"{self.name}(" + ",".join(f"{k}={v}" for k, v in self.params) + ")"

    def create(self) -> Any:
        return registry.create(self.axis, self.name, **dict(self.params))


def _entries(path: Path, axis: str, raw: dict) -> list:
    defaults = {a: [name] for a, name in registry.DEFAULTS.items()}
    entries = raw.get(axis, defaults[axis])
    if isinstance(entries, (str, dict)):
        entries = [entries]
    if not isinstance(entries, list) or not entries:
        raise UsageError(f"{path}: [matrix] {axis} must be a non-empty list of strategies")
    return entries


def _named(path: Path, axis: str, number: int, entry: Any) -> tuple[Any, dict]:
    """(name, parameters) of one entry: a name, or a table with a `name` key."""
    if not isinstance(entry, dict):
        return entry, {}
    params = dict(entry)
    if "name" not in params:
        shown = ", ".join(f"{k} = {v!r}" for k, v in params.items())
        raise UsageError(f"{path}: [matrix] {axis} entry {number} {{ {shown} }} has no name; write "
                         f"{{ name = \"STRATEGY\", ... }} (known: {', '.join(registry.names(axis))})")
    return params.pop("name"), params


def parse_matrix(path: Path, raw: Any, settings: dict[str, Any], origin: str = "") -> dict[str, list[StrategyChoice]]:
    """The [matrix] as choices per axis (defaults for the axes it omits). ``settings``: the
    training settings each strategy's parameters are checked against
    (strategies.registry.check_training); ``origin`` says where they came from when a command-line
    flag set them (e.g. " (batch_size from --batch-size)")."""
    if not isinstance(raw, dict):
        raise UsageError(f"{path}: [matrix] must be a table of axis = [strategies]")
    for axis in raw:
        if axis not in registry.AXES:
            raise UsageError(f"{path}: unknown axis [matrix] {axis}; axes are {', '.join(registry.AXES)}")
    matrix: dict[str, list[StrategyChoice]] = {}
    for axis in registry.AXES:
        try:
            known = registry.names(axis)
        except registry.PluginError as err:
            raise UsageError(str(err)) from None
        choices = []
        for number, entry in enumerate(_entries(path, axis, raw), 1):
            name, params = _named(path, axis, number, entry)
            if not isinstance(name, str) or name not in known:
                raise UsageError(f"{path}: [matrix] {axis} has unknown strategy {name!r}; "
                                 f"known: {', '.join(known) or 'none'}")
            try:
                registry.validate(axis, name, params)
            except registry.Unavailable as err:  # an error only if a selected cell needs it (--exclude)
                choices.append(StrategyChoice(axis, name, tuple(sorted(params.items())),
                                              unavailable=f"{path}: matrix.{axis}: {err}"))
                continue
            except registry.InvalidParams as err:
                raise UsageError(f"{path}: matrix.{axis}: {err}") from None
            try:
                registry.check_training(axis, name, params, settings)
            except registry.InvalidParams as err:
                shown = ", ".join(f"{k} {v}" for k, v in settings.items() if v is not None)
                raise UsageError(f"{path}: matrix.{axis}: {err} (training settings: {shown}{origin})") from None
            choices.append(StrategyChoice(axis, name, tuple(sorted(params.items()))))
        matrix[axis] = _once_each(path, axis, choices)
    return _within_reach(path, matrix)


MAX_CELLS = 4096  # a matrix this large already takes a 2-core machine days per pass


def _once_each(path: Path, axis: str, choices: list[StrategyChoice]) -> list[StrategyChoice]:
    """An axis names each level once: a level listed twice would give two cells one id."""
    labels = [c.label for c in choices]
    twice = sorted({lb for lb in labels if labels.count(lb) > 1})
    if twice:
        raise UsageError(f"{path}: [matrix] {axis} lists {', '.join(twice)} more than once; name each level once")
    return choices


def _within_reach(path: Path, matrix: dict[str, list[StrategyChoice]]) -> dict[str, list[StrategyChoice]]:
    cells = math.prod(len(c) or 1 for c in matrix.values())
    if cells > MAX_CELLS:
        raise UsageError(f"{path}: [matrix] makes {cells} cells, more than {MAX_CELLS}: no budget runs a pass of "
                         f"that; split it into scenarios, or give fewer levels per axis")
    return matrix

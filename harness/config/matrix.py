"""The strategy matrix: a scenario's [matrix] expanded into cells (the cartesian product of its
axes)."""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cached_property

from harness.config.scenario import Scenario, StrategyChoice
from harness.errors import UsageError
from strategies.registry import ADDED_AXES, AXES, DEFAULTS
from strategies.storage import advice as access_hints


@dataclass(frozen=True)
class Cell:
    choices: tuple[StrategyChoice, ...]  # one per axis, in AXES order

    def choice(self, axis: str) -> StrategyChoice:
        """The cell's strategy on `axis`; a cell built with fewer axes (a synthetic one) has the
        default."""
        i = AXES.index(axis)
        return self.choices[i] if i < len(self.choices) else StrategyChoice(axis, DEFAULTS[axis])

    @property
    def id(self) -> str:
        """`axis=label` joined by commas in AXES order. An axis added after ids were first written
        (precision, preprocess, loader) is left out while it holds its default strategy without
        parameters, so a cell of an older run or baseline keeps its id."""
        return ",".join(f"{c.axis}={c.label}" for c in self.choices
                        if not (c.axis in ADDED_AXES and c.label == DEFAULTS[c.axis]))

    def strategies(self) -> dict[str, str]:
        return {c.axis: c.label for c in self.choices}

    @cached_property
    def advice(self) -> str | None:
        """The access hint the readers of the cell's storage give under its sampler
        (strategies.storage.advice.cell_hint), worked out once per cell; None for a storage without
        an `advice` parameter. A strategy that cannot be built is an error, not a missing hint."""
        return access_hints.cell_hint(self.choice("storage").create(), self.choice("sampler").create())


def expand(scenario: Scenario) -> list[Cell]:
    return [Cell(tuple(combo)) for combo in itertools.product(*(scenario.matrix[a] for a in AXES))]


def parse_filter(text: str, flag: str) -> tuple[str, set[str]]:
    """'storage=hdf5,mmap' -> ('storage', {'hdf5', 'mmap'}); a UsageError names the flag
    otherwise."""
    axis, sep, values = text.partition("=")
    if not sep or not values or axis not in AXES:
        raise UsageError(f"{flag} {text!r}: write AXIS=NAME[,NAME...] with AXIS one of {', '.join(AXES)}")
    return axis, {v.strip() for v in values.split(",") if v.strip()}


def select(cells: list[Cell], only: list[str], exclude: list[str], check: bool = True) -> list[Cell]:
    """Keep cells matching every --only filter and no --exclude filter (by strategy name or label);
    `check`: a strategy this machine cannot run is a UsageError (else the caller leaves its cells
    out: `runnable`)."""
    def matches(cell: Cell, axis: str, names: set[str]) -> bool:
        c = cell.choice(axis)
        return c.name in names or c.label in names

    full = cells  # every filter's names are checked against the whole matrix, not the cells left so far
    for flag, filters in (("--only", only), ("--exclude", exclude)):
        for text in filters:
            axis, names = parse_filter(text, flag)
            present = {cell.choice(axis).name for cell in full} | {cell.choice(axis).label for cell in full}
            unknown = names - present
            if unknown:
                raise UsageError(f"{flag} {text}: {', '.join(sorted(unknown))} is not in the matrix's {axis} "
                                 f"axis (it has: {', '.join(sorted({c.choice(axis).label for c in full}))})")
            keep = flag == "--only"
            cells = [cell for cell in cells if matches(cell, axis, names) == keep]
    if not cells:
        raise UsageError("the --only/--exclude filters leave no cell to run; loosen them (see --dry-run)")
    if check:
        check_available(c for cell in cells for c in cell.choices)
    return cells


def runnable(cells: list[Cell]) -> tuple[list[Cell], list[str]]:
    """The cells whose every strategy this machine can run, and one line per strategy left out and
    why (a shipped scenario runs what it can; a strategy of a user's own scenario stops the run:
    select)."""
    missing = list(dict.fromkeys(c for cell in cells for c in cell.choices if c.unavailable))
    kept = [cell for cell in cells if not any(c.unavailable for c in cell.choices)]
    if missing and not kept:
        check_available(missing)
    return kept, [f"leaves out {c.axis}={c.label}: {c.unavailable.split(': ', 2)[-1]}" for c in missing]


def check_available(choices, remedy: bool = True) -> None:
    """One line for the first strategy this machine cannot run (a package it lacks): how to install
    it, and (remedy) how to leave it out."""
    for c in choices:
        if c.unavailable:
            raise UsageError(c.unavailable + (f"; or leave it out: --exclude {c.axis}={c.label}" if remedy else ""))

"""The strategy matrix: a scenario's [matrix] expanded into cells (the cartesian product of its axes)."""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from harness.scenario import Scenario, StrategyChoice
from strategies.registry import AXES


@dataclass(frozen=True)
class Cell:
    choices: tuple[StrategyChoice, ...]  # one per axis, in AXES order

    def choice(self, axis: str) -> StrategyChoice:
        return self.choices[AXES.index(axis)]

    @property
    def id(self) -> str:
        return ",".join(f"{c.axis}={c.label}" for c in self.choices)

    def strategies(self) -> dict[str, str]:
        return {c.axis: c.label for c in self.choices}


def expand(scenario: Scenario) -> list[Cell]:
    return [Cell(tuple(combo)) for combo in itertools.product(*(scenario.matrix[a] for a in AXES))]

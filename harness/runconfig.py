"""What one invocation runs: the scenario, its cells, where results and data go, and the measurement options.
Shared by the launcher (process management) and each rank's loop over the cells."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from harness.matrix import Cell
from harness.scenario import Scenario


@dataclass
class LaunchConfig:
    scenario: Scenario
    cells: list[Cell]
    run_dir: Path
    data_dir: Path
    device: str  # "cuda" or "emulated"
    plugins: list[str] = field(default_factory=list)
    progress: bool = True
    cache_state: str = "as-is"
    decompose: bool = False
    profile: bool = False
    repeats: int = 1

    def materialise_all(self, progress: bool) -> dict[str, Path]:
        """Every storage of the matrix materialised (reused when it already exists)."""
        from harness.materialise import materialise

        storages = sorted({c.choice("storage").name for c in self.cells})
        return {s: materialise(self.scenario.dataset, s, self.data_dir, progress=progress) for s in storages}

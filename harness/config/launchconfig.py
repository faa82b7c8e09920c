"""What one invocation runs (LaunchConfig): the run's settings whole
(harness.config.request.BenchRequest), the scenario and its cells, where results go, and what the
launcher decided. Shared by the launcher (process management) and each rank's loop over the
cells."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.config.matrix import Cell
from harness.config.request import BenchRequest
from harness.config.scenario import Scenario

ORDERS = ("random", "fixed")


def visit_order(cells: int, repeat: int, order: str, seed: int) -> list[int]:
    """The cell indices one repeat visits, in order: the matrix's order ("fixed") or a permutation
    drawn from (seed, repeat) ("random")."""
    if order == "fixed":
        return list(range(cells))
    return [int(i) for i in np.random.default_rng([seed, repeat]).permutation(cells)]


def check_data_space(scenario: Scenario, cells: list[Cell], data_dir: Path, regenerate: bool = False) -> None:
    """Before the run directory is written: the storages of these cells still to materialise fit in
    the free space of data_dir's file system (harness.data.space), else one line naming --data-dir,
    exit 2."""
    from harness.data import space
    from harness.data.materialise import _writable, pending

    _writable(Path(data_dir))
    storages = sorted({(c.choice("storage").name, c.choice("storage").params) for c in cells})
    space.check_room(Path(data_dir), pending(scenario.dataset, [(n, dict(p)) for n, p in storages], data_dir,
                                             regenerate))


@dataclass
class LaunchConfig:
    """One launch of a run: the run's settings held whole (`request`, frozen: what the command line
    asked, built once by harness.cli) and what was decided from them before the ranks start: the
    scenario and its cells, the run directory, the device, the budget. Pickled whole to each
    spawned rank; under torchrun each process builds its own and rank 0 broadcasts run_dir and
    plan. A rank reads the settings here (config.request), never from a copy
    (harness.train.trainloop.RankContext holds this whole)."""
    request: BenchRequest
    scenario: Scenario  # the request's scenario with its overrides, data and torchrun world (harness.commands.bench)
    cells: list[Cell]
    run_dir: Path
    device: str  # "cuda" or "emulated"
    device_name: str = ""  # the device's name as cells.jsonl records it (for lines the launcher writes)
    budget_s: float = 0.0  # settled_budget_s: after the planned passes, more while the answer is open (0: none)
    started_at: float = 0.0  # time.time() when the run began: the budget's clock (survives a rank restart)
    plan: list[tuple[int, int]] | None = None  # (repeat, index into cells) to run, in order; None: all
    supervised: bool = False  # spawned under harness.run.supervisor: ranks write heartbeats under run_dir
    remote_counters: Path | None = None  # [remote]: the folder the remote readers append their counters to

    @property
    def progress(self) -> bool:
        return not self.request.quiet

    def full_plan(self) -> list[tuple[int, int]]:
        """Every (repeat, cell) of the run, repeats interleaved across cells (A B C, then A B C
        again). With order "random" each repeat is a fresh permutation of the cells (C A B, B C A),
        a pure function of (order_seed, repeat): drift of the machine over the run then spreads
        over every axis instead of landing on the outermost one."""
        r = self.request
        return [(repeat, i) for repeat in range(r.repeats) for i in visit_order(len(self.cells), repeat, r.order,
                                                                               r.order_seed)]

    def todo(self) -> list[tuple[int, int]]:
        return self.full_plan() if self.plan is None else list(self.plan)

    @property
    def run_cpus(self) -> float | None:
        """The CPUs this process may use (affinity and cgroup quota), as env.json records them: the
        budget's test of whether the host's CPU binds (harness.analysis.sequential.cpu_binds)."""
        from harness.measure.hostload import cpu_allowance

        return cpu_allowance()

    def materialise_all(self, progress: bool, regenerate: bool | None = None) -> dict[str, Path]:
        """Every storage of the matrix, with its parameters, materialised (reused when it already
        exists) and checked against its manifest (harness.data.verify: a DataError, exit 2, on a
        damaged file). Keyed by the storage choice's label; choices whose files are the same (same
        variant) share a directory. An imported source is staged in mmap first
        (harness.data.materialise), so with --regenerate that is rewritten first, once."""
        from harness.data.importer import SourceSpec
        from harness.data.materialise import STAGING, materialise

        regenerate = self.request.regenerate if regenerate is None else regenerate
        check = "full" if self.request.verify_data else "quick"
        spec, data_dir = self.scenario.dataset, self.request.data_dir
        if isinstance(spec, SourceSpec) and regenerate:
            materialise(spec, STAGING, data_dir, progress=progress, regenerate=True, check="")
        choices = sorted({c.choice("storage") for c in self.cells}, key=lambda c: c.label)
        done: dict[tuple, Path] = {}
        paths: dict[str, Path] = {}
        for choice in choices:
            key = (choice.name, getattr(choice.create(), "variant", ""))
            if key not in done:
                done[key] = materialise(spec, choice.name, data_dir, progress=progress,
                                        regenerate=regenerate and not (isinstance(spec, SourceSpec)
                                                                       and choice.label == STAGING),
                                        check=check, params=dict(choice.params))
            paths[choice.label] = done[key]
        return paths

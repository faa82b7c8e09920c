"""What a command was asked to do, as typed values: harness.cli turns the command line into one
frozen request per command, once, and the wings below take these (never argparse's namespace).

Settled at the door, so that no lower wing looks again: the order seed (given, the resumed run's,
or drawn), the resume directory and the command line it replays, the torchrun identity (from the
environment torchrun sets), and the plugins (loaded by the CLI before any command runs)."""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path


@dataclass(frozen=True)
class Torchrun:
    """This process's place in a torchrun (or srun -> torchrun) job: RANK, LOCAL_RANK, WORLD_SIZE,
    LOCAL_WORLD_SIZE as torchrun sets them."""
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Torchrun | None:
        """The identity torchrun gave this process, or None when it was not started by torchrun."""
        env = os.environ if env is None else env
        if "RANK" not in env or "WORLD_SIZE" not in env:
            return None
        world = int(env["WORLD_SIZE"])
        return cls(rank=int(env["RANK"]), local_rank=int(env.get("LOCAL_RANK", 0)), world_size=world,
                   local_world_size=int(env.get("LOCAL_WORLD_SIZE", world)))


@dataclass(frozen=True)
class Overrides:
    """The scenario settings given on the command line (None: the scenario's own). Keys:
    scenario.OVERRIDES."""
    samples: int | None = None
    steps: int | None = None
    epochs: int | None = None
    warmup_steps: int | None = None
    batch_size: int | None = None
    workers: int | None = None
    world_size: int | None = None
    workload: str | None = None

    def given(self) -> dict:
        """{setting: value} as scenario.load takes them, None for the scenario's own."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class DataOptions:
    """--data, --data-format, --strict-data, --scale: where the samples come from."""
    path: Path | None = None
    layout: str | None = None
    strict: bool = False
    scale: str | None = None


@dataclass(frozen=True)
class GateOptions:
    """--baseline, --save-baseline and how a comparison decides (harness.gates.baseline)."""
    baseline: Path | None = None
    save_baseline: Path | None = None
    metric: str = "throughput"
    raw: bool = False
    min_effect: float = 0.05
    alpha: float = 0.05
    strict: bool = False
    family_alpha: float | None = None  # --family-alpha: the effects' decisions' error rate all together


@dataclass(frozen=True)
class BenchRequest:
    """`run_bench.py --scenario NAME ...`: run a scenario's matrix (and its modes: --dry-run,
    --loader-only)."""
    scenario: str
    argv: tuple[str, ...]  # the command line run (with --resume: the run's recorded one); env.json keeps it
    order_seed: int  # settled: --order-seed, the resumed run's, or drawn
    overrides: Overrides = Overrides()
    data: DataOptions = DataOptions()
    gate: GateOptions = GateOptions()
    device: str = "auto"
    share_gpu: bool = False  # --share-gpu: the ranks share the visible GPU(s) over gloo
    data_dir: Path = Path("data")
    out: Path = Path("results")
    plugins: tuple[str, ...] = ()
    quiet: bool = False
    only: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    dry_run: bool = False
    resume: Path | None = None
    verify_data: bool = False
    regenerate: bool = False
    cache_state: str = "as-is"
    decompose: bool = False
    loader_only: bool = False
    profile: bool = False
    repeats: int = 1
    order: str = "random"
    budget_s: float | None = None  # --budget; None: the scenario's [run] budget_s unless --repeats or --quick
    quick: bool = False  # --quick: one pass, no budget
    order_tolerance: float = 0.10  # --order-tolerance: how much less random than a shuffle an order may be
    what_if_cores: float | None = None
    target: Path | None = None  # --target FILE (default: the scenario's [target] table)
    torchrun: Torchrun | None = field(default=None)

    @classmethod
    def bare(cls, scenario: str, **options) -> BenchRequest:
        """A request with no command line behind it (no argv, order seed 0): the launches a check
        makes of its own, a rank outside a run."""
        return cls(scenario=scenario, argv=(), order_seed=0, **options)

    def settled_budget_s(self, scenario_budget_s: float) -> float:
        """The budget this run spends: --budget when given, else none with --quick or --repeats N,
        else the scenario's [run] budget_s."""
        if self.budget_s is not None:
            return self.budget_s
        return 0.0 if self.quick or self.repeats > 1 else scenario_budget_s

    @property
    def rank(self) -> int:
        return self.torchrun.rank if self.torchrun else 0

    @property
    def local_rank(self) -> int:
        return self.torchrun.local_rank if self.torchrun else 0

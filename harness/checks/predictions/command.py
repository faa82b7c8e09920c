"""--check-predictions: the target model (harness.analysis.targetmodel) checked on this machine. It
calibrates on one configuration of a scenario (1 rank, its workers, raw storage, warm page cache,
its decoder, batch and image size), with 2 CPUs or more on the same configuration confined to 1 CPU
(it measures the CPU a run can use where the CPU binds), and at one rank more (the ranks' wait,
harness.analysis.rankwait); it predicts configurations that each change one thing, and across the
1-CPU boundary both ways (cases.py: cases and pairings), with the model on the CPUs each case's
visits had (the allowance less the outside load measured in them: nothing fitted to a measured
samples/s) and its 90% interval (interval.py), beside it the absolute model (the whole allowance:
what it predicts for another machine, or this one quiet), then measures them: every configuration
is a real run of the harness's cells (calibration.launch_group), visited in `rounds` interleaved
passes, so drift of this shared machine falls on all of them (4 by default: on the 2-core
development host one visit's samples/s scatters by about 9%, and with 2 visits a case and its
calibration the noise alone made a median |error| of 7.4-7.8%, with 4 3.7%). Beside the cells it
measures what the predictions need (calibration.side_bench): the disk's cold read rate and latency,
the CPU-cost factor with every core busy, and the read and decode stages' costs in the other
configurations.

Writes predictions.jsonl (one line per prediction: config, source, predicted, predicted_shared, its
interval, measured, the errors, flag, the visits' figures) and bench.json in its run directory, and
prints the table (table.py; scoring.py builds its rows). docs/measurements/prediction.md has a
measured one.

    python run_bench.py --scenario 4xV100 --check-predictions
    python run_bench.py check-predictions --scenario 4xV100 [--rounds 4] [--steps 60]
    python run_bench.py check-predictions --analyse RUN_DIR

harness.cli builds the Request from either command line; `main(request)` runs it.
"""
from __future__ import annotations

import json
import os
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from harness.analysis.checkcases import CheckCase
from harness.checks.predictions import scoring, table
from harness.checks.predictions.calibration import (
    STORAGES,
    Visit,
    bench_of,
    launch_group,
    materialise_storages,
    read_visits,
    side_bench,
)
from harness.checks.predictions.cases import PREDICTIONS, cases
from harness.config import scenario as scenario_mod
from harness.errors import EXIT_OK, EXIT_USAGE, UsageError
from harness.measure import hostload
from harness.results import fileformat, rundir
from strategies import registry

# the scenario settings the check takes from the command line (scenario.load's overrides); --steps is the
# check's own (steps per launch), and the check picks its own world sizes and measures steps, not epochs
SCENARIO_SETTINGS = ("samples", "batch_size", "workers", "warmup_steps", "workload")


@dataclass(frozen=True)
class CheckPredictionsRequest:
    """`run_bench.py check-predictions ...` or `run_bench.py --scenario NAME --check-predictions
    ...`."""

    scenario: str | None = None  # a name from scenarios/ or a TOML path (needed unless `analyse`)
    analyse: Path | None = None  # --analyse RUN_DIR: the table again from a check's run directory
    data_dir: Path = Path("data")
    out: Path = Path("results")
    rounds: int = 4  # interleaved passes over the cases (module docstring: why 4)
    steps: int = 60  # measured steps per cell of each launch (>= 10)
    cases: tuple[str, ...] = ()  # run only these cases (the calibration always runs); (): every case
    quiet: bool = False
    plugins: tuple[str, ...] = ()  # modules that register extra strategies (imported before the scenario loads)
    # overrides of the scenario's settings (None: the scenario's own), as the bench command line gives them
    samples: int | None = None
    batch_size: int | None = None
    workers: int | None = None
    warmup_steps: int | None = None
    workload: str | None = None
    world_size: int | None = None  # refused: the check runs its own world sizes
    epochs: int | None = None  # refused: the check measures `steps`

    def overrides(self) -> dict:
        """The given scenario settings, as scenario.load takes them."""
        if self.world_size is not None:
            raise UsageError("--check-predictions runs its own world sizes (1 rank for the calibration, 2 for "
                             "the ranks case); leave out --world-size")
        if self.epochs is not None:
            raise UsageError("--check-predictions measures --steps per launch; leave out --epochs")
        return {k: getattr(self, k) for k in SCENARIO_SETTINGS if getattr(self, k) is not None}


Request = CheckPredictionsRequest  # what harness.cli builds


def _other_decoder(decoder: str) -> str | None:
    """PIL against simplejpeg, whichever the scenario does not use (None without simplejpeg)."""
    if decoder != "pil":
        return "pil"
    try:
        import simplejpeg  # noqa: F401
    except ImportError:
        return None
    return "simplejpeg"


def _plan(sc, only: list[str] | None, allowance: int) -> tuple[CheckCase, list[CheckCase]]:
    """The calibration and the cases (`only`: the names to keep; the calibration always runs) on a
    run allowed `allowance` CPUs (2 or more: the 1-CPU calibration too)."""
    if sc.training.workload != "pixels":
        raise UsageError(f"--check-predictions: scenario {sc.name} has workload {sc.training.workload!r}; the "
                         "check changes decoders and image sizes, so give a pixels scenario (e.g. 4xV100)")
    tr = sc.training
    base = CheckCase("calibration", 1, max(1, tr.workers), tr.batch_size, tr.image_size, "raw", tr.decoder, "warm")
    all_cases = cases(base, max(32, int(round(tr.image_size * 1.4 / 16)) * 16), _other_decoder(tr.decoder),
                      allowance)
    if only:
        unknown = set(only) - {c.name for c in all_cases}
        if unknown:
            raise UsageError(f"--check-predictions: no case named {', '.join(sorted(unknown))}; the cases: "
                             f"{', '.join(c.name for c in all_cases[1:])}")
        all_cases = [c for c in all_cases if c.name == "calibration" or c.name in only]
    return base, all_cases


def _rounds(all_cases: list[CheckCase], rounds: int):
    """(round, position, cases of one launch) in the order they run: the second round in
    reverse."""
    groups: dict[tuple, list[CheckCase]] = {}
    for case in all_cases:
        groups.setdefault(case.group, []).append(case)
    for r in range(rounds):
        order = list(groups.values()) if r % 2 == 0 else list(groups.values())[::-1]
        for i, group in enumerate(order):
            yield r, i, group


def allowance_cpus() -> int:
    """The whole CPUs this run may use (its affinity capped by its cgroup's quota; at least 1)."""
    return max(1, int(hostload.cpu_allowance() or 1))


def analyse(run_dir: Path, sc, all_cases: list[CheckCase], rounds: int, allowance: int) -> list[dict]:
    """The predictions and the measurements of a check's run directory: predictions.jsonl, the
    table."""
    measured: dict[str, list[Visit]] = {c.name: [] for c in all_cases}
    for r, i, group in _rounds(all_cases, rounds):
        for name, visit in read_visits(run_dir / "runs" / f"r{r}-{i}", group).items():
            measured[name].append(visit)
    bench = bench_of(json.loads((run_dir / "bench.json").read_text()))
    rows = scoring.rows(sc, all_cases, measured, bench, allowance)
    fileformat.write_lines(run_dir / "predictions.jsonl", rows, PREDICTIONS)  # versioned, replaced atomically
    print(table.table(rows))
    return rows


def run(request: Request) -> int:
    """The check; `request.cases`: the names of the cases to run (the calibration always runs)."""
    overrides = request.overrides()
    sc = scenario_mod.load(request.scenario, overrides)
    cores = allowance_cpus()
    base, all_cases = _plan(sc, list(request.cases) or None, cores)
    rounds, steps, quiet = request.rounds, request.steps, request.quiet
    if rounds < 1 or steps < 10:
        raise UsageError("--check-predictions: --rounds must be >= 1 and --steps >= 10")
    run_dir = rundir.new_run_dir(request.out, f"{sc.name}-check")
    rundir.write_json(run_dir / "check.json", {"scenario": request.scenario, "rounds": rounds, "steps": steps,
                                               "cases": [c.name for c in all_cases], "overrides": overrides,
                                               "plugins": list(request.plugins), "allowance": cores})
    say = (lambda text: None) if quiet else (lambda text: print(text, file=sys.stderr, flush=True))
    started = time.perf_counter()
    data_paths = materialise_storages(sc, base, STORAGES, run_dir, request.data_dir, steps, progress=not quiet)
    say("measuring the disk, the contention factor and the stages' costs ...")
    rundir.write_json(run_dir / "bench.json", side_bench(sc, base, all_cases, data_paths, cores))
    for r, i, group in _rounds(all_cases, rounds):
        say(f"round {r + 1}/{rounds}, launch {i + 1}: {', '.join(c.name for c in group)}")
        launch_group(sc, group, run_dir / "runs" / f"r{r}-{i}", request.data_dir, steps, request.plugins)
    analyse(run_dir, sc, all_cases, rounds, cores)
    say(f"\n{len(all_cases)} configurations x {rounds} rounds in {time.perf_counter() - started:.0f} s; "
        f"results: {run_dir}")
    return EXIT_OK


def reanalyse(run_dir: Path) -> int:
    """--analyse RUN_DIR: the table again from a check's run directory (the model changed, or to
    read it)."""
    info = json.loads((Path(run_dir) / "check.json").read_text()) if (Path(run_dir) / "check.json").exists() \
        else {"scenario": Path(run_dir).name.split("-")[1], "rounds": 2, "cases": None}
    load_plugins(tuple(info.get("plugins") or ()))  # those the check ran with
    sc = scenario_mod.load(info["scenario"], info.get("overrides") or None)
    allowance = int(info.get("allowance") or len(os.sched_getaffinity(0)))
    _, all_cases = _plan(sc, None, allowance)
    if info.get("cases"):
        all_cases = [c for c in all_cases if c.name in info["cases"]]
    analyse(Path(run_dir), sc, all_cases, int(info["rounds"]), allowance)
    return EXIT_OK


def load_plugins(modules: tuple[str, ...]) -> None:
    """Import each --plugin module (its strategies register), before the scenario naming them is
    loaded."""
    for module in modules:
        try:
            registry.load_plugin(module)
        except registry.PluginError as err:
            raise UsageError(f"--plugin {module}: {err}") from None


def main(request: Request) -> int:
    """Run the check (or, with `analyse`, its table again); a mistake in the request is a
    UsageError."""
    load_plugins(request.plugins)
    if request.analyse:
        return reanalyse(request.analyse)
    if not request.scenario:
        raise UsageError("give --scenario NAME (or --analyse RUN_DIR)")
    return run(request)


if __name__ == "__main__":
    print("python -m harness.checks.predictions.command is now: python run_bench.py check-predictions "
          f"{shlex.join(sys.argv[1:])}".rstrip(), file=sys.stderr)
    sys.exit(EXIT_USAGE)

"""--check-predictions: the target model (harness.analysis.targetmodel) checked on this machine. It calibrates
on one configuration of a scenario (1 rank, its workers, raw storage, warm page cache, its decoder, batch and
image size), with 2 CPUs or more on the same configuration confined to 1 CPU (it measures the CPU a run can
use where the CPU binds), and at one rank more (the ranks' wait, harness.analysis.rankwait); it predicts
configurations that each change one thing, and across the 1-CPU boundary both ways
(harness.analysis.checkcases.cases and pairings), with the model on the CPUs each case's visits had (the
allowance less the outside load measured in them: nothing fitted to a measured samples/s) and its 90%
interval (harness.analysis.predictioninterval), beside it the absolute model (the whole allowance: what it
predicts for another machine, or this one quiet), then measures them: every configuration is
a real run of the harness's cells (harness.run.calibration.launch_group), visited in `rounds` interleaved
passes, so drift of this shared machine falls on all of them. Beside the cells it measures what the
predictions need (harness.run.calibration.side_bench): the disk's cold read rate and latency, the CPU-cost
factor with every core busy, and the read and decode stages' costs in the other configurations.

Writes predictions.jsonl (one line per prediction: config, source, predicted, predicted_shared, its interval,
measured, the errors, flag, the visits' figures) and bench.json in its run directory, and prints the table
(harness.report.predictiontable).
docs/measurements/prediction.md has a measured one.

    python run_bench.py --scenario 4xV100 --check-predictions
    python run_bench.py check-predictions --scenario 4xV100 [--rounds 2] [--steps 60]
    python run_bench.py check-predictions --analyse RUN_DIR

harness.cli builds the Request from either command line; `main(request)` runs it.
"""
from __future__ import annotations

import json
import os
import shlex
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from harness.analysis import predictioninterval, rankwait, stages
from harness.analysis.checkcases import (
    ONE_CPU,
    PREDICTIONS,
    Bench,
    CheckCase,
    Pairing,
    RanksWait,
    case_costs,
    cases,
    error_pct,
    is_copy,
    measured_at,
    pairings,
    predict_case,
    ranks_calibration,
)
from harness.config import scenario as scenario_mod
from harness.errors import EXIT_OK, EXIT_USAGE, UsageError
from harness.measure import hostload
from harness.report import predictiontable
from harness.results import fileformat, rundir
from harness.run.calibration import (
    STORAGES,
    Visit,
    bench_of,
    launch_group,
    materialise_storages,
    read_visits,
    samples_of,
    side_bench,
)
from strategies import registry

# the scenario settings the check takes from the command line (scenario.load's overrides); --steps is the
# check's own (steps per launch), and the check picks its own world sizes and measures steps, not epochs
SCENARIO_SETTINGS = ("samples", "batch_size", "workers", "warmup_steps", "workload")


@dataclass(frozen=True)
class CheckPredictionsRequest:
    """`run_bench.py check-predictions ...` or `run_bench.py --scenario NAME --check-predictions ...`."""

    scenario: str | None = None  # a name from scenarios/ or a TOML path (needed unless `analyse`)
    analyse: Path | None = None  # --analyse RUN_DIR: the table again from a check's run directory
    data_dir: Path = Path("data")
    out: Path = Path("results")
    rounds: int = 2
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


def _calibration(visits: list[Visit], bench: Bench, cpus: int):
    """A calibration's costs, its visits pooled (their rank records; the mean of their figures), measured
    with the share of its CPUs busy that its visits' own CPU and the outside load made (what the contention
    factor is undone at)."""
    lines = [v.line for v in visits]
    records = [r for v in lines for r in v.ranks]
    figures = {k: statistics.mean(float(v.figures.get(k) or 0.0) for v in lines)
               for k in ("rank_cpu_s_per_sample", "device_samples_per_s", "throughput", "other_cpu_pct")}
    figures["step_imbalance"] = 1.0
    workload = lines[0].workload or "pixels"
    costs = stages.costs(records, figures, workload, contention=bench.contention,
                         requests_per_sample=stages.requests_per_sample("raw", workload))
    return measured_at(costs, figures["throughput"], cpus, figures["other_cpu_pct"])


def _visit_row(g: float, v: Visit) -> dict:
    f = v.line.figures
    return {"measured": round(g, 1), "outside_runnable": round(v.outside, 2), "other_cpu_pct": f.get("other_cpu_pct"),
            "loader_cpu_s_per_sample": f.get("loader_cpu_s_per_sample"),
            "rank_cpu_s_per_sample": f.get("rank_cpu_s_per_sample"), "step_imbalance": f.get("step_imbalance")}


def _spread(got: list[float]) -> float:
    """(largest - smallest) / mean of the visits' samples/s, %."""
    mean = statistics.mean(got) if got else 0.0
    return 100.0 * (max(got) - min(got)) / mean if mean else 0.0


def _throughputs(visits: list[Visit]) -> list[float]:
    return [float(v.line.figures.get("throughput") or 0.0) for v in visits]


@dataclass(frozen=True)
class _Model:
    """What every prediction of one check shares: the side bench, the CPU a run can use where the CPU binds
    (the 1-CPU calibration's), the ranks' wait (the calibration at one rank more), one visit's noise."""

    sc: object
    bench: Bench
    allowance: int
    usable: float | None
    ranks: RanksWait | None

    def cpus(self, case: CheckCase, pair: Pairing) -> float:
        """The case's CPUs, as much of them as a run can use (not for the 1-CPU calibration's own launch: it
        would be fitted to its own measurement)."""
        got = 1.0 if self.usable is None or pair.case == ONE_CPU else self.usable
        return (case.cpus or self.allowance) * got

    def predict(self, calib, source: CheckCase, case: CheckCase, cpus: float, outside: float | None = None):
        return predict_case(calib, source, case, self.bench, self.sc.accelerator, cpus, outside, self.ranks)


def _model(sc, all_cases: list[CheckCase], measured: dict[str, list[Visit]], bench: Bench,
           allowance: int) -> _Model:
    ranks = None
    two = ranks_calibration(all_cases)
    if two and measured.get(two) and measured.get("calibration"):
        one_rank = _calibration(measured["calibration"], bench, allowance).rank_s
        wait = rankwait.pooled([rankwait.measure(v.line.ranks, one_rank) for v in measured[two]])
        ranks = RanksWait(wait, samples_of(sc)) if wait else None
    return _Model(sc, bench, allowance, usable_share(measured.get(ONE_CPU) or []), ranks)


def _rows(sc, all_cases: list[CheckCase], measured: dict[str, list[Visit]], bench: Bench,
          allowance: int) -> list[dict]:
    """One row per pairing (checkcases.pairings) whose case and calibration were measured: the model's
    prediction from the calibration's costs on the CPUs the case's visits had (`predicted_shared`: the
    allowance less the outside load measured in them, the headline on this host) with its interval, and on the
    case's whole allowance (`predicted`, the absolute model: another machine's prediction), nothing fitted,
    against the mean of the case's visits' samples/s; a calibration's own row (the 1-rank ones, and the one
    rank more the ranks' wait is measured in) and a case its calibration predicts the same (a copy) are
    flagged and not scored."""
    by_name, calibs, rows = {c.name: c for c in all_cases}, {}, []
    model = _model(sc, all_cases, measured, bench, allowance)
    repeats = {ranks_calibration(all_cases)} if model.ranks else set()
    for pair in pairings(all_cases, allowance):
        if not measured.get(pair.case) or not measured.get(pair.source):
            continue
        source, case, visits = by_name[pair.source], by_name[pair.case], measured[pair.case]
        src_cpus, cpus = model.cpus(source, pair), model.cpus(case, pair)
        if pair.source not in calibs:  # the calibration pooled, and each of its visits alone (the interval's)
            calibs[pair.source] = (_calibration(measured[pair.source], bench, src_cpus),
                                   [_calibration([v], bench, src_cpus) for v in measured[pair.source]])
        calib, per_visit = calibs[pair.source]
        x = model.predict(calib, source, case, cpus)
        outside = statistics.mean(float(v.line.figures.get("other_cpu_pct") or 0.0) for v in visits)
        shared = model.predict(calib, source, case, cpus, outside).samples_per_s
        own = model.predict(calib, source, source, src_cpus).samples_per_s
        got = _throughputs(visits)
        m = statistics.mean(got)
        noise = predictioninterval.pooled_sd(_throughputs(v) for name, v in measured.items() if name != pair.case)
        low_high = predictioninterval.interval(shared, _spread_of(model, calib, per_visit, source, case, cpus,
                                                                  visits, noise))
        flag = ("calibration" if pair.case == pair.source or pair.case in repeats
                else "copy" if is_copy(x.samples_per_s, own) else "")
        rows.append({"config": pair.name, "case": pair.case, "source": pair.source, "settings": case.config(),
                     "predicted": round(x.samples_per_s, 1), "predicted_shared": round(shared, 1),
                     "measured": round(m, 1), "error_pct": round(error_pct(x.samples_per_s, m), 1),
                     "error_shared_pct": round(error_pct(shared, m), 1), "flag": flag, "scored": not flag,
                     "null_error_pct": round(error_pct(statistics.mean(_throughputs(measured[pair.source])), m), 1),
                     "binds": x.binds, "outside_pct": round(outside, 1),
                     "interval": [round(v, 1) for v in low_high] if low_high else None,
                     "inside": bool(low_high and low_high[0] <= m <= low_high[1]),
                     "visits": [_visit_row(g, v) for g, v in zip(got, visits)],
                     "spread_pct": round(_spread(got), 1) if m else None,
                     **_costs_seen(case_costs(calib, source, case, bench, model.ranks), visits)})
    for row in rows:
        calibration_spread = _spread(_throughputs(measured[row["source"]]))
        row["note"] = predictiontable.note(row, calibration_spread) if row["scored"] else ""
    return rows


def _spread_of(model: _Model, calib, per_visit: list, source: CheckCase, case: CheckCase, case_cpus: float,
               visits: list[Visit], noise: tuple[float, int]) -> predictioninterval.Spread:
    """What the case's headline interval is propagated from (harness.analysis.predictioninterval): the
    prediction from each calibration visit's costs alone (`per_visit`), at each of the case's visits'
    outside load, and one visit's noise (`noise`: sd and df, pooled over every other case's visits)."""
    loads = [float(v.line.figures.get("other_cpu_pct") or 0.0) for v in visits]
    costs = tuple(model.predict(c, source, case, case_cpus, statistics.mean(loads)).samples_per_s for c in per_visit)
    at_load = tuple(model.predict(calib, source, case, case_cpus, x).samples_per_s for x in loads)
    return predictioninterval.Spread(costs=costs, load=at_load, noise_sd=noise[0], noise_df=noise[1],
                                     visits=len(visits))


def usable_share(visits: list[Visit]) -> float | None:
    """The share of its CPUs a run uses where the CPU binds it, measured in the 1-CPU calibration (the CPU
    binds there): its samples/s x its loader's and rank's CPU per sample over the one CPU less the outside
    load its visits saw; what is missing is the launcher's, the scheduler's and the harness's own threads'.
    The mean over its visits, at most 1; None without visits."""
    used = []
    for v in visits:
        f = v.line.figures
        per_sample = float(f.get("loader_cpu_s_per_sample") or 0.0) + float(f.get("rank_cpu_s_per_sample") or 0.0)
        had = 1.0 - min(95.0, float(f.get("other_cpu_pct") or 0.0)) / 100.0
        if per_sample and f.get("throughput"):
            used.append(float(f.get("throughput")) * per_sample / had)
    return min(1.0, statistics.mean(used)) if used else None


def _costs_seen(predicted, visits: list[Visit]) -> dict:
    """The CPU costs per sample (ms) the prediction used beside those the visits measured."""
    def mean_ms(key: str) -> float:
        return round(1e3 * statistics.mean(float(v.line.figures.get(key) or 0.0) for v in visits), 3)

    return {"loader_ms": {"predicted": round(predicted.loader_s * 1e3, 3), "measured": mean_ms(
                "loader_cpu_s_per_sample")},
            "rank_ms": {"predicted": round(predicted.rank_s * 1e3, 3), "measured": mean_ms("rank_cpu_s_per_sample")}}


def _plan(sc, only: list[str] | None, allowance: int) -> tuple[CheckCase, list[CheckCase]]:
    """The calibration and the cases (`only`: the names to keep; the calibration always runs) on a run
    allowed `allowance` CPUs (2 or more: the 1-CPU calibration too)."""
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
    """(round, position, cases of one launch) in the order they run: the second round in reverse."""
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
    """The predictions and the measurements of a check's run directory: predictions.jsonl, the table."""
    measured: dict[str, list[Visit]] = {c.name: [] for c in all_cases}
    for r, i, group in _rounds(all_cases, rounds):
        for name, visit in read_visits(run_dir / "runs" / f"r{r}-{i}", group).items():
            measured[name].append(visit)
    bench = bench_of(json.loads((run_dir / "bench.json").read_text()))
    rows = _rows(sc, all_cases, measured, bench, allowance)
    fileformat.write_lines(run_dir / "predictions.jsonl", rows, PREDICTIONS)  # versioned, replaced atomically
    print(predictiontable.table(rows))
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
    """--analyse RUN_DIR: the table again from a check's run directory (the model changed, or to read it)."""
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
    """Import each --plugin module (its strategies register), before the scenario naming them is loaded."""
    for module in modules:
        try:
            registry.load_plugin(module)
        except registry.PluginError as err:
            raise UsageError(f"--plugin {module}: {err}") from None


def main(request: Request) -> int:
    """Run the check (or, with `analyse`, its table again); a mistake in the request is a UsageError."""
    load_plugins(request.plugins)
    if request.analyse:
        return reanalyse(request.analyse)
    if not request.scenario:
        raise UsageError("give --scenario NAME (or --analyse RUN_DIR)")
    return run(request)


if __name__ == "__main__":
    print("python -m harness.commands.check_predictions is now: python run_bench.py check-predictions "
          f"{shlex.join(sys.argv[1:])}".rstrip(), file=sys.stderr)
    sys.exit(EXIT_USAGE)

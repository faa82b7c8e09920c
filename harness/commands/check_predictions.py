"""--check-predictions: the target model (harness.analysis.targetmodel) checked on this machine. It calibrates
on one configuration of a scenario (1 rank, its workers, raw storage, warm page cache, its decoder, batch and
image size), predicts configurations that each change one thing (harness.analysis.checkcases.cases), then
measures them: every configuration is a real run of the harness's cells (harness.run.calibration.launch_group),
visited in `rounds` interleaved passes (the calibration in each), so drift of this shared machine falls on all
of them. Beside the cells it measures what the predictions need (harness.run.calibration.side_bench): the
disk's cold read rate and latency, the CPU-cost factor with every core busy, and the read and decode stages'
costs in the other configurations.

Writes predictions.jsonl (one line per configuration: config, predicted, measured, error_pct, the visits'
figures) and bench.json in its run directory, and prints the table. docs/prediction.md has a measured one.

    python run_bench.py --scenario 4xV100 --check-predictions
    python run_bench.py check-predictions --scenario 4xV100 [--rounds 2] [--steps 60]
    python run_bench.py check-predictions --analyse RUN_DIR

harness.cli builds the Request from either command line; `main(request)` runs it.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shlex
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from harness.analysis import stages
from harness.analysis.checkcases import (
    PREDICTIONS,
    Bench,
    CheckCase,
    case_costs,
    cases,
    error_pct,
    predict_case,
    run_cores,
    summary,
)
from harness.config import scenario as scenario_mod
from harness.errors import EXIT_OK, EXIT_USAGE, UsageError
from harness.results import fileformat, rundir
from harness.run.calibration import (
    STORAGES,
    Visit,
    bench_of,
    launch_group,
    materialise_storages,
    read_visits,
    side_bench,
)
from strategies import registry

RAW_REQUESTS = 2.0  # the raw storage reads a file per field of a sample: the pixels workload's JPEG and caption
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


def _calibration(visits: list[Visit], bench: Bench, cores: int, requests: float):
    """The calibration's costs, its visits pooled (their rank records; the mean of their figures)."""
    lines = [v.line for v in visits]
    records = [r for v in lines for r in v.ranks]
    figures = {k: statistics.mean(float(v.figures.get(k) or 0.0) for v in lines)
               for k in ("rank_cpu_s_per_sample", "device_samples_per_s", "throughput")}
    figures["step_imbalance"] = 1.0
    costs = stages.costs(records, figures, lines[0].workload or "pixels", contention=bench.contention,
                         requests_per_sample=requests)
    return dataclasses.replace(costs, busy_share=1.0)  # a shared host: every core busy (the factor cancels)


def _visit_row(g: float, x, v: Visit) -> dict:
    f = v.line.figures
    return {"measured": round(g, 1), "predicted": round(x.samples_per_s, 1), "outside_runnable": round(v.outside, 2),
            "other_cpu_pct": f.get("other_cpu_pct"), "loader_cpu_s_per_sample": f.get("loader_cpu_s_per_sample"),
            "rank_cpu_s_per_sample": f.get("rank_cpu_s_per_sample"), "step_imbalance": f.get("step_imbalance")}


def _rows(sc, base: CheckCase, all_cases: list[CheckCase], measured: dict[str, list[Visit]], bench: Bench,
          cores: int) -> list[dict]:
    """One row per case: its prediction on this host as the calibration found it (the CPU the run got,
    fitted to the calibration visits' mean samples/s, checkcases.run_cores), against the mean of its visits'
    measured samples/s; and the prediction for this host to itself (predicted_idle_host)."""
    calib = _calibration(measured["calibration"], bench, cores, requests=RAW_REQUESTS)
    budget = run_cores(calib, base, bench, sc.accelerator, cores,
                       statistics.mean(float(v.line.figures.get("throughput") or 0.0) for v in measured["calibration"]))
    rows = []
    for case in all_cases:
        visits = measured[case.name]
        predicted = [predict_case(calib, base, case, bench, sc.accelerator, cores, budget) for _ in visits]
        idle = predict_case(calib, base, case, bench, sc.accelerator, float(cores))
        got = [float(v.line.figures.get("throughput") or 0.0) for v in visits]
        p, m = statistics.mean(x.samples_per_s for x in predicted), statistics.mean(got)
        rows.append({"config": case.name, "settings": case.config(), "predicted": round(p, 1),
                     "measured": round(m, 1), "error_pct": round(error_pct(p, m), 1), "binds": predicted[0].binds,
                     "predicted_idle_host": round(idle.samples_per_s, 1), "run_cores": round(budget, 3),
                     "visits": [_visit_row(g, x, v) for g, x, v in zip(got, predicted, visits)],
                     "spread_pct": round(100.0 * (max(got) - min(got)) / m, 1) if m else None,
                     **_costs_seen(case_costs(calib, base, case, bench), visits)})
    calib_spread = rows[0]["spread_pct"] or 0.0
    for row in rows[1:]:
        row["note"] = _note(row, calib_spread)
    return rows


def _costs_seen(predicted, visits: list[Visit]) -> dict:
    """The CPU costs per sample (ms) the prediction used beside those the visits measured."""
    def mean_ms(key: str) -> float:
        return round(1e3 * statistics.mean(float(v.line.figures.get(key) or 0.0) for v in visits), 3)

    return {"loader_ms": {"predicted": round(predicted.loader_s * 1e3, 3), "measured": mean_ms(
                "loader_cpu_s_per_sample")},
            "rank_ms": {"predicted": round(predicted.rank_s * 1e3, 3), "measured": mean_ms("rank_cpu_s_per_sample")}}


def _note(row: dict, calib_spread: float) -> str:
    """Why a case misses (|error| > 15%), from its figures: noise, or a cost the model held that changed."""
    if abs(row["error_pct"] or 0) <= 15:
        return ""
    why = []
    for key, what in (("loader_ms", "loader"), ("rank_ms", "rank's own")):
        seen = row[key]
        if seen["predicted"] and abs(seen["measured"] / seen["predicted"] - 1) > 0.15:
            why.append(f"{what} CPU {seen['predicted']:.3f} ms/sample predicted, {seen['measured']:.3f} measured")
    if calib_spread > 15 or (row["spread_pct"] or 0) > 15:
        why.append(f"noise: the calibration's visits spread {calib_spread:.0f}%, this case's {row['spread_pct']:.0f}%")
    return "; ".join(why) or "the bound model: no cost changed, the host gave the case other CPU"


def table(rows: list[dict]) -> str:
    """The calibration first (the model reproduces the mean of its visits: that fixed the run's CPU), then the
    cases, the notes on those that miss, and the summary over the cases."""
    lines = [f"{'configuration':<26} {'predicted':>9} {'measured':>9} {'error %':>8} {'spread %':>8}  binds"]
    for r in rows:
        lines.append(f"{r['config']:<26} {r['predicted']:>9.1f} {r['measured']:>9.1f} {r['error_pct']:>+8.1f} "
                     f"{r['spread_pct'] or 0:>8.1f}  {r['binds']}")
    lines += [f"  {r['config']}: {r['note']}" for r in rows if r.get("note")]
    s = summary([r["error_pct"] for r in rows if r["config"] != "calibration"])
    lines.append(f"median |error| {s['median_abs_error_pct']:.1f}%, max {s['max_abs_error_pct']:.1f}%, "
                 f"{s['within_15']} of {s['cases']} within 15% (samples/s, all ranks; spread: max - min of "
                 "the visits over their mean)")
    return "\n".join(lines)


def _plan(sc, only: list[str] | None) -> tuple[CheckCase, list[CheckCase]]:
    """The calibration and the cases (`only`: the names to keep; the calibration always runs)."""
    if sc.training.workload != "pixels":
        raise UsageError(f"--check-predictions: scenario {sc.name} has workload {sc.training.workload!r}; the "
                         "check changes decoders and image sizes, so give a pixels scenario (e.g. 4xV100)")
    tr = sc.training
    base = CheckCase("calibration", 1, max(1, tr.workers), tr.batch_size, tr.image_size, "raw", tr.decoder, "warm")
    all_cases = cases(base, max(32, int(round(tr.image_size * 1.4 / 16)) * 16), _other_decoder(tr.decoder))
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


def analyse(run_dir: Path, sc, base: CheckCase, all_cases: list[CheckCase], rounds: int) -> list[dict]:
    """The predictions and the measurements of a check's run directory: predictions.jsonl, the table."""
    measured: dict[str, list[Visit]] = {c.name: [] for c in all_cases}
    for r, i, group in _rounds(all_cases, rounds):
        for name, visit in read_visits(run_dir / "runs" / f"r{r}-{i}", group).items():
            measured[name].append(visit)
    bench = bench_of(json.loads((run_dir / "bench.json").read_text()))
    rows = _rows(sc, base, all_cases, measured, bench, len(os.sched_getaffinity(0)))
    fileformat.write_lines(run_dir / "predictions.jsonl", rows, PREDICTIONS)  # versioned, replaced atomically
    print(table(rows))
    return rows


def run(request: Request) -> int:
    """The check; `request.cases`: the names of the cases to run (the calibration always runs)."""
    overrides = request.overrides()
    sc = scenario_mod.load(request.scenario, overrides)
    base, all_cases = _plan(sc, list(request.cases) or None)
    rounds, steps, quiet = request.rounds, request.steps, request.quiet
    if rounds < 1 or steps < 10:
        raise UsageError("--check-predictions: --rounds must be >= 1 and --steps >= 10")
    cores = len(os.sched_getaffinity(0))
    run_dir = rundir.new_run_dir(request.out, f"{sc.name}-check")
    rundir.write_json(run_dir / "check.json", {"scenario": request.scenario, "rounds": rounds, "steps": steps,
                                               "cases": [c.name for c in all_cases], "overrides": overrides,
                                               "plugins": list(request.plugins)})
    say = (lambda text: None) if quiet else (lambda text: print(text, file=sys.stderr, flush=True))
    started = time.perf_counter()
    data_paths = materialise_storages(sc, base, STORAGES, run_dir, request.data_dir, steps, progress=not quiet)
    say("measuring the disk, the contention factor and the stages' costs ...")
    rundir.write_json(run_dir / "bench.json", side_bench(sc, base, all_cases, data_paths, cores))
    for r, i, group in _rounds(all_cases, rounds):
        say(f"round {r + 1}/{rounds}, launch {i + 1}: {', '.join(c.name for c in group)}")
        launch_group(sc, group, run_dir / "runs" / f"r{r}-{i}", request.data_dir, steps, request.plugins)
    rows = analyse(run_dir, sc, base, all_cases, rounds)
    say(f"the run's CPU on this host, fitted to the calibration: {rows[0]['run_cores']:.2f} of {cores} cores")
    say(f"\n{len(all_cases)} configurations x {rounds} rounds in {time.perf_counter() - started:.0f} s; "
        f"results: {run_dir}")
    return EXIT_OK


def reanalyse(run_dir: Path) -> int:
    """--analyse RUN_DIR: the table again from a check's run directory (the model changed, or to read it)."""
    info = json.loads((Path(run_dir) / "check.json").read_text()) if (Path(run_dir) / "check.json").exists() \
        else {"scenario": Path(run_dir).name.split("-")[1], "rounds": 2, "cases": None}
    load_plugins(tuple(info.get("plugins") or ()))  # those the check ran with
    sc = scenario_mod.load(info["scenario"], info.get("overrides") or None)
    base, all_cases = _plan(sc, None)
    if info.get("cases"):
        all_cases = [c for c in all_cases if c.name in info["cases"]]
    analyse(Path(run_dir), sc, base, all_cases, int(info["rounds"]))
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

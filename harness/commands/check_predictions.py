"""--check-predictions: the target model (harness.analysis.targetmodel) checked on this machine. It calibrates
on one configuration of a scenario (1 rank, its workers, raw storage, warm page cache, its decoder, batch and
image size), and with 2 CPUs or more on the same configuration confined to 1 CPU; it predicts configurations
that each change one thing, and across the 1-CPU boundary both ways (harness.analysis.checkcases.cases and
pairings), with the model on the CPUs each case's visits had (the allowance less the outside load measured in
them: nothing fitted to a measured samples/s), beside it the absolute model (the whole allowance: what it
predicts for another machine, or this one quiet), then measures them: every configuration is
a real run of the harness's cells (harness.run.calibration.launch_group), visited in `rounds` interleaved
passes, so drift of this shared machine falls on all of them. Beside the cells it measures what the
predictions need (harness.run.calibration.side_bench): the disk's cold read rate and latency, the CPU-cost
factor with every core busy, and the read and decode stages' costs in the other configurations.

Writes predictions.jsonl (one line per prediction: config, source, predicted, predicted_shared, measured, the
errors, flag, the visits' figures) and bench.json in its run directory, and prints the table.
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

from harness.analysis import stages
from harness.analysis.checkcases import (
    COPY_PCT,
    PREDICTIONS,
    Bench,
    CheckCase,
    case_costs,
    cases,
    error_pct,
    is_copy,
    measured_at,
    pairings,
    predict_case,
    summary,
)
from harness.config import scenario as scenario_mod
from harness.errors import EXIT_OK, EXIT_USAGE, UsageError
from harness.measure import hostload
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


def _rows(sc, all_cases: list[CheckCase], measured: dict[str, list[Visit]], bench: Bench,
          allowance: int) -> list[dict]:
    """One row per pairing (checkcases.pairings) whose case and calibration were measured: the model's
    prediction from the calibration's costs on the CPUs the case's visits had (`predicted_shared`: the
    allowance less the outside load measured in them, the headline on this host) and on the case's whole
    allowance (`predicted`, the absolute model: another machine's prediction), nothing fitted, against the mean
    of the case's visits' samples/s; a calibration's own row and a case its calibration predicts the same (a copy)
    are flagged and not scored."""
    by_name, calibs, rows = {c.name: c for c in all_cases}, {}, []
    for pair in pairings(all_cases, allowance):
        if not measured.get(pair.case) or not measured.get(pair.source):
            continue
        source, case, visits = by_name[pair.source], by_name[pair.case], measured[pair.case]
        src_cpus, cpus = source.cpus or allowance, case.cpus or allowance
        if pair.source not in calibs:
            calibs[pair.source] = _calibration(measured[pair.source], bench, src_cpus)
        calib = calibs[pair.source]
        x = predict_case(calib, source, case, bench, sc.accelerator, cpus)
        outside = statistics.mean(float(v.line.figures.get("other_cpu_pct") or 0.0) for v in visits)
        shared = predict_case(calib, source, case, bench, sc.accelerator, cpus, outside).samples_per_s
        own = predict_case(calib, source, source, bench, sc.accelerator, src_cpus).samples_per_s
        got = _throughputs(visits)
        m = statistics.mean(got)
        flag = "calibration" if pair.case == pair.source else "copy" if is_copy(x.samples_per_s, own) else ""
        rows.append({"config": pair.name, "source": pair.source, "settings": case.config(),
                     "predicted": round(x.samples_per_s, 1), "predicted_shared": round(shared, 1),
                     "measured": round(m, 1), "error_pct": round(error_pct(x.samples_per_s, m), 1),
                     "error_shared_pct": round(error_pct(shared, m), 1), "flag": flag, "scored": not flag,
                     "null_error_pct": round(error_pct(statistics.mean(_throughputs(measured[pair.source])), m), 1),
                     "binds": x.binds, "outside_pct": round(outside, 1),
                     "visits": [_visit_row(g, v) for g, v in zip(got, visits)],
                     "spread_pct": round(_spread(got), 1) if m else None,
                     **_costs_seen(case_costs(calib, source, case, bench), visits)})
    for row in rows:
        row["note"] = _note(row, _spread(_throughputs(measured[row["source"]]))) if row["scored"] else ""
    return rows


def _costs_seen(predicted, visits: list[Visit]) -> dict:
    """The CPU costs per sample (ms) the prediction used beside those the visits measured."""
    def mean_ms(key: str) -> float:
        return round(1e3 * statistics.mean(float(v.line.figures.get(key) or 0.0) for v in visits), 3)

    return {"loader_ms": {"predicted": round(predicted.loader_s * 1e3, 3), "measured": mean_ms(
                "loader_cpu_s_per_sample")},
            "rank_ms": {"predicted": round(predicted.rank_s * 1e3, 3), "measured": mean_ms("rank_cpu_s_per_sample")}}


def _note(row: dict, calib_spread: float) -> str:
    """Why a case misses (|error| > 15% on this host), from its figures: noise, or a cost the model held that
    changed, or outside load that the absolute model does not take out."""
    if abs(row["error_shared_pct"] or 0) <= 15:
        return ""
    why = []
    for key, what in (("loader_ms", "loader"), ("rank_ms", "rank's own")):
        seen = row[key]
        if seen["predicted"] and abs(seen["measured"] / seen["predicted"] - 1) > 0.15:
            why.append(f"{what} CPU {seen['predicted']:.3f} ms/sample predicted, {seen['measured']:.3f} measured")
    if calib_spread > 15 or (row["spread_pct"] or 0) > 15:
        why.append(f"noise: the calibration's visits spread {calib_spread:.0f}%, this case's {row['spread_pct']:.0f}%")
    outside = max((v.get("other_cpu_pct") or 0.0) for v in row["visits"]) if row["visits"] else 0.0
    if outside > hostload.OUTSIDE_LOAD_PCT:
        why.append(f"other processes used up to {outside:.0f}% of the CPUs during its visits (taken out as their "
                   f"mean; the absolute model, which leaves it in, is {row['error_pct']:+.1f}% off)")
    return "; ".join(why) or "the bound model: no cost it holds changed, and the host was quiet: outside its range"


HEADLINE = ("the model on this host as it ran (the calibration's costs on the CPUs each case's visits had: "
            "the allowance less the outside load measured in them; nothing fitted)")
ABSOLUTE = "the absolute model (the whole allowance: what it predicts for another machine, or this one quiet)"


def table(rows: list[dict]) -> str:
    """Every prediction (the calibrations first among them): the headline, the model on the CPUs the case's
    visits had, then the absolute model (labelled) and the outside load each case saw; the flags, the notes on
    the scored cases that miss, and the summaries over the scored cases: the headline's, the absolute model's,
    and a predictor that answers the calibration's measured samples/s for every case (what the model must
    beat); then the outside load the scored cases ran beside."""
    lines = [f"{'configuration':<34} {'predicted':>9} {'measured':>9} {'error %':>8} {'absolute':>9} {'error %':>8} "
             f"{'load %':>6} {'spread %':>8}  {'flag':<11} binds"]
    for r in rows:
        lines.append(f"{r['config']:<34} {r['predicted_shared']:>9.1f} {r['measured']:>9.1f} "
                     f"{r['error_shared_pct']:>+8.1f} {r['predicted']:>9.1f} {r['error_pct']:>+8.1f} "
                     f"{r.get('outside_pct') or 0:>6.1f} {r['spread_pct'] or 0:>8.1f}  {r['flag'] or '-':<11} "
                     f"{r['binds']}")
    lines += [f"  {r['config']}: {r['note']}" for r in rows if r.get("note")]
    scored = [r for r in rows if r["scored"]]
    for key, what in (("error_shared_pct", HEADLINE), ("error_pct", ABSOLUTE),
                      ("null_error_pct", "a predictor that answers the calibration's measured samples/s")):
        s = summary([r[key] for r in scored])
        if s["cases"]:
            lines.append(f"{what}: median |error| {s['median_abs_error_pct']:.1f}%, max "
                         f"{s['max_abs_error_pct']:.1f}%, {s['within_15']} of {s['cases']} within 15%")
    loads = [r.get("outside_pct") or 0.0 for r in scored]
    if loads:
        lines.append(f"outside load during the scored cases' visits (processes outside the run, % of the host's "
                     f"CPUs, each case's mean): median {statistics.median(loads):.1f}%, max {max(loads):.1f}%"
                     + (" (a quiet host: the two models agree)" if max(loads) <= hostload.OUTSIDE_LOAD_PCT else
                        " (a loaded host: read the headline; the absolute model is the prediction for another "
                        "machine)"))
    copies = [r["config"] for r in rows if r["flag"] == "copy"]
    lines.append(f"scored: {len(scored)} cases; not scored: the calibrations, and {len(copies)} predicted as "
                 f"their calibration (copy, within {COPY_PCT:g}%){': ' + ', '.join(copies) if copies else ''} "
                 "(samples/s, all ranks; predicted: on the CPUs the visits had; absolute: on the whole "
                 "allowance; load: outside load; spread: max - min of the visits over their mean)")
    return "\n".join(lines)


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
    print(table(rows))
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

"""--check-predictions: the target model (harness.results.targetmodel) checked on this machine. It calibrates
on one configuration of a scenario (1 rank, its workers, raw storage, warm page cache, its decoder, batch and
image size), predicts configurations that each change one thing (harness.results.checkcases.cases), then
measures them: every configuration is a real run of the harness's cells (harness.run.launch.spawn), visited
in `rounds` interleaved passes (the calibration in each), so drift of this shared machine falls on all of
them. Beside the cells it measures what the predictions need: the disk's cold read rate and latency, the
CPU-cost factor with every core busy, and the read and decode stages' costs in the other configurations.

Writes predictions.jsonl (one line per configuration: config, predicted, measured, error_pct, the visits'
figures) and bench.json in its run directory, and prints the table. docs/prediction.md has a measured one.

    python run_bench.py --scenario 4xV100 --check-predictions
    python -m harness.commands.check_predictions --scenario 4xV100 [--rounds 2] [--steps 60]
    python -m harness.commands.check_predictions --analyse RUN_DIR
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from harness.commands import checkbench
from harness.config import scenario as scenario_mod
from harness.config.matrix import Cell, expand
from harness.config.matrixload import StrategyChoice
from harness.config.runconfig import LaunchConfig
from harness.data.decoders import resized_shapes
from harness.data.fields import FIELDS_FOR
from harness.data.generator import image_sides
from harness.errors import EXIT_OK, UsageError, run_module
from harness.results import rundir, stages
from harness.results.cellresult import CellResult
from harness.results.checkcases import Bench, CheckCase, case_costs, cases, error_pct, predict_case, run_cores, summary
from harness.run import launch
from strategies import registry

STORAGES = ("raw", "mmap", "hdf5")
RAW_REQUESTS = 2.0  # the raw storage reads a file per field of a sample: the pixels workload's JPEG and caption


@dataclass(frozen=True)
class Visit:
    """One measured visit of a case: its cell line, and the host's other runnable tasks during its launch
    (checkbench.OutsideRunnable)."""

    line: CellResult
    outside: float


def _variant(sc, case: CheckCase, storages: list[str], steps: int):
    """The scenario as one launch of the check runs it: the case's settings, default strategies elsewhere."""
    tr = dataclasses.replace(sc.training, workers=case.workers, batch_size=case.batch_size,
                             image_size=case.image_size, decoder=case.decoder, steps=steps, epochs=0,
                             warmup_steps=max(3, sc.training.warmup_steps))
    matrix = {axis: [StrategyChoice(axis, name)] for axis, name in registry.DEFAULTS.items()}
    matrix["storage"] = [StrategyChoice("storage", s) for s in storages]
    return dataclasses.replace(sc, world_size=case.world_size, training=tr, matrix=matrix)


def _launch(sc, group: list[CheckCase], run_dir: Path, data_dir: Path, steps: int) -> dict[str, Visit]:
    """One launch: the group's cases (they differ only in storage) as cells; case name -> its visit."""
    variant = _variant(sc, group[0], [c.storage for c in group], steps)
    cells: list[Cell] = expand(variant)
    config = LaunchConfig(variant, cells, run_dir, data_dir, "emulated", progress=False,
                          cache_state=group[0].cache_state, repeats=1, started_at=time.time())
    run_dir.mkdir(parents=True, exist_ok=True)
    with checkbench.OutsideRunnable() as outside:
        _, failures = launch.spawn(config, log=lambda line: None)
    if failures:
        raise UsageError(f"--check-predictions: a cell failed in {run_dir}: {failures[0]}")
    rundir.write_json(run_dir / "visit.json", {"cases": [c.name for c in group], "outside_runnable": outside.mean})
    return _visits(run_dir, group)


def _visits(run_dir: Path, group: list[CheckCase]) -> dict[str, Visit]:
    """A launch's visits read back from its directory (cells.jsonl, visit.json)."""
    by_storage = {r.name("storage"): r for r in rundir.read_results(run_dir)}
    info = run_dir / "visit.json"
    outside = (json.loads(info.read_text()).get("outside_runnable") if info.exists() else None) or 0.0
    return {c.name: Visit(by_storage[c.storage], outside) for c in group if c.storage in by_storage}


def _bench(sc, base: CheckCase, all_cases: list[CheckCase], data_paths: dict, cores: int) -> dict:
    """The side measurements (harness.commands.checkbench), as bench.json holds them (bench_of reads them
    back as the pure Bench)."""
    storage = {s: StrategyChoice("storage", s).create() for s in STORAGES}
    indices = list(range(0, min(len_of(sc), 2048), 4))[:256]
    read_s = {s: checkbench.read_cost(storage[s], data_paths[s], sc.training.workload, indices,
                                      base.batch_size) for s in STORAGES}
    reader = storage["raw"].open(data_paths["raw"], fields=FIELDS_FOR["pixels"])
    jpegs = [s.jpeg for s in reader.read_batch(indices[:96])]
    pairs = {(c.image_size, c.decoder) for c in all_cases}
    decode_s = {p: checkbench.decode_cost(jpegs, *p) for p in sorted(pairs)}
    sides = image_sides(sc.dataset)
    area = {size: float((resized_shapes(sides, size).prod(axis=1)).mean())
            for size in sorted({c.image_size for c in all_cases})}
    disk = checkbench.disk(storage["hdf5"].files(data_paths["hdf5"]))  # one large file
    disk["small_files"] = checkbench.cold_files(storage["raw"].files(data_paths["raw"]))  # the raw storage's
    contention = checkbench.contention(jpegs[:32], base.image_size, cores)
    return {"read_s": read_s, "decode_s": {f"{k[0]}/{k[1]}": v for k, v in decode_s.items()},
            "area": area, "disk": disk, "contention": contention}


def _other_decoder(decoder: str) -> str | None:
    """PIL against simplejpeg, whichever the scenario does not use (None without simplejpeg)."""
    if decoder != "pil":
        return "pil"
    try:
        import simplejpeg  # noqa: F401
    except ImportError:
        return None
    return "simplejpeg"


def len_of(sc) -> int:
    return int(getattr(sc.dataset, "samples", 0) or 0)


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


def bench_of(obj: dict) -> Bench:
    """bench.json back as the pure Bench. With the small files' figures (the raw storage: one file, one
    request per sample), a request's latency is a cold file's extra wall time less its bytes at the
    sequential rate, and its extra CPU is per request; else the 4 KiB random reads' latency and the CPU
    per cold byte of the large file."""
    disk, small = obj["disk"], obj["disk"].get("small_files")
    latency_ms, per_request = disk["latency_ms"], 0.0
    if small and disk["read_mb_s"]:
        transfer = small["bytes_per_file"] / (disk["read_mb_s"] * 1e6)
        latency_ms = max(0.0, small["extra_wall_s_per_file"] - transfer) * 1e3
        per_request = small["extra_cpu_s_per_file"]
    return Bench(read_s=obj["read_s"], decode_s={(int(k.split("/")[0]), k.split("/")[1]): v
                                                 for k, v in obj["decode_s"].items()},
                 area={int(k): v for k, v in obj["area"].items()}, disk_mb_s=disk["read_mb_s"],
                 disk_latency_ms=latency_ms, cold_cpu_s_per_byte=disk["cold_cpu_s_per_byte"],
                 cold_cpu_s_per_request=per_request, contention=obj["contention"]["factor"])


def analyse(run_dir: Path, sc, base: CheckCase, all_cases: list[CheckCase], rounds: int) -> list[dict]:
    """The predictions and the measurements of a check's run directory: predictions.jsonl, the table."""
    measured: dict[str, list[Visit]] = {c.name: [] for c in all_cases}
    for r, i, group in _rounds(all_cases, rounds):
        for name, visit in _visits(run_dir / "runs" / f"r{r}-{i}", group).items():
            measured[name].append(visit)
    bench = bench_of(json.loads((run_dir / "bench.json").read_text()))
    rows = _rows(sc, base, all_cases, measured, bench, len(os.sched_getaffinity(0)))
    (run_dir / "predictions.jsonl").unlink(missing_ok=True)
    for row in rows:
        rundir.append_line(run_dir / "predictions.jsonl", row)
    print(table(rows))
    return rows


def run(scenario_ref: str, data_dir: Path, out: Path, rounds: int = 2, steps: int = 60,
        quiet: bool = False, only: list[str] | None = None) -> int:
    """The check; `only`: the names of the cases to run (the calibration always runs)."""
    sc = scenario_mod.load(scenario_ref)
    base, all_cases = _plan(sc, only)
    if rounds < 1 or steps < 10:
        raise UsageError("--check-predictions: --rounds must be >= 1 and --steps >= 10")
    cores = len(os.sched_getaffinity(0))
    run_dir = rundir.new_run_dir(out, f"{sc.name}-check")
    rundir.write_json(run_dir / "check.json", {"scenario": scenario_ref, "rounds": rounds, "steps": steps,
                                               "cases": [c.name for c in all_cases]})
    say = (lambda text: None) if quiet else (lambda text: print(text, file=sys.stderr, flush=True))
    started = time.perf_counter()
    variant = _variant(sc, base, list(STORAGES), steps)
    data_paths = LaunchConfig(variant, expand(variant), run_dir, data_dir,
                              "emulated").materialise_all(progress=not quiet)
    say("measuring the disk, the contention factor and the stages' costs ...")
    rundir.write_json(run_dir / "bench.json", _bench(sc, base, all_cases, data_paths, cores))
    for r, i, group in _rounds(all_cases, rounds):
        say(f"round {r + 1}/{rounds}, launch {i + 1}: {', '.join(c.name for c in group)}")
        _launch(sc, group, run_dir / "runs" / f"r{r}-{i}", data_dir, steps)
    rows = analyse(run_dir, sc, base, all_cases, rounds)
    say(f"the run's CPU on this host, fitted to the calibration: {rows[0]['run_cores']:.2f} of {cores} cores")
    say(f"\n{len(all_cases)} configurations x {rounds} rounds in {time.perf_counter() - started:.0f} s; "
        f"results: {run_dir}")
    return EXIT_OK


def reanalyse(run_dir: Path) -> int:
    """--analyse RUN_DIR: the table again from a check's run directory (the model changed, or to read it)."""
    info = json.loads((Path(run_dir) / "check.json").read_text()) if (Path(run_dir) / "check.json").exists() \
        else {"scenario": Path(run_dir).name.split("-")[1], "rounds": 2, "cases": None}
    sc = scenario_mod.load(info["scenario"])
    base, all_cases = _plan(sc, None)
    if info.get("cases"):
        all_cases = [c for c in all_cases if c.name in info["cases"]]
    analyse(Path(run_dir), sc, base, all_cases, int(info["rounds"]))
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.commands.check_predictions", description=__doc__.split(
        "\n")[0])
    p.add_argument("--scenario")
    p.add_argument("--analyse", type=Path, metavar="RUN_DIR", help="the table again from a check's run directory")
    p.add_argument("--data-dir", type=Path, default=Path("data"))
    p.add_argument("--out", type=Path, default=Path("results"))
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--case", action="append", default=None, help="run only this case (repeatable)")
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    if a.analyse:
        return reanalyse(a.analyse)
    if not a.scenario:
        raise UsageError("give --scenario NAME (or --analyse RUN_DIR)")
    return run(a.scenario, a.data_dir, a.out, a.rounds, a.steps, a.quiet, a.case)


def from_args(args: argparse.Namespace) -> int:
    """python run_bench.py --scenario NAME --check-predictions (harness.cli dispatches here)."""
    return run(args.scenario, args.data_dir, args.out, quiet=args.quiet)


if __name__ == "__main__":
    run_module("check_predictions", main)

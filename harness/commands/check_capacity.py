"""The capacity figure checked here (MLPerf Storage's measure: how many accelerators this host keeps at AU >=
90%), where prediction and measurement can disagree: per workload (pixels, features), a 1-rank calibration
and runs at 1, 2 and 4 ranks, each a real launch of the harness's cells (raw storage, the scenario's workers).
The model predicts each size's AU from the calibration's costs on the run's CPUs (its allowance: nothing
fitted to a measured figure); beside it, labelled, the shared-host correction less the outside load measured
in that launch. The capacity among the sizes, predicted against measured, is the check: it fails (exit 1)
where they differ. `scenarios/capacity.toml` defines an accelerator slow enough that the 2-core development
host feeds one or two and not four; on a scenario whose accelerator this host feeds at no size (or at every
size) the check says that it cannot tell. Writes capacity.jsonl, prints the table; docs/measurements/prediction.md has
a measured one.

    python run_bench.py check-capacity --scenario capacity [--steps 40]
"""
from __future__ import annotations

import dataclasses
import shlex
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.analysis import stages
from harness.analysis.checkcases import Bench, CheckCase, measured_at, predict_case
from harness.analysis.targetmodel import AU_TARGET_PCT, capacity
from harness.config import scenario as scenario_mod
from harness.config.target import Target
from harness.errors import EXIT_INCONCLUSIVE, EXIT_OK, EXIT_REGRESSION, EXIT_USAGE
from harness.measure import hostload
from harness.measure.hostload import OUTSIDE_LOAD_PCT
from harness.results import rundir
from harness.run.calibration import launch_group, materialise_storages

SIZES = (1, 2, 4)
NO_BENCH = Bench({}, {}, {})  # the cases change only the ranks: no side measurement scales a cost


@dataclass(frozen=True)
class CheckCapacityRequest:
    """`run_bench.py check-capacity --scenario NAME [--steps N]`."""

    scenario: str
    data_dir: Path = Path("data")
    out: Path = Path("results")
    steps: int = 40  # measured steps per cell of each launch


Request = CheckCapacityRequest  # what harness.cli builds


def _calibration(visit, workload: str, cores: int):
    """The 1-rank launch's costs, with the share of the CPUs its own CPU and the outside load kept busy."""
    f = visit.line.figures
    return measured_at(stages.costs(visit.line.ranks, f, workload), float(f.get("throughput") or 0), cores,
                       float(f.get("other_cpu_pct") or 0))


def _row(workload: str, case: CheckCase, visit, calib, base: CheckCase, sc, cores: int) -> dict:
    """The launch's measured AU and samples/s beside the model's (absolute, and less the outside load)."""
    f = visit.line.figures
    outside = float(f.get("other_cpu_pct") or 0.0)
    p = predict_case(calib, base, case, NO_BENCH, sc.accelerator, cores)
    shared = predict_case(calib, base, case, NO_BENCH, sc.accelerator, cores, outside)
    return {"workload": workload, "world_size": case.world_size, "other_cpu_pct": round(outside, 1),
            "predicted_au_pct": round(p.au_pct, 1), "predicted_shared_au_pct": round(shared.au_pct, 1),
            "measured_au_pct": round(float(f.get("au_pct") or 0), 1), "predicted": round(p.samples_per_s, 1),
            "measured": round(float(f.get("throughput") or 0), 1), "binds": p.binds}


def fed(rows: list[dict], key: str) -> int:
    """The largest size whose AU (`key`) is at least the target, every smaller size too (0: not even 1)."""
    best = 0
    for row in sorted(rows, key=lambda r: r["world_size"]):
        if row[key] < AU_TARGET_PCT:
            break
        best = row["world_size"]
    return best


def verdict(rows: list[dict]) -> tuple[str, bool]:
    """One workload's line and whether prediction and measurement disagree (on a quiet machine: a disagreement
    while a launch ran under outside load above OUTSIDE_LOAD_PCT is inconclusive, `inconclusive`)."""
    wl, predicted, measured = rows[0]["workload"], fed(rows, "predicted_au_pct"), fed(rows, "measured_au_pct")
    sizes = ", ".join(str(r["world_size"]) for r in rows)
    if measured == predicted:
        said = "agree"
        if measured in (0, SIZES[-1]):
            said += (f" (but this host feeds {'none' if measured == 0 else 'all'} of the sizes: the check cannot "
                     "tell a model that over- or under-predicts here; give a scenario whose accelerator this host "
                     "feeds at some sizes and not others, e.g. scenarios/capacity.toml)")
    elif inconclusive(rows):
        loaded = [r["other_cpu_pct"] for r in rows if r["other_cpu_pct"] > OUTSIDE_LOAD_PCT]
        said = (f"inconclusive: outside load {max(loaded):.0f}% in {len(loaded)} of {len(rows)} launches (measure "
                "again on a quieter machine)")
    else:
        said = "DISAGREE"
    return (f"{wl}: kept at AU >= {AU_TARGET_PCT:.0f}% among {sizes} ranks: predicted {predicted}, measured "
            f"{measured}: {said}"), measured != predicted


def inconclusive(rows: list[dict]) -> bool:
    """A workload's launches of which one ran under outside load: its disagreement is not the model's."""
    return any(r["other_cpu_pct"] > OUTSIDE_LOAD_PCT for r in rows)


def exit_code(verdicts: list[tuple[bool, bool]]) -> int:
    """(disagrees, inconclusive) per workload: 1 for a disagreement on a quiet machine, else 4 for one under
    load, else 0."""
    if any(d and not i for d, i in verdicts):
        return EXIT_REGRESSION
    return EXIT_INCONCLUSIVE if any(d for d, _ in verdicts) else EXIT_OK


def main(request: Request) -> int:
    """Per workload: the calibration and the runs at 1, 2 and 4 ranks, capacity.jsonl, the table; exit 1
    where the predicted capacity among the sizes is not the measured one."""
    data_dir, steps = request.data_dir, request.steps
    sc = scenario_mod.load(request.scenario)
    cores = max(1, int(hostload.cpu_allowance() or 1))  # the whole CPUs the run may use, as check-predictions
    run_dir = rundir.new_run_dir(request.out, f"{sc.name}-capacity")
    tr = sc.training
    rows, lines, verdicts = [], [], []
    for workload in ("pixels", "features"):
        scw = dataclasses.replace(sc, training=dataclasses.replace(tr, workload=workload))
        base = CheckCase("calibration", 1, max(1, tr.workers), tr.batch_size, tr.image_size, "raw", tr.decoder)
        materialise_storages(scw, base, ["raw"], run_dir, data_dir, steps, progress=False)
        visits = {}
        for ws in SIZES:
            case = dataclasses.replace(base, name=f"{workload} x{ws}", world_size=ws)
            visits[case] = launch_group(scw, [case], run_dir / "runs" / f"{workload}-{ws}", data_dir,
                                        steps)[case.name]
        calib = _calibration(visits[next(iter(visits))], workload, cores)
        mine = [_row(workload, case, visit, calib, base, scw, cores) for case, visit in visits.items()]
        line, differs = verdict(mine)
        idle = Target(gpus_per_node=1, cores_per_node=float(cores), accelerator=sc.accelerator.name,
                      workers_per_rank=base.workers, batch_size=base.batch_size)
        lines.append(f"{line}; on this host with the best workers per rank the model keeps "
                     f"{capacity(calib, idle, sc.accelerator, most=16)}")
        rows += mine
        verdicts.append((differs, inconclusive(mine)))
    for row in rows:
        rundir.append_line(run_dir / "capacity.jsonl", row)
    print(table(rows, sc.accelerator.name, cores))
    print("\n".join(lines))
    print(f"results: {run_dir}", file=sys.stderr)
    return exit_code(verdicts)


def table(rows: list[dict], accelerator: str, cores: int) -> str:
    """Every launch: the outside load, the AU predicted (absolute; shared-host correction) and measured, the
    samples/s predicted and measured, what binds."""
    out = [f"{accelerator} on {cores} CPUs (the run's allowance); predicted: the calibration's costs, nothing "
           "fitted; shared: less the launch's measured outside load",
           f"{'workload':<9} {'ranks':>5} {'outside %':>9} {'AU % predicted':>14} {'shared':>6} {'measured':>8} "
           f"{'samples/s predicted':>19} {'measured':>8}  binds"]
    for r in rows:
        out.append(f"{r['workload']:<9} {r['world_size']:>5} {r['other_cpu_pct']:>9.1f} {r['predicted_au_pct']:>14.1f} "
                   f"{r['predicted_shared_au_pct']:>6.1f} {r['measured_au_pct']:>8.1f} {r['predicted']:>19.1f} "
                   f"{r['measured']:>8.1f}  {r['binds']}")
    errors = [abs(r["predicted_au_pct"] - r["measured_au_pct"]) for r in rows]
    out.append(f"AU predicted - measured: median {statistics.median(errors):.1f} points, max {max(errors):.1f}")
    return "\n".join(out)


if __name__ == "__main__":
    print("python -m harness.commands.check_capacity is now: python run_bench.py check-capacity "
          f"{shlex.join(sys.argv[1:])}".rstrip(), file=sys.stderr)
    sys.exit(EXIT_USAGE)

"""The capacity figure checked here (MLPerf Storage's measure: how many accelerators this host keeps at AU >=
90%): per workload (pixels, features), a 1-rank calibration and runs at 2 and 4 ranks, each a real launch of
the harness's cells (raw storage, the scenario's workers); the model's AU from the calibration's costs against
the measured AU,
and the capacity it predicts for this host to itself. The run's CPU on this shared host is fitted to each
calibration (checkcases.run_cores), as in --check-predictions. Writes capacity.jsonl
and prints the table. docs/prediction.md has a measured one.

    python run_bench.py check-capacity --scenario 4xV100 [--steps 40]
"""
from __future__ import annotations

import dataclasses
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.analysis import stages
from harness.analysis.checkcases import Bench, CheckCase, processes, run_cores
from harness.analysis.targetmodel import capacity, predict
from harness.config import scenario as scenario_mod
from harness.config.target import Target
from harness.errors import EXIT_OK, EXIT_USAGE
from harness.results import rundir
from harness.run.calibration import launch_group, materialise_storages

SIZES = (1, 2, 4)


@dataclass(frozen=True)
class CheckCapacityRequest:
    """`run_bench.py check-capacity --scenario NAME [--steps N]`."""

    scenario: str
    data_dir: Path = Path("data")
    out: Path = Path("results")
    steps: int = 40  # measured steps per cell of each launch


Request = CheckCapacityRequest  # what harness.cli builds


def _row(workload: str, ws: int, visit, calib, sc, got: float, case: CheckCase) -> dict:
    """The launch's measured AU and samples/s beside the model's, with the run's CPU the calibration got."""
    share = min(1.0, got / processes(case))
    t = Target(gpus_per_node=ws, cores_per_node=max(0.05, got), accelerator=sc.accelerator.name,
               workers_per_rank=case.workers, batch_size=case.batch_size)
    p = predict(calib, t, sc.accelerator, advise=False, share=share)
    f = visit.line.figures
    return {"workload": workload, "world_size": ws, "outside_runnable": round(visit.outside, 2),
            "predicted_au_pct": round(p.au_pct, 1), "measured_au_pct": round(float(f.get("au_pct") or 0), 1),
            "predicted": round(p.samples_per_s, 1), "measured": round(float(f.get("throughput") or 0), 1),
            "binds": p.binds}


def main(request: Request) -> int:
    """Per workload: the calibration and the runs at 2 and 4 ranks, capacity.jsonl, the table."""
    data_dir, steps = request.data_dir, request.steps
    sc = scenario_mod.load(request.scenario)
    cores = len(os.sched_getaffinity(0))
    run_dir = rundir.new_run_dir(request.out, f"{sc.name}-capacity")
    tr = sc.training
    rows, summary = [], []
    for workload in ("pixels", "features"):
        scw = dataclasses.replace(sc, training=dataclasses.replace(tr, workload=workload))
        base = CheckCase("calibration", 1, max(1, tr.workers), tr.batch_size, tr.image_size, "raw", tr.decoder)
        materialise_storages(scw, base, ["raw"], run_dir, data_dir, steps, progress=False)
        calib = None
        for ws in SIZES:
            case = dataclasses.replace(base, name=f"{workload} x{ws}", world_size=ws)
            visit = launch_group(scw, [case], run_dir / "runs" / f"{workload}-{ws}", data_dir, steps)[case.name]
            if calib is None:
                calib = stages.costs(visit.line.ranks, visit.line.figures, workload, busy_share=1.0)
                got = run_cores(calib, base, Bench({}, {}, {}), scw.accelerator, cores,
                                float(visit.line.figures.get("throughput") or 0.0))
            rows.append(_row(workload, ws, visit, calib, scw, got, case))
        idle = Target(gpus_per_node=1, cores_per_node=float(cores), accelerator=sc.accelerator.name,
                      workers_per_rank=base.workers, batch_size=base.batch_size)
        summary.append((workload, capacity(calib, idle, sc.accelerator, most=16)))
    for row in rows:
        rundir.append_line(run_dir / "capacity.jsonl", row)
    print(f"{'workload':<9} {'ranks':>5} {'outside':>7} {'AU % predicted':>14} {'measured':>8} "
          f"{'samples/s predicted':>19} {'measured':>8}  binds")
    for r in rows:
        print(f"{r['workload']:<9} {r['world_size']:>5} {r['outside_runnable']:>7.1f} {r['predicted_au_pct']:>14.1f} "
              f"{r['measured_au_pct']:>8.1f} {r['predicted']:>19.1f} {r['measured']:>8.1f}  {r['binds']}")
    for workload, n in summary:
        measured = max([r["world_size"] for r in rows if r["workload"] == workload and r["measured_au_pct"] >= 90],
                       default=0)
        print(f"{workload}: {sc.accelerator.name} kept at AU >= 90%: predicted {n} on this host to itself "
              f"({cores} cores); measured here (as shared): {measured} of the sizes {', '.join(map(str, SIZES))}")
    print(f"results: {run_dir}", file=sys.stderr)
    return EXIT_OK


if __name__ == "__main__":
    print("python -m harness.commands.check_capacity is now: python run_bench.py check-capacity "
          f"{shlex.join(sys.argv[1:])}".rstrip(), file=sys.stderr)
    sys.exit(EXIT_USAGE)

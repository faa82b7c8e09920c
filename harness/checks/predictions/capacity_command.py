"""check-capacity, the command: per workload (pixels, features) the calibrations at 1 and 2 ranks
and the runs at 1, 2 and 4 ranks, each a real launch of the harness's cells
(calibration.launch_group); capacity.jsonl, the table (capacity_table.py) and one verdict line per
workload (capacity.py). docs/prediction.md.

    python run_bench.py check-capacity --scenario capacity [--steps 40]
"""
from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.analysis import rankwait
from harness.analysis.checkcases import CheckCase
from harness.analysis.targetmodel import capacity
from harness.checks.predictions.calibration import launch_group, materialise_storages, samples_of
from harness.checks.predictions.capacity import (
    CALIBRATED,
    SIZES,
    Model,
    calibration_costs,
    exit_code,
    fed,
    launch_row,
    verdict,
)
from harness.checks.predictions.capacity_table import table
from harness.config import scenario as scenario_mod
from harness.config.target import Target
from harness.measure import hostload
from harness.results import rundir


@dataclass(frozen=True)
class CheckCapacityRequest:
    """`run_bench.py check-capacity --scenario NAME [--steps N]`."""

    scenario: str
    data_dir: Path = Path("data")
    out: Path = Path("results")
    steps: int = 40  # measured steps per cell of each launch


Request = CheckCapacityRequest  # what harness.cli builds


def _calibrate(scw, base: CheckCase, workload: str, run_dir: Path, data_dir: Path, steps: int,
               cores: int) -> Model:
    """The calibrations, launches of their own: the costs at 1 rank, the ranks' wait at 2."""
    one, two = (dataclasses.replace(base, name=f"{workload} calibration x{n}", world_size=n) for n in CALIBRATED)
    v1 = launch_group(scw, [one], run_dir / "runs" / f"{workload}-calibration-1", data_dir, steps)[one.name]
    v2 = launch_group(scw, [two], run_dir / "runs" / f"{workload}-calibration-2", data_dir, steps)[two.name]
    calib = calibration_costs(v1, workload, cores)
    au = {n: round(float(v.line.figures.get("au_pct") or 0), 1) for n, v in zip(CALIBRATED, (v1, v2))}
    return Model(calib, rankwait.measure(v2.line.ranks, calib.rank_s), samples_of(scw), au)


def main(request: Request) -> int:
    """Per workload: the calibrations and the runs at 1, 2 and 4 ranks, capacity.jsonl, the table;
    exit 1 where the predicted capacity among the sizes is not the measured one."""
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
        model = _calibrate(scw, base, workload, run_dir, data_dir, steps, cores)
        visits = {}
        for ws in SIZES:
            case = dataclasses.replace(base, name=f"{workload} x{ws}", world_size=ws)
            visits[case] = launch_group(scw, [case], run_dir / "runs" / f"{workload}-{ws}", data_dir,
                                        steps)[case.name]
        mine = [launch_row(workload, case, visit, model, base, scw, cores) for case, visit in visits.items()]
        line, state = verdict(mine)
        idle = Target(gpus_per_node=1, cores_per_node=float(cores), accelerator=sc.accelerator.name,
                      workers_per_rank=base.workers, batch_size=base.batch_size)
        wait = rankwait.summary(model.wait) if model.wait else "the ranks' wait not measured"
        lines.append(f"{line}; without the ranks' wait the model says {fed(mine, 'predicted_alone_au_pct')}; "
                     f"{workload}'s ranks' wait {wait}; on this host with the best workers per rank the 1-rank "
                     f"costs alone keep {capacity(model.calib, idle, sc.accelerator, most=16)}")
        rows += mine
        verdicts.append(state)
    for row in rows:
        rundir.append_line(run_dir / "capacity.jsonl", row)
    print(table(rows, sc.accelerator.name, cores))
    print("\n".join(lines))
    print(f"results: {run_dir}", file=sys.stderr)
    return exit_code(verdicts)

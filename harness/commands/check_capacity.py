"""The capacity figure checked here (MLPerf Storage's measure: how many accelerators this host keeps at AU >=
90%), where prediction and measurement can disagree: per workload (pixels, features), calibrations at 1 and 2
ranks and runs at 1, 2 and 4 ranks, each a real launch of the harness's cells (raw storage, the scenario's
workers). The model predicts each size's AU from the 1-rank calibration's costs on the run's CPUs (its
allowance) and, from 2 ranks on, the ranks' wait for each other that the 2-rank calibration measured, carried
to the size by harness.analysis.rankwait's laws (nothing fitted to a measured case: the calibrations are
launches of their own, and a size a calibration ran at is a repeat of it, so marked). Beside it, labelled:
the model without the ranks' wait (the 1-rank costs alone) and the shared-host correction less the outside
load measured in that launch. The capacity among the sizes, predicted against measured, is the check: it
fails (exit 1) where they differ beyond the AU's noise on this host (the most a calibration and its repeat
differed by: a size whose AU is within it of the 90% line is at the line and decides nothing).
`scenarios/capacity.toml` defines an accelerator slow enough that the 2-core development host feeds one or
two and not four; on a scenario whose accelerator this host feeds at no
size (or at every size) the check says that it cannot tell. Writes capacity.jsonl, prints the table;
docs/measurements/prediction.md has measured ones. The calibrations cost two launches per workload.

    python run_bench.py check-capacity --scenario capacity [--steps 40]
"""
from __future__ import annotations

import dataclasses
import shlex
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

from harness.analysis import rankwait, stages
from harness.analysis.checkcases import Bench, CheckCase, RanksWait, measured_at, predict_case
from harness.analysis.targetmodel import AU_TARGET_PCT, Costs, capacity
from harness.config import scenario as scenario_mod
from harness.config.target import Target
from harness.errors import EXIT_INCONCLUSIVE, EXIT_OK, EXIT_REGRESSION, EXIT_USAGE
from harness.measure import hostload
from harness.measure.hostload import OUTSIDE_LOAD_PCT
from harness.results import rundir
from harness.run.calibration import launch_group, materialise_storages, samples_of

SIZES = (1, 2, 4)
CALIBRATED = (1, 2)  # the calibrations' rank counts: the costs at 1, the ranks' wait at 2
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


def _row(workload: str, case: CheckCase, visit, model: Model, base: CheckCase, sc, cores: int) -> dict:
    """The launch's measured AU and samples/s beside the model's (with the ranks' wait; without it; less the
    outside load)."""
    f = visit.line.figures
    outside = float(f.get("other_cpu_pct") or 0.0)
    alone = predict_case(model.calib, base, case, NO_BENCH, sc.accelerator, cores)
    p = model.predict(base, case, sc, cores)
    shared = model.predict(base, case, sc, cores, outside)
    return {"workload": workload, "world_size": case.world_size, "other_cpu_pct": round(outside, 1),
            "predicted_au_pct": round(p.au_pct, 1), "predicted_alone_au_pct": round(alone.au_pct, 1),
            "predicted_shared_au_pct": round(shared.au_pct, 1),
            "measured_au_pct": round(float(f.get("au_pct") or 0), 1), "predicted": round(p.samples_per_s, 1),
            "measured": round(float(f.get("throughput") or 0), 1), "binds": p.binds,
            "repeat": case.world_size in CALIBRATED, "calibration_au_pct": model.calibration_au.get(case.world_size)}


@dataclass(frozen=True)
class Model:
    """The 1-rank calibration's costs and the 2-rank calibration's ranks' wait (None: not measured)."""

    calib: Costs  # the 1-rank calibration's
    wait: rankwait.RankWait | None
    samples: int  # the dataset's samples per epoch (the epoch starts' law)
    calibration_au: dict[int, float] = field(default_factory=dict)  # ranks -> the calibration's measured AU %

    def predict(self, base: CheckCase, case: CheckCase, sc, cores: int, outside: float | None = None):
        """The size's prediction: the CPU bounds with the rank's CPU at that size, and the step no shorter
        than the ranks' wait makes it (the AU the smaller of the two; checkcases.predict_case)."""
        ranks = RanksWait(self.wait, self.samples) if self.wait is not None else None
        return predict_case(self.calib, base, case, NO_BENCH, sc.accelerator, cores, outside, ranks)


def fed(rows: list[dict], key: str, target: float = AU_TARGET_PCT) -> int:
    """The largest size whose AU (`key`) is at least the target, every smaller size too (0: not even 1)."""
    best = 0
    for row in sorted(rows, key=lambda r: r["world_size"]):
        if row[key] < target:
            break
        best = row["world_size"]
    return best


def noise(rows: list[dict]) -> float:
    """The AU's run-to-run noise on this host, in points: the largest difference between a calibration's
    measured AU and its repeat's (the sizes 1 and 2 run twice; 0 where the rows do not say)."""
    return max((abs(r["measured_au_pct"] - r["calibration_au_pct"]) for r in rows
                if r.get("calibration_au_pct") is not None), default=0.0)


def fed_band(rows: list[dict], key: str, points: float) -> tuple[int, int]:
    """The capacity with every AU `points` lower, and with every AU `points` higher."""
    return fed(rows, key, AU_TARGET_PCT + points), fed(rows, key, AU_TARGET_PCT - points)


def verdict(rows: list[dict]) -> tuple[str, bool]:
    """One workload's line and whether prediction and measurement disagree (on a quiet machine: a disagreement
    while a launch ran under outside load above OUTSIDE_LOAD_PCT is inconclusive, `inconclusive`). An AU
    within the measured noise of the 90% line decides nothing: prediction and measurement agree when their
    capacities, each taken with the AUs that noise lower and higher, overlap."""
    wl, predicted, measured = rows[0]["workload"], fed(rows, "predicted_au_pct"), fed(rows, "measured_au_pct")
    sizes = ", ".join(str(r["world_size"]) for r in rows)
    points = noise(rows)
    (p_low, p_high), (m_low, m_high) = fed_band(rows, "predicted_au_pct", points), fed_band(rows, "measured_au_pct",
                                                                                           points)
    if measured != predicted and max(p_low, m_low) <= min(p_high, m_high):
        said = (f"agree within the noise (an AU within {points:.1f} points of {AU_TARGET_PCT:.0f}%, the most a "
                "calibration and its repeat differed by: that size is at the line)")
        return (f"{wl}: kept at AU >= {AU_TARGET_PCT:.0f}% among {sizes} ranks: predicted {predicted}, measured "
                f"{measured}: {said}"), False
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


def _calibrate(scw, base: CheckCase, workload: str, run_dir: Path, data_dir: Path, steps: int,
               cores: int) -> Model:
    """The calibrations, launches of their own: the costs at 1 rank, the ranks' wait at 2."""
    one, two = (dataclasses.replace(base, name=f"{workload} calibration x{n}", world_size=n) for n in CALIBRATED)
    v1 = launch_group(scw, [one], run_dir / "runs" / f"{workload}-calibration-1", data_dir, steps)[one.name]
    v2 = launch_group(scw, [two], run_dir / "runs" / f"{workload}-calibration-2", data_dir, steps)[two.name]
    calib = _calibration(v1, workload, cores)
    au = {n: round(float(v.line.figures.get("au_pct") or 0), 1) for n, v in zip(CALIBRATED, (v1, v2))}
    return Model(calib, rankwait.measure(v2.line.ranks, calib.rank_s), samples_of(scw), au)


def main(request: Request) -> int:
    """Per workload: the calibrations and the runs at 1, 2 and 4 ranks, capacity.jsonl, the table; exit 1
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
        model = _calibrate(scw, base, workload, run_dir, data_dir, steps, cores)
        visits = {}
        for ws in SIZES:
            case = dataclasses.replace(base, name=f"{workload} x{ws}", world_size=ws)
            visits[case] = launch_group(scw, [case], run_dir / "runs" / f"{workload}-{ws}", data_dir,
                                        steps)[case.name]
        mine = [_row(workload, case, visit, model, base, scw, cores) for case, visit in visits.items()]
        line, differs = verdict(mine)
        idle = Target(gpus_per_node=1, cores_per_node=float(cores), accelerator=sc.accelerator.name,
                      workers_per_rank=base.workers, batch_size=base.batch_size)
        wait = rankwait.summary(model.wait) if model.wait else "the ranks' wait not measured"
        lines.append(f"{line}; without the ranks' wait the model says {fed(mine, 'predicted_alone_au_pct')}; "
                     f"{workload}'s ranks' wait {wait}; on this host with the best workers per rank the 1-rank "
                     f"costs alone keep {capacity(model.calib, idle, sc.accelerator, most=16)}")
        rows += mine
        verdicts.append((differs, inconclusive(mine)))
    for row in rows:
        rundir.append_line(run_dir / "capacity.jsonl", row)
    print(table(rows, sc.accelerator.name, cores))
    print("\n".join(lines))
    print(f"results: {run_dir}", file=sys.stderr)
    return exit_code(verdicts)


def table(rows: list[dict], accelerator: str, cores: int) -> str:
    """Every launch: the outside load, the AU predicted (with the ranks' wait; without it; shared-host
    correction) and measured, the samples/s predicted and measured, what binds; a size a calibration ran at
    marked as its repeat."""
    out = [f"{accelerator} on {cores} CPUs (the run's allowance); predicted: the 1-rank calibration's costs and "
           "the 2-rank calibration's ranks' wait, nothing fitted; alone: without the ranks' wait; shared: less "
           "the launch's measured outside load; * a repeat of a calibration's size",
           f"{'workload':<9} {'ranks':>5} {'outside %':>9} {'AU % predicted':>14} {'alone':>6} {'shared':>6} "
           f"{'measured':>8} {'samples/s predicted':>19} {'measured':>8}  binds"]
    for r in rows:
        mark = "*" if r.get("repeat") else " "
        out.append(f"{r['workload']:<9} {r['world_size']:>4}{mark} {r['other_cpu_pct']:>9.1f} "
                   f"{r['predicted_au_pct']:>14.1f} {r.get('predicted_alone_au_pct', r['predicted_au_pct']):>6.1f} "
                   f"{r['predicted_shared_au_pct']:>6.1f} {r['measured_au_pct']:>8.1f} {r['predicted']:>19.1f} "
                   f"{r['measured']:>8.1f}  {r['binds']}")
    errors = [abs(r["predicted_au_pct"] - r["measured_au_pct"]) for r in rows]
    alone = [abs(r.get("predicted_alone_au_pct", r["predicted_au_pct"]) - r["measured_au_pct"]) for r in rows]
    out.append(f"AU predicted - measured: median {statistics.median(errors):.1f} points, max {max(errors):.1f} "
               f"(without the ranks' wait: median {statistics.median(alone):.1f}, max {max(alone):.1f})")
    return "\n".join(out)


if __name__ == "__main__":
    print("python -m harness.commands.check_capacity is now: python run_bench.py check-capacity "
          f"{shlex.join(sys.argv[1:])}".rstrip(), file=sys.stderr)
    sys.exit(EXIT_USAGE)

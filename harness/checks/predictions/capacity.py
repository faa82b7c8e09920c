"""The capacity figure checked here (MLPerf Storage's measure: how many accelerators this host keeps at AU >=
90%), where prediction and measurement can disagree: per workload (pixels, features), calibrations at 1 and 2
ranks and runs at 1, 2 and 4 ranks, each a real launch of the harness's cells (raw storage, the scenario's
workers). The model predicts each size's AU from the 1-rank calibration's costs on the run's CPUs (its
allowance) and, from 2 ranks on, the ranks' wait for each other that the 2-rank calibration measured, carried
to the size by harness.analysis.rankwait's laws (nothing fitted to a measured case: the calibrations are
launches of their own, and a size a calibration ran at is a repeat of it, so marked). Beside it, labelled:
the model without the ranks' wait (the 1-rank costs alone) and the shared-host correction less the outside
load measured in that launch. The check compares the predicted and measured AU at every size, within the
AU's noise on this host (the sd between a calibration and its repeat, pooled, at most NOISE_LIMIT so that
one outlying repeat cannot widen it), and the capacities where both sides are clear of the 90% line: it
fails (exit 1) where they differ; a size on the line is undecided (exit 4), never agreement.
`scenarios/capacity.toml` defines an accelerator slow enough that the 2-core development host feeds one or
two and not four; on a scenario whose accelerator this host feeds at no
size (or at every size) the check says that it cannot tell. Writes capacity.jsonl, prints the table;
docs/measurements/prediction.md has measured ones. The calibrations cost two launches per workload.

    python run_bench.py check-capacity --scenario capacity [--steps 40]
"""
from __future__ import annotations

import dataclasses
import math
import shlex
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

from harness.analysis import rankwait, stages
from harness.analysis.checkcases import Bench, CheckCase, RanksWait, predict_case
from harness.analysis.targetmodel import AU_TARGET_PCT, Costs, capacity
from harness.checks.predictions.calibration import launch_group, materialise_storages, samples_of
from harness.checks.predictions.cases import measured_at
from harness.config import scenario as scenario_mod
from harness.config.target import Target
from harness.errors import EXIT_INCONCLUSIVE, EXIT_OK, EXIT_REGRESSION, EXIT_USAGE
from harness.measure import hostload
from harness.measure.hostload import OUTSIDE_LOAD_PCT
from harness.results import rundir

SIZES = (1, 2, 4)
CALIBRATED = (1, 2)  # the calibrations' rank counts: the costs at 1, the ranks' wait at 2
NO_BENCH = Bench({}, {}, {})  # the cases change only the ranks: no side measurement scales a cost
Z = 1.96  # a size's AUs differ, or an AU is off the line, beyond Z sd of a launch's noise (95%, two-sided)
NOISE_LIMIT = 2.5  # points: the most AU sd between a launch and its repeat the comparison takes as noise
AGREE, DISAGREE, UNDECIDED, INCONCLUSIVE = "agree", "disagree", "undecided", "inconclusive"
FED, NOT_FED, AT_LINE = "fed", "not fed", "at the line"


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
    """The AU's sd between a launch and its repeat on this host, in points: pooled over the sizes that ran
    twice (a calibration and its repeat, sizes 1 and 2: each pair's difference d gives d^2 / 2), at most
    NOISE_LIMIT (an outlying repeat cannot widen the comparison past it; `noisy` says when it was cut);
    0 where the rows do not say (the comparison is then exact)."""
    return min(_pooled(rows), NOISE_LIMIT)


def _pooled(rows: list[dict]) -> float:
    pairs = [r["measured_au_pct"] - r["calibration_au_pct"] for r in rows if r.get("calibration_au_pct") is not None]
    return math.sqrt(sum(d * d for d in pairs) / (2 * len(pairs))) if pairs else 0.0


def noisy(rows: list[dict]) -> bool:
    """The repeats disagree by more than the check accepts (their pooled sd above NOISE_LIMIT)."""
    return _pooled(rows) > NOISE_LIMIT


def side(au: float, sd: float) -> str:
    """One side's AU at a size against the 90% line: FED or NOT_FED where it is clear of the line by Z of its
    sd, else AT_LINE."""
    if au >= AU_TARGET_PCT + Z * sd:
        return FED
    return NOT_FED if au <= AU_TARGET_PCT - Z * sd else AT_LINE


def decided_capacity(rows: list[dict], key: str, sd: float) -> int | None:
    """The largest size clearly fed with every smaller one; None where a size on the line comes first."""
    best = 0
    for row in sorted(rows, key=lambda r: r["world_size"]):
        state = side(row[key], sd)
        if state == AT_LINE:
            return None
        if state == NOT_FED:
            break
        best = row["world_size"]
    return best


def misses(rows: list[dict], sd: float) -> list[dict]:
    """The sizes whose predicted AU differs from the measured one by more than Z x sqrt(2) x sd (both sides
    carry a launch's noise)."""
    return [r for r in rows if abs(r["predicted_au_pct"] - r["measured_au_pct"]) > Z * math.sqrt(2) * sd + 1e-9]


def verdict(rows: list[dict]) -> tuple[str, str]:
    """One workload's line and its state: AGREE, DISAGREE, UNDECIDED or INCONCLUSIVE. Prediction and
    measurement are compared at every size (`misses`); the capacities only where each side's AUs are clear
    of the 90% line: a size on the line decides nothing and is never agreement. A disagreement while a
    launch ran under outside load above OUTSIDE_LOAD_PCT is INCONCLUSIVE (the load, not the model)."""
    wl, sd = rows[0]["workload"], noise(rows)
    predicted, measured = (decided_capacity(rows, k, sd) for k in ("predicted_au_pct", "measured_au_pct"))
    head = (f"{wl}: kept at AU >= {AU_TARGET_PCT:.0f}% among {', '.join(str(r['world_size']) for r in rows)} "
            f"ranks: predicted {_cap(predicted)}, measured {_cap(measured)}: ")
    missed = misses(rows, sd)
    tol = f"{Z * math.sqrt(2) * sd:.1f} points (noise sd {sd:.1f}{', cut to the limit' if noisy(rows) else ''})"
    if missed or (None not in (predicted, measured) and predicted != measured):
        said = "DISAGREE" + "".join(f"; at {r['world_size']} rank(s) AU {r['predicted_au_pct']:.1f} predicted, "
                                    f"{r['measured_au_pct']:.1f} measured" for r in missed) + f" (beyond {tol})"
        if inconclusive(rows):
            loaded = [r["other_cpu_pct"] for r in rows if r["other_cpu_pct"] > OUTSIDE_LOAD_PCT]
            return (head + f"inconclusive: outside load {max(loaded):.0f}% in {len(loaded)} of {len(rows)} "
                    f"launches (measure again on a quieter machine); {said}"), INCONCLUSIVE
        return head + said, DISAGREE
    if None in (predicted, measured):
        at = [r["world_size"] for r in rows if AT_LINE in (side(r["predicted_au_pct"], sd),
                                                           side(r["measured_au_pct"], sd))]
        return (head + f"undecided: the AU at {', '.join(map(str, at))} rank(s) is within {Z:.2f} noise sd "
                f"({sd:.1f} points) of the line; every size agrees within {tol}"), UNDECIDED
    if noisy(rows):
        return (head + f"inconclusive: a calibration and its repeat differed by more than the check accepts "
                f"(pooled sd {_pooled(rows):.1f} points, limit {NOISE_LIMIT:.1f}); measure again"), INCONCLUSIVE
    said = f"agree (every size within {tol})"
    if measured in (0, SIZES[-1]):
        said += (f" (but this host feeds {'none' if measured == 0 else 'all'} of the sizes: the check cannot "
                 "tell a model that over- or under-predicts here; give a scenario whose accelerator this host "
                 "feeds at some sizes and not others, e.g. scenarios/capacity.toml)")
    return head + said, AGREE


def _cap(capacity: int | None) -> str:
    return "undecided" if capacity is None else str(capacity)


def inconclusive(rows: list[dict]) -> bool:
    """A workload's launches of which one ran under outside load: its disagreement is not the model's."""
    return any(r["other_cpu_pct"] > OUTSIDE_LOAD_PCT for r in rows)


def exit_code(states: list[str]) -> int:
    """One state per workload: 1 for a disagreement on a quiet machine, else 4 where one is undecided or
    inconclusive, else 0."""
    if DISAGREE in states:
        return EXIT_REGRESSION
    return EXIT_OK if all(s == AGREE for s in states) else EXIT_INCONCLUSIVE


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
    print("python -m harness.checks.predictions.capacity is now: python run_bench.py check-capacity "
          f"{shlex.join(sys.argv[1:])}".rstrip(), file=sys.stderr)
    sys.exit(EXIT_USAGE)

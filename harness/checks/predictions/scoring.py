"""Pure: check-predictions' judgement: each pairing's prediction from its calibration's measured
costs (the model on the CPUs the case's visits had, its interval, the absolute model beside it),
against the mean of the case's visits, flagged where it is a calibration or a copy of one (`rows`,
one row of predictions.jsonl each); command.py measures the visits, table.py prints the rows."""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from harness.analysis import rankwait, stages
from harness.analysis.checkcases import Bench, CheckCase, RanksWait, case_costs, predict_case
from harness.checks.predictions import interval, table
from harness.checks.predictions.calibration import Visit, samples_of
from harness.checks.predictions.cases import (
    ONE_CPU,
    Pairing,
    error_pct,
    is_copy,
    measured_at,
    pairings,
    ranks_calibration,
)


def _calibration(visits: list[Visit], bench: Bench, cpus: int):
    """A calibration's costs, its visits pooled (their rank records; the mean of their figures),
    measured with the share of its CPUs busy that its visits' own CPU and the outside load made
    (what the contention factor is undone at)."""
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
    """What every prediction of one check shares: the side bench, the CPU a run can use where the
    CPU binds (the 1-CPU calibration's), the ranks' wait (the calibration at one rank more), one
    visit's noise."""

    sc: object
    bench: Bench
    allowance: int
    usable: float | None
    ranks: RanksWait | None

    def cpus(self, case: CheckCase, pair: Pairing) -> float:
        """The case's CPUs, as much of them as a run can use (not for the 1-CPU calibration's own
        launch: it would be fitted to its own measurement)."""
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


def rows(sc, all_cases: list[CheckCase], measured: dict[str, list[Visit]], bench: Bench,
          allowance: int) -> list[dict]:
    """One row per pairing (cases.pairings) whose case and calibration were measured: the model's
    prediction from the calibration's costs on the CPUs the case's visits had (`predicted_shared`:
    the allowance less the outside load measured in them, the headline on this host) with its
    interval, and on the case's whole allowance (`predicted`, the absolute model: another machine's
    prediction), nothing fitted, against the mean of the case's visits' samples/s; a calibration's
    own row (the 1-rank ones, and the one rank more the ranks' wait is measured in) and a case its
    calibration predicts the same (a copy) are flagged and not scored."""
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
        noise = interval.robust_sd(_throughputs(v) for name, v in measured.items() if name != pair.case)
        spread = _spread_of(model, calib, per_visit, source, case, cpus, visits, noise)
        low_high = interval.interval(shared, spread)
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
                     "noise_pct": round(100 * interval.noise_sd(spread), 2) if low_high else None,
                     "visits": [_visit_row(g, v) for g, v in zip(got, visits)],
                     "spread_pct": round(_spread(got), 1) if m else None,
                     **_costs_seen(case_costs(calib, source, case, bench, model.ranks), visits)})
    for row in rows:
        calibration_spread = _spread(_throughputs(measured[row["source"]]))
        row["note"] = table.note(row, calibration_spread) if row["scored"] else ""
    return rows


def _spread_of(model: _Model, calib, per_visit: list, source: CheckCase, case: CheckCase, case_cpus: float,
               visits: list[Visit], noise: tuple[float, int]) -> interval.Spread:
    """What the case's headline interval is propagated from (harness.checks.predictions.interval):
    the prediction from each calibration visit's costs alone (`per_visit`), at each of the case's
    visits' outside load, and one visit's noise (`noise`: sd and df, robust, over every other
    case's visits)."""
    loads = [float(v.line.figures.get("other_cpu_pct") or 0.0) for v in visits]
    costs = tuple(model.predict(c, source, case, case_cpus, statistics.mean(loads)).samples_per_s for c in per_visit)
    at_load = tuple(model.predict(calib, source, case, case_cpus, x).samples_per_s for x in loads)
    return interval.Spread(costs=costs, load=at_load, noise_sd=noise[0], noise_df=noise[1],
                                     visits=len(visits))


def usable_share(visits: list[Visit]) -> float | None:
    """The share of its CPUs a run uses where the CPU binds it, measured in the 1-CPU calibration
    (the CPU binds there): its samples/s x its loader's and rank's CPU per sample over the one CPU
    less the outside load its visits saw; what is missing is the launcher's, the scheduler's and
    the harness's own threads'. The mean over its visits, at most 1; None without visits."""
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

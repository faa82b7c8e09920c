"""The table --check-predictions prints (scoring.py builds its rows): each prediction with its
interval, the absolute model beside it, the notes on the cases that miss, and the summaries over
the scored cases; docs/prediction.md explains the columns."""
from __future__ import annotations

import statistics

from harness.analysis.predictioninterval import MODEL_ERROR_SD
from harness.checks.predictions import interval
from harness.checks.predictions.cases import COPY_PCT, summary
from harness.measure import hostload


def note(row: dict, calib_spread: float) -> str:
    """Why a case misses (|error| > 15% on this host), from its figures: noise, or a cost the model
    held that changed, or outside load that the absolute model does not take out."""
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


def _interval_text(row: dict) -> str:
    low_high = row.get("interval")
    return f"{low_high[0]:.0f}-{low_high[1]:.0f}" if low_high else "-"


def _inside_text(row: dict) -> str:
    return ("yes" if row.get("inside") else "NO") if row.get("interval") else "-"


HEADLINE = ("the model on this host as it ran (the calibration's costs on the CPUs each case's visits had: "
            "the allowance less the outside load measured in them; nothing fitted)")
ABSOLUTE = "the absolute model (the whole allowance: what it predicts for another machine, or this one quiet)"


def table(rows: list[dict]) -> str:
    """Every prediction (the calibrations first among them): the headline, the model on the CPUs
    the case's visits had, then the absolute model (labelled) and the outside load each case saw;
    the flags, the notes on the scored cases that miss, and the summaries over the scored cases:
    the headline's, the absolute model's, and a predictor that answers the calibration's measured
    samples/s for every case (what the model must beat); what the noise alone would make of a model
    without error; then the outside load the scored cases ran beside."""
    lines = [f"{'configuration':<34} {'predicted':>9} {'measured':>9} {'error %':>8} {'90% interval':>13} "
             f"{'in':>3} {'absolute':>9} {'error %':>8} {'load %':>6} {'spread %':>8}  {'flag':<11} binds"]
    for r in rows:
        lines.append(f"{r['config']:<34} {r['predicted_shared']:>9.1f} {r['measured']:>9.1f} "
                     f"{r['error_shared_pct']:>+8.1f} {_interval_text(r):>13} {_inside_text(r):>3} "
                     f"{r['predicted']:>9.1f} {r['error_pct']:>+8.1f} "
                     f"{r.get('outside_pct') or 0:>6.1f} {r['spread_pct'] or 0:>8.1f}  {r['flag'] or '-':<11} "
                     f"{r['binds']}")
    lines += [f"  {r['config']}: {r['note']}" for r in rows if r.get("note")]
    scored = [r for r in rows if r["scored"]]
    summaries = {key: summary([r[key] for r in scored]) for key in ("error_shared_pct", "error_pct", "null_error_pct")}
    for key, what in (("error_shared_pct", HEADLINE), ("error_pct", ABSOLUTE),
                      ("null_error_pct", "a predictor that answers the calibration's measured samples/s")):
        s = summaries[key]
        if s["cases"]:
            lines.append(f"{what}: median |error| {s['median_abs_error_pct']:.1f}%, max "
                         f"{s['max_abs_error_pct']:.1f}%, {s['within_15']} of {s['cases']} within 15%")
    stated = interval.coverage_line(rows)
    if stated:
        lines.append(stated)
    sd = interval.model_error_sd(rows)
    if sd is not None:
        lines.append(f"the model's own error here: RMS of log(predicted / measured) {sd:.1%} over "
                     f"{interval.distinct(scored)} distinct measurements (ROLL OUT's interval takes "
                     f"{MODEL_ERROR_SD:.0%}, measured so on a quiet host)")
    floor = interval.noise_floor_pct(rows)
    headline = summaries["error_shared_pct"]["median_abs_error_pct"]
    if floor is not None and headline is not None:
        lines.append(f"what the visits' noise alone makes: a median |error| of about {floor:.1f}% for a model "
                     f"without error (the cases' interval sd, their median x {interval.MEDIAN_PER_SD:.3f}); the "
                     f"headline's is {headline:.1f}% (more visits: --rounds)")
    loads = [r.get("outside_pct") or 0.0 for r in scored]
    if loads:
        lines.append(f"outside load during the scored cases' visits (processes outside the run, % of the host's "
                     f"CPUs, each case's mean): median {statistics.median(loads):.1f}%, max {max(loads):.1f}%"
                     + (" (a quiet host: the two models agree)" if max(loads) <= hostload.OUTSIDE_LOAD_PCT else
                        " (a loaded host: read the headline; the absolute model is the prediction for another "
                        "machine)"))
    copies = [r["config"] for r in rows if r["flag"] == "copy"]
    lines.append(f"scored: {len(scored)} cases ({interval.distinct(scored)} distinct measurements); "
                 f"not scored: the calibrations, and {len(copies)} predicted as "
                 f"their calibration (copy, within {COPY_PCT:g}%){': ' + ', '.join(copies) if copies else ''} "
                 "(samples/s, all ranks; predicted: on the CPUs the visits had; absolute: on the whole "
                 "allowance; load: outside load; spread: max - min of the visits over their mean; interval: "
                 "propagated from the calibration's spread and the other cases' noise, docs/prediction.md)")
    return "\n".join(lines)

"""check-capacity's table: every launch's AU and samples/s, predicted (with the ranks' wait;
without it; less the outside load) and measured, what binds, and the AU's error over the
launches."""
from __future__ import annotations

import statistics


def table(rows: list[dict], accelerator: str, cores: int) -> str:
    """Every launch: the outside load, the AU predicted (with the ranks' wait; without it;
    shared-host correction) and measured, the samples/s predicted and measured, what binds; a size
    a calibration ran at marked as its repeat."""
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

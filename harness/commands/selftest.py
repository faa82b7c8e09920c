"""`run_bench.py --self-test`: the harness's own figures checked on a calibrated synthetic workload with
analytic answers (harness.run.fidelity measures; its docstring has the formulas). `run` gives the rows,
`render` the table, `main` prints it: exit 0, or 1 when a figure is off."""
from __future__ import annotations

import os

from harness.errors import EXIT_OK, EXIT_REGRESSION
from harness.report.tables import Table, render_tables
from harness.run import fidelity
from harness.run.fidelity import REGIMES, TOLERANCE, Straggler


def main() -> int:
    rows = run()
    print(render(rows))
    return EXIT_OK if all(r["ok"] for r in rows) else EXIT_REGRESSION


def run(steps: int = 40) -> list[dict]:
    """Every regime's rows: the one-rank regimes, then the two-rank straggler regime."""
    return fidelity.run(steps)


def render(rows: list[dict]) -> str:
    table = [[r["regime"], r["figure"], f"{r['expected']:.1f}", f"{r['measured']:.1f}",
              f"{r['error']:+.2f}{' %' if r['figure'] == 'throughput' else ' pt'}",
              "ok" if r["ok"] else "FAIL"] for r in rows]
    s = Straggler()
    regimes = "; ".join([f"{r.name}: L={r.latency_s * 1e3:.0f} ms x {r.workers} workers, C={r.compute_s * 1e3:.0f} ms"
                         for r in REGIMES] + [f"{s.name}: 2 ranks, pixels, L={s.latency_s[0] * 1e3:.0f}/"
                                              f"{s.latency_s[1] * 1e3:.0f} ms x {s.workers} workers, "
                                              f"C={s.step_compute_s() * 1e3:.1f} ms"])
    head = (f"Fidelity self-test ({regimes}; measured hand-off r={rows[0]['handoff_ms']:.1f} ms/batch)\n"
            f"tolerance {TOLERANCE:.0f}% (throughput, relative) / {TOLERANCE:.0f} points (stall, AU); "
            f"host has {os.cpu_count()} CPUs")
    return head + "\n" + render_tables([Table("", ["regime", "figure", "expected", "measured", "error", ""],
                                              table)])[-1]


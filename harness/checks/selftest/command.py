"""`run_bench.py --self-test`: the harness's own figures checked on a calibrated synthetic workload
with analytic answers (fidelity.py beside it measures; its docstring has the formulas). `run` gives
the rows, `render` the table, `main` prints it: exit 0, or 1 when a figure is off on a quiet
machine. A figure that misses while other processes load the machine (outside load above
OUTSIDE_LOAD_PCT in its regime) is measured again, up to REDOS times; if every miss stays
disturbed, the answer is "inconclusive" (exit 4), never a FAIL."""
from __future__ import annotations

import os
import sys

from harness.checks.selftest import fidelity
from harness.checks.selftest.fidelity import REGIMES, TOLERANCE, Straggler
from harness.errors import EXIT_INCONCLUSIVE, EXIT_OK, EXIT_REGRESSION
from harness.measure.hostload import OUTSIDE_LOAD_PCT
from harness.report.tables import Table, render_tables

REDOS = 2  # further rounds while a miss was measured under outside load


def disturbed(row: dict) -> bool:
    return (row.get("outside_pct") or 0.0) > OUTSIDE_LOAD_PCT


def only_disturbed_misses(rows: list[dict]) -> bool:
    """Some figure missed, and every miss was measured under outside load."""
    missed = [r for r in rows if not r["ok"]]
    return bool(missed) and all(disturbed(r) for r in missed)


def verdict(rows: list[dict], loaded: list[float]) -> tuple[int, str | None]:
    """The exit code and, when inconclusive, its line; `loaded`: the outside load % of every
    disturbed regime measured over all rounds."""
    if all(r["ok"] for r in rows):
        return EXIT_OK, None
    if not only_disturbed_misses(rows):
        return EXIT_REGRESSION, None
    return EXIT_INCONCLUSIVE, (f"inconclusive: outside load {max(loaded):.0f}% in {len(loaded)} regime visits; "
                               "the figures that missed were measured while other processes used the CPU "
                               "(run the self-test on a quieter machine)")


def main() -> int:
    rows = run()
    loaded = _loads(rows)
    for _ in range(REDOS):
        if not only_disturbed_misses(rows):
            break
        print(f"self-test: a figure missed under {max(loaded):.0f}% outside load; measuring again", file=sys.stderr)
        rows = run()
        loaded += _loads(rows)
    print(render(rows))
    code, line = verdict(rows, loaded)
    if line:
        print(line)
    return code


def _loads(rows: list[dict]) -> list[float]:
    """The outside load of each disturbed regime of one round."""
    return sorted({r["regime"]: r["outside_pct"] for r in rows if disturbed(r)}.values())


def run(steps: int = 40) -> list[dict]:
    """Every regime's rows: the one-rank regimes, then the two-rank straggler regime."""
    return fidelity.run(steps)


def render(rows: list[dict]) -> str:
    table = [[r["regime"], r["figure"], f"{r['expected']:.1f}", f"{r['measured']:.1f}",
              f"{r['error']:+.2f}{' %' if r['figure'] == 'throughput' else ' pt'}",
              "-" if r.get("outside_pct") is None else f"{r['outside_pct']:.0f}", _mark(r)] for r in rows]
    s = Straggler()
    regimes = "; ".join([f"{r.name}: L={r.latency_s * 1e3:.0f} ms x {r.workers} workers, C={r.compute_s * 1e3:.0f} ms"
                         for r in REGIMES] + [f"{s.name}: 2 ranks, pixels, L={s.latency_s[0] * 1e3:.0f}/"
                                              f"{s.latency_s[1] * 1e3:.0f} ms x {s.workers} workers, "
                                              f"C={s.step_compute_s() * 1e3:.1f} ms"])
    head = (f"Fidelity self-test ({regimes}; measured hand-off r={rows[0]['handoff_ms']:.1f} ms/batch)\n"
            f"tolerance {TOLERANCE:.0f}% (throughput, relative) / {TOLERANCE:.0f} points (stall, AU); "
            f"host has {os.cpu_count()} CPUs")
    return head + "\n" + render_tables([Table("", ["regime", "figure", "expected", "measured", "error",
                                                   "outside load %", ""],
                                              table)])[-1]


def _mark(row: dict) -> str:
    if row["ok"]:
        return "ok"
    return "missed under load" if disturbed(row) else "FAIL"

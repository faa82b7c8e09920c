"""The time to a decided answer: the main job (`run_bench.py --scenario 4xV100`, its default budget) run from a
warm data directory, quiet and beside a CPU hog of about one core, interleaved; per run the wall time, the passes,
the measured windows' share of the cells' time, what was decided and the outside load. Not a timed test: a
measurement to read (README, "The main job").

    python scripts/main_job_bench.py [--rounds 1] [--scenario 4xV100] [--data-dir data] [--out results/main-job]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

HOG = "while True:\n    pass\n"  # one busy core


def run_once(scenario: str, data_dir: Path, out: Path, hog: bool) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    before = set(out.iterdir())
    hogger = subprocess.Popen([sys.executable, "-c", HOG]) if hog else None
    began = time.monotonic()
    try:
        done = subprocess.run([sys.executable, str(REPO / "run_bench.py"), "--scenario", scenario, "--quiet",
                               "--data-dir", str(data_dir), "--out", str(out)], capture_output=True, text=True)
    finally:
        if hogger is not None:
            hogger.kill()
            hogger.wait()
    wall = time.monotonic() - began
    run_dir = next(iter(set(out.iterdir()) - before), None)
    return {"hog": hog, "rc": done.returncode, "wall_s": wall, **(figures(run_dir) if run_dir else {}),
            "last_line": (done.stderr.strip().splitlines() or [""])[-1]}


def figures(run_dir: Path) -> dict:
    """What the run directory says: passes, window share, decisions (through the results and analysis wings)."""
    from harness.analysis.effects import HIGHER, LOWER, NO_EFFECT, whole_passes
    from harness.report.effecttables import run_effects
    from harness.results import rundir

    results = [r for r in rundir.read_results(run_dir) if r.measured]
    passes = whole_passes(results)
    fitted = run_effects(results, rundir.read_env(run_dir).cell_ids)
    shown = [e for e in fitted if e.figure == "throughput" and e.kind == "main" and e.level != e.reference]
    words = {f"{e.axis}={e.level}": e.decision(passes=passes) for e in shown}
    windows = sum(r.figures.window_s or 0.0 for r in results)
    cells = sum(r.elapsed_s or 0.0 for r in results)
    loads = [r.figures.other_cpu_pct for r in results if r.figures.other_cpu_pct is not None]
    return {"passes": passes, "visits": len(results), "window_share_pct": 100 * windows / cells if cells else None,
            "decided": sum(w in (HIGHER, LOWER, NO_EFFECT) for w in words.values()), "effects": len(words),
            "words": words, "outside_load_pct": statistics.median(loads) if loads else None}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", default="4xV100")
    p.add_argument("--rounds", type=int, default=1, help="rounds of (quiet, hog), interleaved")
    p.add_argument("--data-dir", type=Path, default=REPO / "data")
    p.add_argument("--out", type=Path, default=REPO / "results" / "main-job")
    a = p.parse_args()
    for _ in range(a.rounds):
        for hog in (False, True):
            row = run_once(a.scenario, a.data_dir, a.out, hog)
            share = row.get("window_share_pct")
            print(f"{'hog ' if hog else 'quiet'}: exit {row['rc']}, {row['wall_s']:.0f} s, {row.get('passes')} "
                  f"passes, window {share:.0f}% of cell time, decided {row.get('decided')} of "
                  f"{row.get('effects')}, outside load {row.get('outside_load_pct')}% (median of visits): "
                  f"{row.get('words')}" if share is not None else f"{row}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

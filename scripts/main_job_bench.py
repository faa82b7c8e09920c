"""The time to a decided answer: the main job (`run_bench.py --scenario 4xV100`, its default budget) run from a
warm data directory, quiet and beside a CPU hog of about one core, interleaved; per run the wall time, the passes,
the time to the last decision, what was decided (harness.analysis.sequential, as the first screen says it), the
measured windows' share of the cells' time, the residual sd per visit of both responses (log samples/s and log
host rate, each adjusted for outside load) and the median outside load the run recorded. Not a timed test: a
measurement to read (docs/measurements/main-job.md).

    python scripts/main_job_bench.py [--rounds 1] [--scenario 4xV100] [--data-dir data] [--out results/main-job]
                                     [--plugin MODULE] [--read RUN_DIR ...]
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


def run_once(scenario: str, data_dir: Path, out: Path, hog: bool, plugins: list[str]) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    before = set(out.iterdir())
    hogger = subprocess.Popen([sys.executable, "-c", HOG]) if hog else None
    began = time.monotonic()
    extra = [a for p in plugins for a in ("--plugin", p)]
    try:
        done = subprocess.run([sys.executable, str(REPO / "run_bench.py"), "--scenario", scenario, "--quiet",
                               "--data-dir", str(data_dir), "--out", str(out), *extra],
                              capture_output=True, text=True)
    finally:
        if hogger is not None:
            hogger.kill()
            hogger.wait()
    wall = time.monotonic() - began
    run_dir = next(iter(set(out.iterdir()) - before), None)
    row = {"hog": hog, "rc": done.returncode, "wall_s": wall, "run_dir": str(run_dir)}
    if done.returncode != 0:  # what went wrong, in the run's own last line
        return {**row, "error": (done.stderr.strip().splitlines() or [""])[-1]}
    return {**row, **(figures(run_dir) if run_dir else {})}


def figures(run_dir: Path) -> dict:
    """What the run directory says (through the results and analysis wings): passes, decisions as the
    first screen makes them, the time to the last decision, window share, both responses' residual sd."""
    from harness.analysis.effects import HOST_RATE, THROUGHPUT, level_order, observations, residual_sd
    from harness.analysis.sequential import decide, whole_pass_ends
    from harness.report.report import rule_of
    from harness.results import rundir

    env = rundir.read_env(run_dir)
    results = [r for r in rundir.read_results(run_dir) if r.measured]
    d = decide(results, env.cell_ids, rule_of(env, run_dir))
    ends = whole_pass_ends(results)
    last = max((x.passes for x in d.levels if x.decided), default=None)
    decided_at = (sum(r.elapsed_s or 0.0 for r in results if r.repeat <= ends[last - 1])
                  if last and len(d.open) == 0 else None)
    order = level_order(results, env.cell_ids)
    sd = {name: residual_sd(observations(results, name, adjust=True), order) for name in (THROUGHPUT, HOST_RATE)}
    windows = sum(r.figures.window_s or 0.0 for r in results)
    cells = sum(r.elapsed_s or 0.0 for r in results)
    loads = [r.figures.other_cpu_pct for r in results if r.figures.other_cpu_pct is not None]
    return {"passes": d.passes, "visits": len(results), "response": d.response,
            "window_share_pct": 100 * windows / cells if cells else None,
            "decided": sum(x.decided for x in d.levels), "effects": len(d.levels),
            "decided_after_visits_s": decided_at,
            "words": {f"{x.effect.axis.split('=')[0]}={x.effect.level.split('(')[0]}":
                      f"{x.word} x{x.effect.ratio:.3f}" + (f"@{x.passes}" if x.decided else "") for x in d.levels},
            "sd_samples_s": sd[THROUGHPUT], "sd_host_rate": sd[HOST_RATE],
            "outside_load_pct": statistics.median(loads) if loads else None}


def show(row: dict) -> str:
    def num(key, spec):
        return "-" if row.get(key) is None else format(row[key], spec)

    if row.get("error") is not None:
        return f"{'hog  ' if row.get('hog') else 'quiet'}: exit {row['rc']}, {num('wall_s', '.0f')} s: {row['error']}"

    return (f"{'hog  ' if row.get('hog') else 'quiet'}: exit {row.get('rc', '-')}, {num('wall_s', '.0f')} s, "
            f"{row.get('passes')} passes, decided {row.get('decided')} of {row.get('effects')} on "
            f"{row.get('response')} (the visits' time to the last: {num('decided_after_visits_s', '.0f')} s), "
            f"window {num('window_share_pct', '.0f')}%, residual sd samples/s {num('sd_samples_s', '.3f')} host "
            f"rate {num('sd_host_rate', '.3f')}, outside load {num('outside_load_pct', '.1f')}% (median): "
            f"{row.get('words')} [{row.get('run_dir', '')}]")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", default="4xV100")
    p.add_argument("--rounds", type=int, default=1, help="rounds of (quiet, hog), interleaved")
    p.add_argument("--data-dir", type=Path, default=REPO / "data")
    p.add_argument("--out", type=Path, default=REPO / "results" / "main-job")
    p.add_argument("--plugin", action="append", default=[], help="passed on to run_bench.py (planted effects)")
    p.add_argument("--read", type=Path, nargs="*", help="only summarise these run directories")
    a = p.parse_args()
    if a.read:
        for run_dir in a.read:
            print(show({"run_dir": str(run_dir), **figures(run_dir)}), flush=True)
        return 0
    for _ in range(a.rounds):
        for hog in (False, True):
            print(show(run_once(a.scenario, a.data_dir, a.out, hog, a.plugin)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

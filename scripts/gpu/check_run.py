"""Assertions on a run directory of the gpu scenario (what scripts/gpu_check.sh runs after each run).

Per cell (cells.jsonl, read with harness.results.rundir.read_results):
  - no error, a throughput, the expected number of ranks, a real GPU (emulated false, the model not the
    stand-in);
  - every rank's device memory peak above 0 and at most its device's capacity;
  - AU against NVML: |au_pct - nvml_util_pct| at most --nvml-points, on cells whose window lasts at least
    --nvml-min-window s (NVML averages utilisation over 1/6 s to 1 s, so a shorter window is not compared,
    and says so; with --require-nvml at least one cell must be compared); a cell without NVML figures fails.
With --profile, per cell with traces (traces/<cell>/rank0.*.pt.trace.json): the profiler's kernel time
against CUDA-event device time on the same steps. The profiled steps are the trace's ProfilerStep#N ranges
(N counts every step, warm-up included, so window step N - warmup); kernel AU = the union of the kernels'
intervals inside those ranges / their length; event AU = sum(device) / sum(step) of rank 0's record over the
same window steps. Their gap is reported; it fails the cell only when --kernel-points is given and exceeded
(event time also holds launch gaps, GradScaler's sync and the Python hooks, which kernel time does not: the gap
is a figure to read, not a tolerance known in advance). The traces are recorded without memory profiling
(harness.measure.profiling), which slowed the profiled steps.
The result goes to <--out>/<--name>.json (one file per stage of scripts/gpu_check.sh).
Exit 0 when everything holds, 1 otherwise, 2 when the directory has no cells.jsonl.

With --steps-for-window S it checks nothing: it prints the measured steps that make an S-second window at
the run's step time (the fastest cell's median step: the profile stage sizes its window from the matrix
stage's run so), within --steps-between; exit 2 when the run has no measured step."""
from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

import gpucommon


def run_dir_of(path: Path) -> Path | None:
    """`path` itself when it holds cells.jsonl, else its newest subfolder that does."""
    if (path / "cells.jsonl").is_file():
        return path
    found = sorted(p.parent for p in path.glob("*/cells.jsonl"))
    return found[-1] if found else None


def check_cell(result, args, notes: list[str]) -> list[str]:
    """The failures of one cell (empty when it holds); what was compared goes to `notes`."""
    bad = []
    f = result.figures
    if f.throughput is not None:
        notes.append(f"{f.throughput:.0f} samples/s, AU {f.au_pct or 0:.1f}%, device peak "
                     f"{f.device_peak_gb or 0:.2f} GB, window {f.window_s or 0:.2f} s")
    if result.error:
        bad.append(f"error: {result.error}")
    if f.throughput is None:
        bad.append("no throughput (no measured step)")
    if result.emulated:
        bad.append("emulated: the run did not use the GPU")
    if args.ranks and len(result.ranks) != args.ranks:
        bad.append(f"{len(result.ranks)} rank record(s), expected {args.ranks}")
    for r in result.ranks:
        if "stand-in" in (r.model or ""):
            bad.append(f"rank {r.rank} trained the stand-in model ({r.model})")
        if not 0 < r.device_peak_bytes <= r.device_capacity_bytes:
            bad.append(f"rank {r.rank} device peak {r.device_peak_bytes} B outside (0, capacity "
                       f"{r.device_capacity_bytes} B]")
    return bad + check_nvml(result, args, notes)


def check_nvml(result, args, notes: list[str]) -> list[str]:
    f = result.figures
    if f.au_pct is None:
        return ["no au_pct"]
    if f.nvml_util_pct is None:
        return ["no NVML figures (nvml_util_pct is null)"]
    if (f.window_s or 0.0) < args.nvml_min_window:
        notes.append(f"AU {f.au_pct:.1f}% vs NVML {f.nvml_util_pct:.1f}%: not compared (window "
                            f"{f.window_s or 0:.2f} s < {args.nvml_min_window} s)")
        return []
    gap = abs(f.au_pct - f.nvml_util_pct)
    notes.append(f"AU {f.au_pct:.1f}% vs NVML {f.nvml_util_pct:.1f}%: {gap:.1f} points")
    return [] if gap <= args.nvml_points else [f"AU {f.au_pct:.1f}% and NVML {f.nvml_util_pct:.1f}% differ by "
                                                f"{gap:.1f} points (> {args.nvml_points})"]


def kernel_vs_events(trace: dict, rank, warmup: int) -> dict:
    """Kernel AU and event AU (%) over the profiled steps that are in the rank's window."""
    from harness.measure.profiling import kernel_busy

    steps = kernel_busy(trace)
    window = {n: got for n, got in steps.items() if 0 <= n - warmup < len(rank.device)}
    if not window:
        return {"error": f"{len(window)} profiled window step(s) with kernels in the trace ({len(steps)} in all)"}
    span = sum(s for _, s in window.values())
    busy = sum(b for b, _ in window.values())
    idx = [n - warmup for n in sorted(window)]
    device, step = sum(rank.device[i] for i in idx), sum(rank.step[i] for i in idx)
    return {"steps": sorted(window), "kernel_au_pct": round(100 * busy / span, 1),
            "event_au_pct": round(100 * device / step, 1) if step > 0 else None}


def check_profile(run: Path, result, args, notes: list[str]) -> list[str]:
    folder = run / "traces" / result.cell.replace("/", "_")
    paths = sorted(folder.glob("rank0.*.pt.trace.json"))
    if not paths:
        return [f"no rank-0 trace under {folder}"]
    rank0 = next((r for r in result.ranks if r.rank == 0), None)
    if rank0 is None:
        return ["no rank-0 record"]
    with paths[-1].open() as fh:
        got = kernel_vs_events(json.load(fh), rank0, args.warmup_steps)
    if "error" in got:
        return [f"trace {paths[-1].name}: {got['error']}"]
    if got["event_au_pct"] is None:
        return ["profiled steps took no time in the record"]
    gap = abs(got["kernel_au_pct"] - got["event_au_pct"])
    notes.append(f"steps {got['steps']}: kernel AU {got['kernel_au_pct']}% vs event AU "
                 f"{got['event_au_pct']}%: {gap:.1f} points (the whole window's AU: {result.figures.au_pct}%)")
    return [] if args.kernel_points is None or gap <= args.kernel_points else [
        f"profiler kernel AU {got['kernel_au_pct']}% and event AU {got['event_au_pct']}% differ by {gap:.1f} "
        f"points (> {args.kernel_points}) on steps {got['steps']}"]


def fastest_step_s(results) -> float | None:
    """The fastest cell's median step seconds (all its ranks' measured steps); None without a step."""
    medians = [statistics.median(steps) for r in results
               if (steps := [s for rank in r.ranks for s in (rank.step or [])])]
    return min(medians) if medians else None


def steps_for_window(step_s: float, window_s: float, least: int, most: int) -> int:
    """Steps of `step_s` seconds that last at least `window_s`, within [least, most]."""
    return max(least, min(most, math.ceil(window_s / step_s)))


def sized_steps(args) -> int:
    """--steps-for-window: print the steps (exit 0), or why there are none to time (stderr, exit 2)."""
    from harness.results.rundir import read_results

    run = run_dir_of(args.run)
    step_s = fastest_step_s(read_results(run)) if run is not None else None
    if not step_s or step_s <= 0:
        print(f"no measured step in {args.run} to size a window from", file=sys.stderr)
        return 2
    print(steps_for_window(step_s, args.steps_for_window, *args.steps_between))
    return 0


def parse(argv: list[str] | None):
    p = gpucommon.parser(__doc__)
    p.add_argument("run", type=Path, help="the run directory, or the --out folder that holds it")
    p.add_argument("--cells", type=int, default=0, help="the number of cells expected (0: any)")
    p.add_argument("--ranks", type=int, default=0, help="the ranks each cell must report (0: any)")
    p.add_argument("--profile", action="store_true", help="also check the profiler traces")
    p.add_argument("--warmup-steps", type=int, default=0, help="the run's warm-up steps (for --profile)")
    p.add_argument("--kernel-points", type=float, default=None,
                   help="most AU points kernel vs event time (default: reported, never a failure)")
    p.add_argument("--name", default="check_run", help="the result's name: <--out>/<name>.json and its verdict")
    p.add_argument("--nvml-points", type=float, default=15.0, help="most AU points between AU and NVML")
    p.add_argument("--nvml-min-window", type=float, default=2.0, help="shortest window compared with NVML (s)")
    p.add_argument("--require-nvml", action="store_true", help="fail when no cell was compared with NVML")
    p.add_argument("--steps-for-window", type=float, default=None, metavar="S",
                   help="check nothing: print the steps that make an S-second window at the run's step time")
    p.add_argument("--steps-between", type=int, nargs=2, default=(100, 1500), metavar=("LEAST", "MOST"),
                   help="the bounds of --steps-for-window's answer (default 100 1500)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.steps_for_window is not None:
        return sized_steps(args)
    from harness.results.rundir import read_results

    run = run_dir_of(args.run)
    if run is None:
        print(f"FAIL {args.name}: no cells.jsonl in {args.run} or its subfolders (the run wrote no cell)")
        return 2
    results = read_results(run)
    failures, compared = {}, 0
    for result in results:
        notes: list[str] = []
        bad = check_cell(result, args, notes) + (check_profile(run, result, args, notes) if args.profile else [])
        print(f"  {'FAILED' if bad else 'ok    '}  {result.cell}: " + "; ".join(bad + notes))
        compared += any(" vs NVML " in n and "not compared" not in n for n in notes)
        if bad:
            failures[result.cell] = bad
    run_bad = []
    if args.cells and len(results) != args.cells:
        run_bad.append(f"{len(results)} cell line(s), expected {args.cells}")
    if args.require_nvml and not compared:
        run_bad.append(f"no cell's window lasted {args.nvml_min_window} s: AU was not compared with NVML")
    if run_bad:
        failures["(run)"] = run_bad
    why = f"{len(results) - len([c for c in failures if c != '(run)'])}/{len(results)} cells hold in {run}" + (
        "".join(f"; {b}" for b in run_bad))
    return gpucommon.finish(args.name, not failures, {"run": str(run), "failures": failures}, args.out, why)


if __name__ == "__main__":
    sys.exit(main())

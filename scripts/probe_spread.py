"""The machine probe's spread between runs on one machine, and how often the machine check refuses this
machine's own baseline (issue 40; docs/measurements/ci-gate.md has the figures it measured).

    python scripts/probe_spread.py spread [--runs 20] [--hog] [--scenario ci] [--out FILE]
    python scripts/probe_spread.py refusals BASELINE [--tries 20] [--hog] [--scenario ci] [--out FILE]

`spread` runs the machine probe (harness.run.probe.measure, as a run's rank 0 does at the start of a repeat)
--runs times, each in a fresh Python process of its own (a run is a process of its own: the probe's pool, the
allocator and the pages of the memory copy are new each time), and prints each probe figure's median, range and
between-run spread: the largest factor between two runs (max / min), which bounds the ratio of two
single-repeat runs' figures. `refusals` makes --tries fresh processes that each measure the probe and then make
the comparability check of `--baseline` (harness.gates.baseline.check_baseline: the settings, taken as
the baseline's own, then this machine and this try's probe) against BASELINE, and counts the refusals.

--hog runs `python -c "while True: pass"` (one core of outside load) beside every try, started before the
first and killed after the last. Each try's line (its figures, the load average before it) goes to --out as
JSON lines when given. One try took 4 to 58 s on the 2-core development machine while other work loaded it.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIGURES = ("ideal_samples_per_s", "ideal_cpu_samples_per_s", "memcpy_gb_s")


def one(scenario_name: str, baseline_path: str | None) -> dict:
    """One try, in this process: the probe's figures and, with a baseline, why it is refused (None: accepted)."""
    sys.path.insert(0, str(REPO))
    import torch

    from harness.config import scenario
    from harness.gates import baseline as baseline_gate
    from harness.results.baselinefile import Baseline, BaselineError, machine_of
    from harness.results.environment import Environment
    from harness.results.probeline import ProbeSeries
    from harness.run import probe
    from harness.run.launch import threads_per_rank

    sc = scenario.load(scenario_name)
    torch.set_num_threads(threads_per_rank(sc.world_size))  # a rank's threads (harness.run.launch)
    line = probe.measure(sc, 0)
    out = {k: getattr(line, k) for k in FIGURES}
    if baseline_path:
        baseline = Baseline.load(baseline_path)
        series = ProbeSeries.from_lines([line])
        try:
            # the settings are the baseline's own (their check is the same on every try); the machine and the
            # probe are this try's
            baseline_gate.check_baseline(sc.name, dict(baseline.comparable),
                                        machine_of(Environment.capture([], {})), series, baseline)
            out["refused"] = None
        except BaselineError as err:
            out["refused"] = str(err)
        out["spread_rule"] = dict(baseline_gate.PROBE_SPREAD)  # the rule the try was judged by
    return out


def tries(n: int, scenario_name: str, baseline_path: str | None, out: Path | None) -> list[dict]:
    """`n` tries, each a fresh process, one progress line each on stderr."""
    cmd = [sys.executable, __file__, "_one", scenario_name] + ([baseline_path] if baseline_path else [])
    lines = []
    for i in range(1, n + 1):
        load = os.getloadavg()[0]
        start = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"probe_spread.py: try {i} failed (exit {proc.returncode}): "
                             f"{proc.stderr.strip().splitlines()[-1:]}")
        line = json.loads(proc.stdout.strip().splitlines()[-1]) | {"load_avg": load,
                                                                    "wall_s": time.monotonic() - start}
        lines.append(line)
        refused = "" if "refused" not in line else (" refused" if line["refused"] else " accepted")
        print(f"try {i}/{n}: ideal {line['ideal_samples_per_s']:.0f} samples/s, "
              f"{line['ideal_cpu_samples_per_s']:.0f} per CPU s, memcpy {line['memcpy_gb_s']:.2f} GB/s{refused} "
              f"(load average {load:.1f}, {line['wall_s']:.1f} s)", file=sys.stderr, flush=True)
        if out is not None:
            with out.open("a") as f:
                f.write(json.dumps(line) + "\n")
    return lines


@contextlib.contextmanager
def hog(on: bool):
    """One core of outside load while the block runs (nothing when not `on`)."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if on else None
    try:
        yield
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()


def median(xs: list[float]) -> float:
    s = sorted(xs)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def summary(lines: list[dict]) -> list[str]:
    """Per figure: median, range, the between-run spread (max / min) and the largest factor from the median."""
    rows = []
    for key in FIGURES:
        xs = [ln[key] for ln in lines]
        med = median(xs)
        rows.append(f"{key}: {len(xs)} runs, median {med:.4g}, range {min(xs):.4g} .. {max(xs):.4g}, between-run "
                    f"spread x{max(xs) / min(xs):.3f} (max / min), largest factor from the median "
                    f"x{max(max(x / med, med / x) for x in xs):.3f}")
    loads = [ln["load_avg"] for ln in lines]
    rows.append(f"load average {min(loads):.1f} .. {max(loads):.1f}")
    return rows


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("spread", "refusals"):
        s = sub.add_parser(name)
        if name == "refusals":
            s.add_argument("baseline")
        s.add_argument("--runs" if name == "spread" else "--tries", dest="n", type=int, default=20)
        s.add_argument("--hog", action="store_true", help="one core of outside load beside every try")
        s.add_argument("--scenario", default="ci")
        s.add_argument("--out", type=Path, help="each try as a JSON line, appended")
    one_p = sub.add_parser("_one")  # a single try, in a fresh process (what `spread` and `refusals` run)
    one_p.add_argument("scenario")
    one_p.add_argument("baseline", nargs="?")
    args = p.parse_args(argv)
    if args.command != "_one" and args.n < 2:
        p.error("at least 2 tries")
    if args.command == "refusals" and not Path(args.baseline).is_file():
        p.error(f"baseline {args.baseline} does not exist; make it with run_bench.py --save-baseline")
    return args


def main(argv: list[str]) -> int:
    args = parse(argv)
    if args.command == "_one":
        print(json.dumps(one(args.scenario, args.baseline)))
        return 0
    baseline = args.baseline if args.command == "refusals" else None
    with hog(args.hog):
        lines = tries(args.n, args.scenario, baseline, args.out)
    print(("beside a one-core hog" if args.hog else "no hog") + f", {args.scenario} scenario")
    print("\n".join(summary(lines)))
    if baseline:
        refused = [ln["refused"] for ln in lines if ln["refused"]]
        print(f"refused {len(refused)} of {len(lines)} tries against {baseline}")
        for why in dict.fromkeys(refused):
            print(f"  {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

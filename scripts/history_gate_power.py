"""The history gate's false alarms and power, measured (issue 29; docs/history.md has the table it made).

    python scripts/history_gate_power.py run OUT [--history-runs 10] [--rounds 5] [--until HH:MM]
    python scripts/history_gate_power.py judge OUT [--last 10]

`run` makes a worktree of HEAD under OUT/tree whose mmap reader burns PLANT_MS ms of CPU (time.thread_time)
per sample read (the plant of docs/ci-gate.md, in `read_batch`, read from the environment: 0 is the same
code, a float compare per batch), then runs `run_bench.py --scenario ci --repeats 1 --quiet` from it one after
another: first --history-runs same-code runs (the history), then --rounds rounds, each the four kinds
{same code, +0.03, +0.075, +0.15 ms a sample} (10%, 25% and 50% of the ci scenario's loader CPU of 0.3 ms a
sample) in a seeded random order. Each run is a line of OUT/runs.jsonl (its directory, its plant, its wall time,
the load average before it); --until stops before a round that would start after that UTC time. A second
`run` of the same OUT goes on where the first stopped. When done: `git worktree remove --force OUT/tree`.

`judge` adds every same-code run to a fresh history store (OUT/history.sqlite) and gates each run after the
first --history-runs against the last K same-code runs before it, with every figure the gate has
(harness.gates.history.METRICS), and prints a table of false alarms (same code, exit 1) and power (planted,
exit 1) per figure, each run's outside load (the median over its visits of the CPU other processes used,
harness.measure.hostload), the planted cells' ratios and the runs in which a cell without a plant was
flagged. Beside it, today's gates on the same runs where they apply (`today`): the A/B gate (6 against 6 runs,
disjoint groups) and the baseline gate's test against results/baselines/ci.json (5 runs merged as its 5
repeats).

Runtime: `run --rounds 15` (70 runs) took 52 minutes on the loaded 2-core machine of docs/history.md (13-89 s a
run; about 15 s a run on a quiet one); `judge`, 8 s.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PLANTS_MS = (0.03, 0.075, 0.15)  # 10%, 25%, 50% of the ci scenario's loader CPU (0.3 ms a sample)
READER = "strategies/storage/mmap.py"
ANCHOR = "        idx = checked_indices(indices, self._count)\n"
PLANT = ("        if _PLANT_S:  # history_gate_power.py's plant: CPU burned per sample read\n"
         "            _end = time.thread_time() + _PLANT_S * len(indices)\n"
         "            while time.thread_time() < _end:\n"
         "                pass\n")
HEADER = "import os as _os\nimport time\n_PLANT_S = float(_os.environ.get('PLANT_MS', '0')) / 1000\n"


def plant_tree(out: Path) -> Path:
    """A worktree of HEAD under OUT/tree with the plant in the mmap reader (made once)."""
    tree = out / "tree"
    if not tree.exists():
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(tree), "HEAD"], cwd=REPO, check=True)
        reader = tree / READER
        text = reader.read_text()
        if ANCHOR not in text:
            raise SystemExit(f"history_gate_power.py: {READER} has no line {ANCHOR.strip()!r} to plant after; "
                             f"update ANCHOR")
        future = "from __future__ import annotations\n"
        reader.write_text(text.replace(future, future + HEADER, 1).replace(ANCHOR, ANCHOR + PLANT, 1))
    return tree


def one_run(tree: Path, out: Path, plant_ms: float, index: int) -> dict:
    runs_dir = out / "runs" / f"{index:03d}"
    load = os.getloadavg()[0]
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "run_bench.py", "--scenario", "ci", "--repeats", "1", "--quiet",
                           "--data-dir", str(out / "data"), "--out", str(runs_dir)], cwd=tree,
                          env={**os.environ, "PLANT_MS": str(plant_ms)}, capture_output=True, text=True)
    made = sorted(p for p in runs_dir.glob("*-ci") if p.is_dir())
    return {"index": index, "plant_ms": plant_ms, "run_dir": str(made[-1]) if made else None, "rc": proc.returncode,
            "wall_s": round(time.monotonic() - start, 1), "loadavg_before": load,
            "time_utc": datetime.now(UTC).isoformat(timespec="seconds")}


def run(out: Path, history_runs: int, rounds: int, until: str | None, seed: int = 29) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tree = plant_tree(out)
    log = out / "runs.jsonl"
    done = [json.loads(ln) for ln in log.read_text().splitlines()] if log.exists() else []
    plan = [0.0] * history_runs
    rng = random.Random(seed)
    for _ in range(rounds):
        kinds = [0.0, *PLANTS_MS]
        rng.shuffle(kinds)
        plan += kinds
    for index in range(len(done), len(plan)):
        if until and index >= history_runs and (index - history_runs) % 4 == 0 \
                and datetime.now(UTC).strftime("%H:%M") >= until:
            print(f"history_gate_power: stopped before round {(index - history_runs) // 4 + 1} (--until {until})")
            break
        line = one_run(tree, out, plan[index], index)
        with log.open("a") as f:
            f.write(json.dumps(line) + "\n")
        print(json.dumps(line), flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("run", "judge"))
    parser.add_argument("out", type=Path)
    parser.add_argument("--history-runs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--until", help="run: no round starts after this UTC time (HH:MM)")
    parser.add_argument("--last", type=int, default=10, help="judge: the gate's K")
    args = parser.parse_args(argv)
    if args.action == "run":
        run(args.out, args.history_runs, args.rounds, args.until)
        return 0
    return judge(args.out, args.history_runs, args.last)


def _kind(plant_ms: float) -> str:
    return "same code" if not plant_ms else f"+{plant_ms:g} ms a sample ({plant_ms / 0.3:.0%})"


def _short(cell: str) -> str:
    names = dict(part.split("=", 1) for part in cell.split(",") if "=" in part)
    return f"{names.get('storage')}/{names.get('batching')}"


def _load(visits) -> float:
    """A run's outside load: the median over its visits of the host CPU other processes used, %."""
    loads = [v["other_cpu_pct"] for v in visits if v["other_cpu_pct"] is not None]
    return statistics.median(loads) if loads else float("nan")


def _groups(items: list, size: int) -> list[list]:
    """Disjoint groups of `size`, in order (what is left over is not used)."""
    return [items[i:i + size] for i in range(0, len(items) - size + 1, size)]


def today(out: Path, judged: list[dict], ab_runs: int = 6, baseline_repeats: int = 5) -> None:
    """Today's gates on the same runs: the A/B gate (harness.gates.ab: 6 against 6 single-repeat
    runs, cpu metric, min effect 15%, alpha 0.05 over the cells; each table in OUT/ab/) on disjoint groups of
    runs, and the baseline gate's test (results/baselines/ci.json, 10 repeats; the runs merged 5 at a time as its
    5 repeats)."""
    from harness.gates import ab
    from harness.gates import baseline as baseline_gate
    from harness.gates.inputs import run_as_baseline
    from harness.results.baselinefile import Baseline, BaselineError, merge

    kinds = sorted({r["plant_ms"] for r in judged})
    dirs = {k: [Path(r["run_dir"]) for r in judged if r["plant_ms"] == k] for k in kinds}
    print(f"\nthe A/B gate ({ab_runs} against {ab_runs} runs, disjoint groups of the runs above; cpu metric, "
          f"min effect 15%, alpha 0.05 over the cells):")
    for kind in kinds:
        if kind:
            pairs = list(zip(_groups(dirs[0.0], ab_runs), _groups(dirs[kind], ab_runs)))
        else:
            pairs = [(g[0::2], g[1::2]) for g in _groups(dirs[0.0], 2 * ab_runs)]
        codes = [ab_code(ab.judge(parent, current, metric="cpu"), out / "ab" / f"{kind:g}-{i}")
                 for i, (parent, current) in enumerate(pairs)]
        print(f"  {_kind(kind)}: {sum(c == 1 for c in codes)} of {len(codes)} A/B exit 1 (exits {codes})")
    path = REPO / "results" / "baselines" / "ci.json"
    print(f"\nthe baseline gate's test against {path.relative_to(REPO)} ({baseline_repeats} runs merged as its "
          f"{baseline_repeats} repeats; cpu metric, min effect 15%, alpha 0.05; exit 3: refused as another "
          f"machine or this one under heavy load):")
    base = Baseline.load(path)
    for kind in kinds:
        codes = []
        for group in _groups(dirs[kind], baseline_repeats):
            try:
                runs = merge([run_as_baseline(d) for d in group], "the runs")
                comparison = baseline_gate.compare(runs, base, min_effect=0.15, alpha=0.05, metric="cpu")
                codes.append(comparison.exit_code)
            except BaselineError:
                codes.append(3)
        print(f"  {_kind(kind)}: exits {codes}")


def ab_code(judgement, table_dir: Path) -> int:
    """The A/B gate's exit code of a judgement; its table, as the gate writes it, in TABLE_DIR/comparison.md."""
    from harness.gates import table

    if judgement.verdict is not None:
        table_dir.mkdir(parents=True, exist_ok=True)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            table.show(judgement.verdict, table_dir / "comparison.md")
    return judgement.exit_code


def judge(out: Path, history_runs: int, last: int) -> int:
    from harness.gates import history as history_gate
    from harness.history import database, runrows

    runs = [json.loads(ln) for ln in (out / "runs.jsonl").read_text().splitlines()]
    runs = [r for r in runs if r["rc"] == 0 and r["run_dir"]]
    db_path = out / "history.sqlite"
    db_path.unlink(missing_ok=True)
    db = database.open_store(db_path)
    rows = {}
    for r in runs:
        rows[r["index"]] = runrows.rows_of(Path(r["run_dir"]))
        if not r["plant_ms"]:
            database.insert_run(db, *rows[r["index"]])
    judged = [r for r in runs if r["index"] >= history_runs]
    kinds = sorted({r["plant_ms"] for r in judged})
    mmap = [c for c in dict.fromkeys(v["cell"] for v in rows[runs[0]["index"]][1]) if "storage=mmap" in c]
    results = {}  # (index, metric) -> (exit, mmap ratios, slower cells)
    for r in judged:
        run, visits, _ = rows[r["index"]]
        for metric in history_gate.METRICS:
            g = history_gate.gate(db, run, visits, metric, last)
            ratios = [row.result.ratio for row in g.rows if row.cell in mmap and row.result and row.result.ratio]
            results[r["index"], metric] = (g.exit_code if g.ran else None, ratios,
                                           [row.cell for row in g.rows if row.regression])
    print(f"{len(runs)} runs ({history_runs} same-code runs first, the history), each later one gated against "
          f"the last {last} same-code runs before it; alpha 0.05 over the cells, min effect 15%")
    header = "| planted loader slowdown | runs | outside load % (median of a run's visits) |"
    header += "".join(f" {m}: exit 1 | {m}: mmap cells' ratio |" for m in history_gate.METRICS)
    print(header + "\n" + "|---" * (3 + 2 * len(history_gate.METRICS)) + "|")
    for kind in kinds:
        these = [r for r in judged if r["plant_ms"] == kind]
        loads = [_load(rows[r["index"]][1]) for r in these]
        line = f"| {_kind(kind)} | {len(these)} | {min(loads):.0f} .. {max(loads):.0f} |"
        for metric in history_gate.METRICS:
            codes = [results[r["index"], metric][0] for r in these]
            ratios = [x for r in these for x in results[r["index"], metric][1]]
            not_run = sum(c is None for c in codes)
            line += f" {sum(c == 1 for c in codes)}{f' ({not_run} not run)' if not_run else ''} |"
            line += f" {min(ratios):.2f} .. {max(ratios):.2f} |" if ratios else " |"
        print(line)
    print("\nper run:")
    for r in judged:
        loads = _load(rows[r["index"]][1])
        verdicts = "; ".join(f"{m} exit {results[r['index'], m][0]}"
                             + (f" ({', '.join(_short(c) for c in results[r['index'], m][2])})"
                                if results[r["index"], m][2] else "") for m in history_gate.METRICS)
        print(f"  #{r['index']:3d} {_kind(r['plant_ms']):28s} load {loads:5.1f}% (loadavg {r['loadavg_before']:.1f}), "
              f"{r['wall_s']:.0f} s: {verdicts}")
    print("\nruns in which a cell without a plant (not mmap) was flagged slower, per figure:")
    for metric in history_gate.METRICS:
        hit = [r for r in judged if any("storage=mmap" not in c for c in results[r["index"], metric][2])]
        print(f"  {metric}: {len(hit)} of {len(judged)} ({', '.join('#' + str(r['index']) for r in hit) or 'none'})")
    today(out, judged)
    return 0


if __name__ == "__main__":
    sys.exit(main())

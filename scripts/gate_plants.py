"""Plant slowdowns as commits and run the CI gate on them exactly as .ci/run does (docs/ci-gate.md, "Measured
on real commits").

    python scripts/gate_plants.py run OUT --plant {none,loader,decode,rank} --tries N [--hog] [--ab]
    python scripts/gate_plants.py table OUT [OUT ...]

`run` makes a worktree of this checkout's HEAD in a temp dir (removed on any exit) and commits the plant there
on top of HEAD, so that the gate's parent (HEAD^ in the worktree) is this code without it; then N times
`bash scripts/ci_gate.sh` in the worktree, as .ci/run calls it: the baseline gate against the worktree's
results/baselines/ci.json and, when it passes, the A/B against the parent (the script's order since issue 40;
the table's "baseline" rows), or with --ab the A/B alone (CI_GATE_BASELINE names no file, so the precheck sends
the script straight to the A/B). --hog runs a one-core hog beside every try (numpy streaming 16 MB, as a busy
neighbour's cache and memory traffic). Each try's exit code, the verdict lines and its wall time are appended to
OUT/tries.jsonl. The data directory is this checkout's data/ (CI_GATE_DATA_DIR), made once.

The plants are fixed work (what a regression adds: instructions, not CPU seconds, so that the load slows a plant
as it slows the code around it), each sized on the quiet 2-core machine against the ci scenario's costs:

- loader: a Python loop in the collate of every batch, LOADER_LOOPS iterations per sample (about 0.035 ms a
  sample: +10% of the loader's timed stages over its decode stage in the median cell; 1250 iterations moved it
  by a median 7.4%, 3.2-12.2% by cell, in the first try);
- decode: every 4th image decoded and resized twice (decode_resize): +25% of the decode stage's work (a second
  libjpeg call alone, without the resize, moved the decode figure by only 6-10%);
- rank: a Python loop after every training step, RANK_LOOPS iterations per sample (about 0.075 ms a sample:
  +25% of the rank's CPU per sample, 0.30 ms).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LOADER_LOOPS = 2200  # ~0.045 ms of a quiet core (`for _ in range(n): pass` runs ~48 iterations a microsecond here)
RANK_LOOPS = 3600  # ~0.075 ms

# plant -> (file, anchor line, the lines put after it); the anchor must occur once
PLANTS = {
    "loader": ("harness/train/torchdataset.py",
               '    alloc = alloc or BatchAlloc()\n',
               f'    for _ in range({LOADER_LOOPS} * len(items)):  # PLANT: loader +10%\n        pass\n'),
    "decode": ("harness/data/decoders.py",
               '        check_decoder(decoder)\n        raise\n',
               '    global _PLANT  # PLANT: decode +25%: every 4th image decoded and resized twice\n'
               '    _PLANT = globals().get("_PLANT", 0) + 1\n'
               '    if _PLANT % 4 == 0:\n'
               '        impl(jpeg, image_size)\n'),
    "rank": ("harness/train/ddpstep.py",
             '    optimizer.zero_grad(set_to_none=True)\n    per_sample = padded_pixels // max(samples, 1)\n',
             f'    for _ in range({RANK_LOOPS} * samples):  # PLANT: rank +25%\n        pass\n'),
}
HOG = ("import numpy as np\na = np.random.rand(2_000_000)\n"
       "while True:\n    a = np.sqrt(a * 1.0001 + 0.5)\n")


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def plant(tree: Path, name: str) -> None:
    """Commit the plant in `tree` (an empty commit for "none": the parent is then the same code)."""
    if name != "none":
        rel, anchor, lines = PLANTS[name]
        path = tree / rel
        text = path.read_text()
        if text.count(anchor) != 1:
            raise SystemExit(f"gate_plants: the {name} plant's anchor is not once in {rel}; update PLANTS")
        path.write_text(text.replace(anchor, anchor + lines))
    git("-c", "user.name=plant", "-c", "user.email=plant@localhost", "commit", "-q", "-a", "--allow-empty",
        "-m", f"plant: {name}", cwd=tree)


def verdict_lines(text: str) -> list[str]:
    """The gate's verdict lines: one per figure (and the baseline or A/B line), each once."""
    found = [line.strip(" -") for line in text.splitlines() if "(metric: " in line and "|" not in line]
    return list(dict.fromkeys(found))


def changes(stdout: str) -> dict[str, list[float]]:
    """Each figure's change per cell (%), from the tables the gate prints (a table's title is its summary)."""
    out: dict[str, list[float]] = {}
    figure = None
    for line in stdout.splitlines():
        if "(metric: " in line and not line.lstrip().startswith("-"):
            figure = figure_of(line)
        elif figure and line.startswith("storage=") and (m := re.search(r"\s([+-]\d+\.\d)%\s", line)):
            out.setdefault(figure, []).append(float(m.group(1)))
    return out


def one_try(tree: Path, ab: bool, hog: bool) -> dict:
    env = dict(os.environ, CI_GATE_DATA_DIR=str(REPO / "data"))
    if ab:
        env["CI_GATE_BASELINE"] = str(tree / "results" / "baselines" / "none.json")
    hogger = subprocess.Popen([sys.executable, "-c", HOG]) if hog else None
    start = time.monotonic()
    try:
        done = subprocess.run(["bash", "scripts/ci_gate.sh"], cwd=tree, env=env, capture_output=True, text=True)
    finally:
        if hogger is not None:
            hogger.kill()
            hogger.wait()
    out = done.stdout + done.stderr
    slower = sorted({m.group(1) for m in re.finditer(r"^(\S+)\s.*\bslower\b", done.stdout, re.M)})
    refused = [line.strip() for line in out.splitlines() if "another machine" in line][:1]
    return {"exit": done.returncode, "wall_s": round(time.monotonic() - start, 1), "lines": verdict_lines(out),
            "refused": refused,
            "slower_rows": slower, "changes": changes(done.stdout), "tail": out.strip().splitlines()[-1:]}


def run(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gate-plants-") as tmp:
        tree = Path(tmp) / "tree"
        git("worktree", "add", "--detach", "-q", str(tree), "HEAD", cwd=REPO)
        try:
            plant(tree, args.plant)
            for i in range(args.tries):
                result = {"plant": args.plant, "hog": args.hog, "gate": "ab" if args.ab else "baseline", "try": i,
                          "commit": git("rev-parse", "--short", "HEAD^", cwd=tree).strip(),
                          **one_try(tree, args.ab, args.hog)}
                with open(out / "tries.jsonl", "a") as f:
                    f.write(json.dumps(result) + "\n")
                print(f"{args.plant} try {i}: exit {result['exit']} in {result['wall_s']} s; "
                      + "; ".join(result["lines"]), flush=True)
        finally:
            git("worktree", "remove", "--force", str(tree), cwd=REPO)
    return 0


def slower_count(line: str) -> int:
    """The cells a verdict line calls slower ("FAILED: 1 slower, 0 faster, ... (metric: ...")."""
    m = re.search(r"(\d+) slower", line)
    return int(m.group(1)) if m else 0


def figure_of(line: str) -> str:
    return line.split("(metric: ")[1].split(",")[0]


def table(args) -> int:
    """Per gate, load and plant: tries, exit 1 (all figures together), and each figure's FAILED count."""
    tries = [json.loads(line) for d in args.out for line in (Path(d) / "tries.jsonl").read_text().splitlines()]
    groups: dict[tuple, list[dict]] = {}
    for t in tries:
        groups.setdefault((t["gate"], t["hog"], t["plant"]), []).append(t)
    print("| gate | load | plant | tries | exit 1 | per figure: tries it called slower | per figure: median change "
          "over cells and tries | wall, median |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for (gate, hog, name), ts in sorted(groups.items()):
        per: dict[str, int] = {}
        for t in ts:
            called = {figure_of(line) for line in t["lines"] if slower_count(line) > 0}
            for line in t["lines"]:
                per[figure_of(line)] = per.get(figure_of(line), 0)
            for figure in called:
                per[figure] += 1
        moved: dict[str, list[float]] = {}
        for t in ts:
            for figure, values in t.get("changes", {}).items():
                moved.setdefault(figure, []).extend(values)
        medians = "; ".join(f"{k.split(':')[0]} {sorted(v)[len(v) // 2]:+.1f}%" for k, v in moved.items() if v)
        walls = sorted(t["wall_s"] for t in ts)
        called = "; ".join(f"{k.split(':')[0]} {v}" for k, v in per.items())
        print(f"| {gate} | {'one-core hog' if hog else 'quiet'} | {name} | {len(ts)} | "
              f"{sum(t['exit'] == 1 for t in ts)} | {called} | "
              f"{medians} | "
              f"{walls[len(walls) // 2]:.0f} s |")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("out")
    r.add_argument("--plant", choices=("none", *PLANTS), required=True)
    r.add_argument("--tries", type=int, default=10)
    r.add_argument("--hog", action="store_true")
    r.add_argument("--ab", action="store_true", help="the A/B gate (else the baseline gate)")
    t = sub.add_parser("table")
    t.add_argument("out", nargs="+")
    args = parser.parse_args(argv)
    return run(args) if args.command == "run" else table(args)


if __name__ == "__main__":
    sys.exit(main())

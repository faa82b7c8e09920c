"""The emulated step's own cost beside DLIO 2.0.0 (MLPerf Storage's engine), on one machine, interleaved.

DLIO runs `format: synthetic` (no file I/O: its reader hands the same array to every sample), 11,264-byte
records (the features workload's 2048 + 768 float32 embeddings), batch 32, one reader per rank
(`read_threads: 1`), `computation_time` 15 ms: per step it sleeps 15 ms and meets its peers in an MPI
barrier. dlbench runs `scenarios/loop-cost.toml`: the same batch and workers, features from mmap, a 15 ms
modelled step of a real DDP step of the stand-in model. Each round runs both tools at every rank count, the
order of the tools alternating between rounds, and prints AU per rank count for both with the outside load
(the CPU other processes used on this host during the run: the harness's per-visit figure for dlbench, the
same definition over DLIO's whole run, its launcher's tree measured through the children's rusage).

DLIO is installed in its own virtual environment (never beside the project), with Open MPI's `mpirun`:

    apt-get install -y openmpi-bin libopenmpi-dev
    python -m venv --system-site-packages /tmp/dlio-venv    # the system torch; DLIO's own pins are not taken
    /tmp/dlio-venv/bin/pip install --no-deps dlio-benchmark==2.0.0
    /tmp/dlio-venv/bin/pip install hydra-core omegaconf psutil pydftracer==1.0.2 mpi4py
    python scripts/dlio_side_by_side.py --dlio-python /tmp/dlio-venv/bin/python [--ranks 1,2,4] [--rounds 3]

DLIO's main module imports tensorflow even for PyTorch runs; the script puts a stub `tensorflow` package on
its path (any attribute raises ImportError). docs/measurements/dlio.md shows a measured run.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.config import scenario as scenario_mod  # noqa: E402
from harness.measure.hostload import host_ticks, outside_load  # noqa: E402
from harness.results import rundir  # noqa: E402

SCENARIO = "loop-cost"
RECORD_BYTES = (2048 + 768) * 4  # the features workload's two embeddings, float32
SAMPLES_PER_FILE = 64

TF_STUB = '''"""A stand-in for tensorflow: DLIO 2.0.0's main module imports it even for PyTorch runs."""


def __getattr__(name):
    raise ImportError(f"tensorflow is a stub here (no {name}): DLIO runs its PyTorch path")
'''


def dlio_settings(sc, max_ranks: int = 4) -> dict:
    """DLIO's side of the comparison from the scenario `sc` (harness.config.scenario.load): its batch, its
    workers per rank as DLIO's readers, its warm-up plus measured steps, and its modelled step for a batch as
    `computation_time`; enough (empty) files of SAMPLES_PER_FILE samples for every step at `max_ranks` ranks."""
    tr = sc.training
    step_s = sc.accelerator.step_seconds(tr.workload, tr.batch_size, 0)
    total = tr.warmup_steps + tr.steps
    return {"batch_size": tr.batch_size, "read_threads": tr.workers, "computation_time": round(step_s, 6),
            "total_training_steps": total, "record_length": RECORD_BYTES,
            "num_files_train": -(-total * tr.batch_size * max_ranks // SAMPLES_PER_FILE)}


def workload_yaml(data_dir: Path, settings: dict) -> str:
    """DLIO's workload: the loop-cost scenario's settings, without file I/O."""
    return f"""model: loop_cost
framework: pytorch
workflow:
  generate_data: False
  train: True
  checkpoint: False
dataset:
  data_folder: {data_dir}
  format: synthetic
  num_files_train: {settings["num_files_train"]}
  num_samples_per_file: {SAMPLES_PER_FILE}
  record_length: {settings["record_length"]}
reader:
  data_loader: pytorch
  batch_size: {settings["batch_size"]}
  read_threads: {settings["read_threads"]}
train:
  epochs: 1
  total_training_steps: {settings["total_training_steps"]}
  computation_time: {settings["computation_time"]}
"""


class UsageError(Exception):
    """A bad argument: printed as one line, exit 2."""


def parse_ranks(text: str) -> list[int]:
    try:
        ranks = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        ranks = []
    if not ranks or min(ranks) < 1:
        raise UsageError(f"--ranks {text!r}: give rank counts as positive integers separated by commas, e.g. 1,2,4")
    return ranks


def check_dlio(python: str) -> None:
    """The DLIO interpreter imports dlio_benchmark, and Open MPI's mpirun is on PATH; else one line."""
    if not Path(python).is_file():
        raise UsageError(f"--dlio-python {python}: no such interpreter; install DLIO 2.0.0 in its own venv "
                         f"(this script's docstring) and pass its bin/python")
    if shutil.which("mpirun") is None:
        raise UsageError("mpirun not found: install Open MPI (apt-get install -y openmpi-bin libopenmpi-dev)")
    probe = subprocess.run([python, "-c", "import dlio_benchmark, mpi4py, hydra"], capture_output=True, text=True)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        raise UsageError(f"--dlio-python {python} cannot import DLIO ({last}); install dlio-benchmark==2.0.0 "
                         f"with --no-deps plus hydra-core omegaconf psutil pydftracer==1.0.2 mpi4py in that venv")


class Dlio:
    """DLIO 2.0.0 in `work`: its config directory, a tensorflow stub, its (empty) synthetic files."""

    def __init__(self, python: str, work: Path, settings: dict):
        self.python, self.work, self.settings = python, work, settings
        (work / "stub" / "tensorflow").mkdir(parents=True, exist_ok=True)
        (work / "stub" / "tensorflow" / "__init__.py").write_text(TF_STUB)
        (work / "conf" / "workload").mkdir(parents=True, exist_ok=True)
        (work / "conf" / "workload" / "loop_cost.yaml").write_text(workload_yaml(work / "data", settings))
        self.env = {**os.environ, "PYTHONPATH": str(work / "stub")}

    def command(self, ranks: int, out: Path, *extra: str) -> list[str]:
        root = ["--allow-run-as-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
        return ["mpirun", *root, "--oversubscribe", "-np", str(ranks), self.python, "-m", "dlio_benchmark.main",
                "--config-dir", str(self.work / "conf"), "workload=loop_cost",
                f"++workload.output.folder={out}", *extra]

    def generate(self) -> None:
        """DLIO lists its data folder even for synthetic data: one empty file per 64 samples, made once."""
        train = self.work / "data" / "train"
        if not train.is_dir() or len(list(train.iterdir())) < self.settings["num_files_train"]:
            run_quiet(self.command(1, self.work / "gen", "++workload.workflow.generate_data=True",
                                   "++workload.workflow.train=False"), self.env, "DLIO's data generation",
                      cwd=self.work)  # DLIO writes hydra_log/ and checkpoints/ where it runs

    def run(self, ranks: int, tag: str) -> dict:
        out = self.work / "out" / tag
        host0, cpu0 = host_ticks(), children_ticks()
        run_quiet(self.command(ranks, out), self.env, f"DLIO at {ranks} ranks", cwd=self.work)
        host1, cpu1 = host_ticks(), children_ticks()
        other = outside_load(host0, host1, cpu0, cpu1)[0] if host0 and host1 else None
        return {"au_pct": dlio_au(out / "summary.json"), "other_cpu_pct": other}


def children_ticks() -> int:
    """CPU clock ticks of this process's reaped children and their reaped descendants (mpirun waits for
    its ranks, so a finished DLIO run is all in it)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return round((usage.ru_utime + usage.ru_stime) * os.sysconf("SC_CLK_TCK"))


def run_quiet(cmd: list[str], env: dict, what: str, cwd: Path | None = None) -> None:
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=cwd)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise RuntimeError(f"{what} failed (exit {done.returncode}):\n{tail}")


def dlio_au(summary: Path) -> float:
    """DLIO's training AU (%), mean over epochs, from the summary.json it writes at the end of a run."""
    return float(json.loads(summary.read_text())["metric"]["train_au_mean_percentage"])


def ours(ranks: int, out: Path, steps: int | None, tree: Path = ROOT) -> dict:
    """One dlbench run of the loop-cost scenario from `tree` (a checkout of the repository); its cell's
    figures."""
    before = set(out.glob("*")) if out.exists() else set()
    cmd = [sys.executable, str(tree / "run_bench.py"), "--scenario", SCENARIO, "--world-size", str(ranks),
           *(["--steps", str(steps)] if steps else []), "--quiet", "--out", str(out), "--data-dir", str(ROOT / "data")]
    run_quiet(cmd, dict(os.environ), f"dlbench ({tree}) at {ranks} ranks", cwd=tree)
    (run_dir,) = set(out.glob("*")) - before
    return ours_figures(run_dir)


OUR_FIGURES = ("au_pct", "other_cpu_pct", "peer_wait_pct", "overhead_pct", "stall_mean_pct", "overrun_pct",
               "launch_ms_p50", "rank_cpu_s_per_sample")


def ours_figures(run_dir: Path) -> dict:
    """The figures of the run's one cell (cells.jsonl's first line, read through the versioned reader)."""
    figures = rundir.read_results(run_dir)[0].figures
    return {k: figures.get(k) for k in OUR_FIGURES}


def parse_trees(specs: list[str]) -> dict[str, Path]:
    """--tree NAME=PATH (repeatable): dlbench checkouts to run side by side; none: this repository."""
    trees: dict[str, Path] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or name == "dlio" or not (Path(path) / "run_bench.py").is_file():
            raise UsageError(f"--tree {spec!r}: give NAME=PATH, PATH a checkout of this repository (with "
                             f"run_bench.py) and NAME not 'dlio'")
        trees[name] = Path(path).resolve()
    return trees or {"dlbench": ROOT}


def table(rows: list[dict], ranks: list[int], trees: list[str]) -> str:
    """Median AU (min-max) per tool and rank count, its median ratio to DLIO's in the same round, the medians
    of dlbench's overrun and peer wait, and the median outside load, as markdown."""
    def cell(tool: str, n: int, key: str, spread: bool = True) -> str:
        vals = [r[key] for r in rows if r["tool"] == tool and r["ranks"] == n and r.get(key) is not None]
        if not vals:
            return "-"
        med = f"{statistics.median(vals):.1f}"
        return f"{med} ({min(vals):.1f}-{max(vals):.1f})" if spread and len(vals) > 1 else med

    def ratio(tool: str, n: int) -> str:
        """Median over rounds of the tool's AU / DLIO's AU in the same round (the interleaved ratio)."""
        dlio = {r["round"]: r["au_pct"] for r in rows if r["tool"] == "dlio" and r["ranks"] == n}
        vals = [r["au_pct"] / dlio[r["round"]] for r in rows if r["tool"] == tool and r["ranks"] == n
                and dlio.get(r.get("round"))]
        return f"{statistics.median(vals):.2f}" if vals else "-"

    lines = ["| ranks | tool | AU % median (min-max) | AU / DLIO's, same round | overrun % | peer wait % | "
             "outside load % | rounds |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for n in ranks:
        for tool in ("dlio", *trees):
            rounds = sum(1 for r in rows if r["tool"] == tool and r["ranks"] == n)
            label = "DLIO 2.0.0" if tool == "dlio" else tool
            lines.append(f"| {n} | {label} | {cell(tool, n, 'au_pct')} | {ratio(tool, n) if tool != 'dlio' else '1'} | "
                         f"{cell(tool, n, 'overrun_pct', False)} | {cell(tool, n, 'peer_wait_pct', False)} | "
                         f"{cell(tool, n, 'other_cpu_pct', False)} | {rounds} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dlio-python", required=True, help="the python of DLIO 2.0.0's own venv")
    ap.add_argument("--ranks", default="1,2,4", help="rank counts, comma-separated (default 1,2,4)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every tool at every rank count")
    ap.add_argument("--steps", type=int, default=None, help="measured steps per run (default: the scenario's)")
    ap.add_argument("--work", type=Path, default=None, help="a folder for the runs' output (default: temporary)")
    ap.add_argument("--jsonl", type=Path, default=None, help="append one line per run here")
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                    help="a dlbench checkout to run beside DLIO (repeatable; default: this repository)")
    args = ap.parse_args(argv)
    try:
        ranks = parse_ranks(args.ranks)
        if args.rounds < 1 or (args.steps is not None and args.steps < 2):
            raise UsageError("--rounds must be at least 1 and --steps at least 2")
        trees = parse_trees(args.tree)
        check_dlio(args.dlio_python)
    except UsageError as err:
        print(f"dlio_side_by_side: {err}", file=sys.stderr)
        return 2
    work = args.work or Path(tempfile.mkdtemp(prefix="dlio-side-by-side-"))
    settings = dlio_settings(scenario_mod.load(SCENARIO, {"steps": args.steps}), max(ranks))
    dlio = Dlio(args.dlio_python, work / "dlio", settings)
    dlio.generate()
    rows: list[dict] = []
    for rnd in range(args.rounds):
        for n in ranks:
            tools = ["dlio", *trees]
            shift = (rnd + n) % len(tools)  # each tool first in turn
            for tool in tools[shift:] + tools[:shift]:
                started = time.time()
                figures = dlio.run(n, f"r{rnd}-n{n}") if tool == "dlio" else \
                    ours(n, work / tool, args.steps, trees[tool])
                row = {"round": rnd, "ranks": n, "tool": tool, "wall_s": round(time.time() - started, 1), **figures}
                rows.append(row)
                print(json.dumps(row), flush=True)
                if args.jsonl is not None:
                    with args.jsonl.open("a") as f:
                        f.write(json.dumps(row) + "\n")
    print(table(rows, ranks, list(trees)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

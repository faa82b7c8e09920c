"""Run a scenario with a [remote] table against the project's own shaped object store, until the bench command
starts it itself (the lines asked for in docs/remote.md): the session (harness.data.remote: namespace, veth,
tc, moto inside, the AWS environment) is entered here, ``run_bench.py`` runs inside it with every argument
given, and the remote figures of each storage setting are printed after it and written beside its report
(remote.md in the run directory).

    python scripts/s3/run_remote.py --scenario remote --out results [any run_bench.py option]

The disk cache tiers of the scenario's storages are emptied first (a cold tier for the first visit). Everything
started is stopped on any exit, SIGTERM and Ctrl-C included; the exit code is run_bench.py's (2 with one line
for a mistake in the scenario or a machine that cannot shape the link).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from harness.config import scenario  # noqa: E402
from harness.data import remotefigures  # noqa: E402
from harness.data.remote import session  # noqa: E402
from harness.errors import UsageError  # noqa: E402
from strategies.remote.source import STATS_ENV  # noqa: E402


def _storages(sc) -> list:
    return [c.create() for c in sc.matrix.get("storage", []) if c.name == "s3"]


def _newest_run(out: Path, before: set[Path]) -> Path | None:
    runs = [p for p in out.glob("*") if p.is_dir() and p not in before]
    return max(runs, key=lambda p: p.stat().st_mtime) if runs else None


def _bench(argv: list[str], env: dict) -> int:
    child = subprocess.Popen([sys.executable, str(REPO / "run_bench.py"), *argv], cwd=REPO, env=env)
    try:
        return child.wait()
    finally:
        if child.poll() is None:  # we are leaving on a signal: the bench goes first, then the store
            child.terminate()
            try:
                child.wait(30)
            except subprocess.TimeoutExpired:
                child.kill()


def report(stats: Path, storages: list) -> str:
    rows = [remotefigures.row(s.label(), remotefigures.figures(stats, s.label())) for s in storages
            if s.label() in remotefigures.labels(stats)]
    return remotefigures.table(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--out", default="results")
    known, rest = ap.parse_known_args()
    try:
        sc = scenario.load(known.scenario)
        if sc.remote is None:
            raise UsageError(f"{sc.path}: no [remote] table: this runner is for a scenario that reads the "
                             f"project's own object store (e.g. --scenario remote)")
        storages = _storages(sc)
        for s in storages:
            s.clear_disk_cache()
        out = Path(known.out)
        out.mkdir(parents=True, exist_ok=True)
        before = set(out.glob("*"))
        with tempfile.TemporaryDirectory(prefix="dlbench-remote-stats-") as stats, session(sc.remote) as live:
            for line in live.header():
                print(f"remote: {line}", file=sys.stderr)
            env = {**os.environ, STATS_ENV: stats}
            code = _bench(["--scenario", known.scenario, "--out", str(out), *rest], env)
            table = report(Path(stats), storages)
            header = live.header()
    except UsageError as err:
        print(f"run_remote.py: error: {err}", file=sys.stderr)
        return 2
    print("remote figures (every reading process of every visit, merged per storage setting):")
    print(table)
    run = _newest_run(out, before)
    if run is not None:
        (run / "remote.md").write_text("# Remote figures\n\n" + "\n".join(f"- {h}" for h in header) + "\n\n"
                                       + table + "\n")
        print(f"written: {run / 'remote.md'}")
    return code


if __name__ == "__main__":
    sys.exit(main())

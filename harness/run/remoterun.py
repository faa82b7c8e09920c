"""A bench run inside a [remote] scenario's session: the project's own object store behind its
shaped link (harness.lab.session, stopped on any exit), a temporary folder the readers append their
counters to (the run's LaunchConfig.remote_counters: each visit's figures over its window go into
its cells.jsonl line, harness.measure.remotecounters.of_visit), then the whole run's figures of
each storage setting printed and written beside the report (remote.md, in
harness.measure.remotecounters' COLUMNS and the client). A storage's disk tier is emptied at each
open (strategies.storage.s3), so each visit starts cold."""
from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from harness import safewrite
from harness.config.scenario import Scenario
from harness.errors import UsageError
from harness.lab.session import remove_dead_runs, session
from harness.measure import remotecounters
from harness.measure.remotecounters import COLUMNS, RemoteFigures
from strategies.remote.s3client import RemoteError


def with_remote(sc: Scenario, torchrun: bool, run_dir: Path, run: Callable[[Path | None], int]) -> int:
    """`run(folder)` inside the scenario's remote session where it has a [remote] table, ``folder``
    the readers' counters folder; without one, `run(None)` as it is. `torchrun`: this process is a
    torchrun rank (refused: one process must own the store). Any run first removes what a killed
    remote run left."""
    if not torchrun:
        for what in remove_dead_runs():
            print(f"remote: removed {what}, left by a run that was killed", file=sys.stderr)
    if sc.remote is None:
        return run(None)
    if torchrun:
        raise UsageError(f"{sc.path}: [remote] starts the project's own object store, which one process must own; "
                         "under torchrun it is not supported yet: run without torchrun (the bench spawns the ranks)")
    labels = [c.create().label() for c in sc.matrix.get("storage", []) if c.name == "s3"]
    with tempfile.TemporaryDirectory(prefix="dlbench-remote-stats-") as stats, session(sc.remote) as live:
        header = live.header()
        for line in header:
            print(f"remote: {line}", file=sys.stderr)
        try:
            code = run(Path(stats))
        except RemoteError as err:  # writing the data to the bucket (materialise): the URL and the remedy
            raise UsageError(str(err)) from None
        rows = [row(label, remotecounters.figures(stats, label)) for label in labels
                if label in remotecounters.labels(stats)]
    write_figures(run_dir, header, table(rows))
    return code


HEADER = ("cell", *(h for h, _, _ in COLUMNS), "client")


def row(cell: str, f: RemoteFigures) -> list[str]:
    """remote.md's row of one storage setting: its figures over the whole run, and its clients."""
    values = f.values()
    return [cell, *(remotecounters.text(values[key], spec) for _, key, spec in COLUMNS), f.clients or "-"]


def table(rows: list[list[str]]) -> str:
    """A markdown table of the rows under HEADER."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + " --- |" * len(HEADER)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def write_figures(run_dir: Path, header: list[str], text: str) -> None:
    """The whole run's figures printed, and written as remote.md in the run directory (when there
    is one)."""
    print(f"remote figures (every reading process of every visit, merged per storage setting):\n{text}")
    if Path(run_dir).is_dir():
        safewrite.write_text(Path(run_dir) / "remote.md", "# Remote figures\n\n" + "\n".join(f"- {h}" for h in header)
                             + "\n\n" + text + "\n", run_dir)

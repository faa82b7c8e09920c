"""`run_bench.py ci-history --gate-exit N`: after the A/B or baseline gate of a CI job (.ci/run),
the history gate against the history a CI system keeps between jobs, one line with both verdicts
and which binds, and the job's exit code (harness.gates.cicache has the rule).

The cache is a directory (--cache DIR, else $DLBENCH_CI_CACHE) that the CI restores before the job
and saves after it; its history store is DIR/ci-history.sqlite. The job's own runs are in the job's
store (--job-history FILE, the file .ci/run gives the gate as DLBENCH_HISTORY); those of the commit
under test (--commit, else this checkout's HEAD) are judged against the cache, then appended to it
when the job passes.

Without a cache: one line, the gate's exit code stands alone (its 5, NOT RUN: it measured nothing,
is named and fails nothing by itself: the job exits 0). A cache of another machine's runs, one too
short to judge, one that cannot be read (damaged, newer, locked), or a job that recorded no run:
one line, NOT RUN, never a failure. A cache path that is a file or cannot be made: exit 2 with the
remedy.
"""
from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UsageError
from harness.gates import cicache
from harness.gates.cicache import CacheVerdict
from harness.history import database
from harness.results.fileformat import ResultsError

PREFIX = "ci gate"
REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class CiHistoryRequest:
    """`run_bench.py ci-history`: the A/B or baseline gate's exit code, the cache directory (None:
    no cache), the job's history store, the commit under test ("": this checkout's HEAD) and the
    history gate's settings."""

    gate_exit: int
    cache: Path | None = None
    job_history: Path = Path("results/ci-history.sqlite")
    commit: str = ""
    last: int = 10
    min_effect: float = 0.15
    alpha: float = 0.05


def head_commit() -> str:
    """This checkout's HEAD ("" when git cannot tell)."""
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def cache_file(cache: Path) -> Path:
    """The cache directory's history store, the directory made when the CI restored none (a first
    job)."""
    if cache.exists() and not cache.is_dir():
        raise UsageError(f"DLBENCH_CI_CACHE={cache} is a file; set it to the directory your CI restores and "
                         f"saves between jobs (docs/ci-gate.md)")
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"DLBENCH_CI_CACHE={cache} cannot be made ({err.strerror or err}); set it to a "
                         f"writable directory") from None
    return cache / cicache.CACHE_FILE


def main(request: CiHistoryRequest) -> int:
    """The history verdict against the cache, the one line, the job's exit code."""
    if request.last < 1:
        raise UsageError(f"--last {request.last} must be a positive number of runs")
    if request.cache is None:
        return _say(request.gate_exit, cicache.not_run("no CI cache (DLBENCH_CI_CACHE is not set)"))
    path = cache_file(Path(request.cache))
    commit = request.commit or head_commit()
    if not Path(request.job_history).is_file():
        return _say(request.gate_exit, cicache.not_run(f"this job recorded no run ({request.job_history} does not "
                                                       f"exist: the gate measured none)"))
    try:
        job_db = database.open_store(request.job_history, create=False)
        runs = cicache.job_runs(job_db, commit)
    except ResultsError as err:
        return _say(request.gate_exit, cicache.not_run(f"this job's history cannot be read ({err})"))
    if not runs:
        return _say(request.gate_exit, cicache.not_run(f"this job recorded no run of commit {commit[:12]} "
                                                       f"in {request.job_history} (the gate measured none)"))
    try:
        cache_db = database.open_store(path)
    except ResultsError as err:
        why = f"{err}; it is left as it is: delete it or change the cache key to start a fresh history"
        return _say(request.gate_exit, cicache.not_run(why), added="this job's runs are not added")
    verdict = cicache.judge(cache_db, job_db, runs, request.last, request.min_effect, request.alpha)
    if verdict.table:
        print(verdict.table)
    code = cicache.job_exit(request.gate_exit, verdict)
    return _say(request.gate_exit, verdict, path, _append(cache_db, job_db, runs, path, code))


def _append(cache_db, job_db, runs, path: Path, code: int) -> str:
    """The job's runs into the cache when the job passes; what was done, in words."""
    if code != 0:
        return "this job's runs are not added (the job fails: its runs would become the next job's history)"
    try:
        added = cicache.append(cache_db, job_db, runs)
    except ResultsError as err:
        return f"this job's runs are not added ({err})"
    return f"{added} run(s) of this commit added to the cache (now {len(database.runs(cache_db))} runs in {path})"


def _say(gate_exit: int, verdict: CacheVerdict, path: Path | None = None, added: str = "") -> int:
    """The one line with both verdicts and which binds; the job's exit code."""
    code = cicache.job_exit(gate_exit, verdict)
    where = f" against the CI cache {path}" if path else ""
    history = (("FAILED: " if verdict.exit_code else "passed: ") + verdict.why) if verdict.ran else \
        f"NOT RUN: {verdict.why}"
    tail = f"; {added}" if added else ""
    print(f"{PREFIX}: the A/B or baseline gate: {cicache.gate_words(gate_exit)} (exit {gate_exit}); the history "
          f"gate{where}: {history}; {cicache.binding(verdict)}: the job exits {code}{tail}", file=sys.stderr)
    return code

"""The history gate against a CI cache: a job's runs of the commit under test judged against the
history store that a CI system keeps between jobs (a directory restored by key, DLBENCH_CI_CACHE),
the rule that says which verdict binds, and the runs appended for the next job. The judgement is
the history gate's own (harness.gates.history: its lookback test, its comparable runs of one
machine fingerprint and settings).

The rule (docs/ci-gate.md, "History that CI keeps"):

- the A/B (or baseline) gate always binds: its failure fails the job whatever the history says; its
  NOT RUN (EXIT_NOT_RUN: it measured nothing, named in the job's line) is no failure, and the
  history verdict decides;
- a history regression fails the job too once the cache holds at least BINDS_AT comparable runs
  (this machine's fingerprint, these settings): the lookback the history gate was measured with (K
  = 10: 0 false alarms in 15 same-code runs, 15 of 15 caught at +25%, where the A/B caught 0 of 2);
- with 3 .. BINDS_AT - 1 comparable runs its verdict is reported only, and with fewer (a first job,
  another machine's runs, other settings, a cache that cannot be read) it is NOT RUN: one line,
  never a failure;
- the job's runs are appended only when the job passes: a failed job's runs would become the next
  job's history (GitHub's and GitLab's caches are saved on success only by default; a persistent
  directory is not).
"""
from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass

from harness.errors import EXIT_BASELINE, EXIT_NOT_RUN, EXIT_OK, EXIT_REGRESSION, EXIT_USAGE
from harness.gates import history as history_gate
from harness.gates.lookback import MIN_RUNS
from harness.history import database

CACHE_FILE = "ci-history.sqlite"  # the history store's name inside the cache directory
BINDS_AT = 10  # comparable runs from which a history regression fails the job as well


@dataclass(frozen=True)
class CacheVerdict:
    """The history gate against the cache: whether it ran, its exit code (0 or 1), the comparable
    runs it judged against, the reason when it did not run (else its summary), and its table."""

    ran: bool
    exit_code: int
    runs: int
    why: str
    table: str = ""

    @property
    def binds(self) -> bool:
        """Whether this verdict may fail the job (a full lookback of comparable runs)."""
        return self.ran and self.runs >= BINDS_AT


def not_run(why: str) -> CacheVerdict:
    """A history verdict that did not run, with its reason."""
    return CacheVerdict(False, 0, 0, why)


def job_runs(job_db: sqlite3.Connection, commit: str) -> list[sqlite3.Row]:
    """The job store's runs of `commit` (the commit under test; an A/B's parent runs are left out),
    oldest first."""
    return [r for r in database.runs(job_db) if r["commit_id"] == commit]


def judge(cache_db: sqlite3.Connection, job_db: sqlite3.Connection, runs: list[sqlite3.Row], last: int = 10,
          min_effect: float = 0.15, alpha: float = 0.05) -> CacheVerdict:
    """The job's runs of the commit (each cell's value: the median of its visits over all of them)
    against the last `last` comparable runs of the cache, by the history gate on each of the three
    figures the A/B and baseline gates judge (history_gate.FIGURES), each at alpha / 3; a figure
    the cache's runs lack (an older store's rows) is left out, and the verdict runs on those that
    remain."""
    newest = dict(runs[-1])
    visits = [v for r in runs for v in database.visits_of(job_db, r["id"])]
    results = [history_gate.gate(cache_db, newest, visits, figure, last, min_effect, alpha / len(history_gate.FIGURES))
               for figure in history_gate.FIGURES]
    ran = [r for r in results if r.ran]
    if not ran:
        return not_run(_why_not(cache_db, newest, results[0]))
    return CacheVerdict(True, max(r.exit_code for r in ran), len(ran[0].history),
                        "; ".join(history_gate.summary(r) for r in ran),
                        "\n\n".join(history_gate.render(r) for r in ran))


def _why_not(cache_db: sqlite3.Connection, run: dict, result: history_gate.HistoryGate) -> str:
    """Why the history gate could not judge the run against the cache: no run of the scenario yet,
    only another machine's, only other settings, too few, or no cell with the gate's figure."""
    scenario = run["scenario"]
    same_scenario = [r for r in database.runs(cache_db, scenario) if r["run_key"] != run["run_key"]]
    mine = [r for r in same_scenario if r["machine_fp"] == run["machine_fp"]]
    if not same_scenario:
        return f"the cache holds no earlier run of scenario {scenario} (a first job, or a new cache key)"
    if not mine:
        return (f"the cache's {len(same_scenario)} run(s) of scenario {scenario} are of another machine "
                f"({machine_difference(same_scenario[-1]['machine'], run['machine'])}); key the cache by the "
                f"runner's kind")
    if not [r for r in mine if r["settings_hash"] == run["settings_hash"]]:
        return f"the cache's {len(mine)} run(s) of scenario {scenario} on this machine have other settings"
    if len(result.history) < MIN_RUNS:
        return (f"{len(result.history)} comparable run(s) in the cache (this machine, these settings); the "
                f"history gate needs {MIN_RUNS}")
    return next((w.removeprefix("NOT RUN: ") for w in result.warnings), "no cell to judge")


def machine_difference(there: str, here: str) -> str:
    """What tells two recorded machines (runs.machine, JSON) apart, the hostname aside: "cpu_model
    X there, Y here; ..."."""
    a, b = json.loads(there), json.loads(here)
    keys = [k for k in sorted({*a, *b}) if k != "hostname" and a.get(k) != b.get(k)]
    return "; ".join(f"{k} {a.get(k)} there, {b.get(k)} here" for k in keys) or "another fingerprint"


def job_exit(gate_exit: int, verdict: CacheVerdict) -> int:
    """The job's exit code: the A/B or baseline gate's, or 1 when it passed (or was NOT RUN: it
    measured nothing) and a binding history verdict found a regression."""
    if gate_exit not in (EXIT_OK, EXIT_NOT_RUN):
        return gate_exit
    return 1 if verdict.binds and verdict.exit_code else 0


def binding(verdict: CacheVerdict) -> str:
    """Which verdict binds, in words."""
    if not verdict.ran:
        return "the A/B or baseline gate alone binds"
    if verdict.binds:
        return f"both bind ({verdict.runs} comparable runs, {BINDS_AT} needed): a regression in either fails the job"
    return (f"the A/B or baseline gate binds; the history verdict is reported only ({verdict.runs} of the "
            f"{BINDS_AT} comparable runs it needs to bind)")


def gate_words(code: int) -> str:
    """The A/B or baseline gate's exit code in words."""
    return {EXIT_OK: "passed", EXIT_REGRESSION: "FAILED (a regression)", EXIT_USAGE: "a run error",
            EXIT_BASELINE: "not comparable", EXIT_NOT_RUN: "NOT RUN (it measured nothing)"}.get(code, "stopped")


def append(cache_db: sqlite3.Connection, job_db: sqlite3.Connection, runs: list[sqlite3.Row]) -> int:
    """The job's runs copied into the cache by the store's own writer (a run already there is
    skipped): how many were added."""
    added = 0
    for r in runs:
        visits = [dict(v) for v in database.visits_of(job_db, r["id"])]
        effects = [dict(e) for e in database.effects_of(job_db, r["id"])]
        added += database.insert_run(cache_db, dict(r), visits, effects) is not None
    return added

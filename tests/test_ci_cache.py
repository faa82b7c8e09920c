"""`run_bench.py ci-history` (harness.gates.ci_command, harness.gates.cicache): a CI job's runs of the
commit under test against the history a CI cache keeps between jobs, the one line with both verdicts and which
binds, and the runs appended for the next job. The unit tests feed the stores with recorded run directories
through the harness's own writer (`history add`) and run the command line in this process; the slow test runs
two jobs in a row on this machine with real runs and one cache directory, as .ci/run does."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO
from test_history import CELLS, history, in_process, write_run

from harness.gates import cicache
from harness.history import database


def store_of(path: Path, run_dirs: list[Path]) -> Path:
    """A history store at `path` holding `run_dirs`, added by `history add`."""
    proc = history("add", *map(str, run_dirs), "--history", str(path))
    assert proc.returncode == 0, proc.stderr
    return path


def cached_history(cache: Path, runs: int, cpu_model: str = "AMD EPYC") -> Path:
    """A cache directory whose store holds `runs` same-code runs of commit aaa, one a minute."""
    dirs = [write_run(cache.parent / f"cached-{cpu_model[:3]}-{i}", "aaa", i, jitter=1 + 0.02 * (i % 3 - 1),
                      cpu_model=cpu_model) for i in range(runs)]
    cache.mkdir(exist_ok=True)
    store_of(cache / cicache.CACHE_FILE, dirs)
    return cache


def job_history(tmp_path: Path, plant: dict | None = None) -> Path:
    """This job's store: one run of the parent (commit aaa) and one of the commit under test (ccc), later than
    the cache's."""
    parent = write_run(tmp_path / "job-parent", "aaa", 40)
    current = write_run(tmp_path / "job-current", "ccc", 41, plant=plant)
    return store_of(tmp_path / "job.sqlite", [parent, current])


def ci_history(job: Path, gate_exit: int = 0, cache: Path | None = None):
    """`run_bench.py ci-history` for commit ccc, in this process."""
    args = ["ci-history", "--gate-exit", str(gate_exit), "--job-history", str(job), "--commit", "ccc"]
    return in_process(*args, *(["--cache", str(cache)] if cache else []))


def the_line(proc) -> str:
    """The one line on stderr that the command prints."""
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in proc.stderr
    return line


def cached_runs(cache: Path) -> list:
    return database.runs(database.open_store(cache / cicache.CACHE_FILE, create=False))


@pytest.mark.parametrize("gate_exit", [0, 1, 2])
def test_without_a_cache_the_gate_stands_alone(tmp_path, monkeypatch, gate_exit):
    monkeypatch.delenv("DLBENCH_CI_CACHE", raising=False)
    proc = ci_history(job_history(tmp_path, plant={CELLS[1]: 0.0003}), gate_exit)
    line = the_line(proc)
    assert proc.returncode == gate_exit
    assert "the history gate: NOT RUN: no CI cache (DLBENCH_CI_CACHE is not set)" in line
    assert "the A/B or baseline gate alone binds" in line and f"the job exits {gate_exit}" in line


NOT_RUN = 5  # the gate's documented code for "measured nothing" (harness.errors.EXIT_NOT_RUN, docs/ci-gate.md)


def test_a_gate_that_measured_nothing_is_named_and_the_history_decides(tmp_path, monkeypatch):
    """The gate's exit 5 (NOT RUN: a shallow clone without a comparable baseline) is named in the job's line and
    fails nothing by itself (it was 'stopped' and the job's exit 5); a binding history regression still fails."""
    monkeypatch.delenv("DLBENCH_CI_CACHE", raising=False)
    line = the_line(proc := ci_history(job_history(tmp_path), NOT_RUN))
    assert proc.returncode == 0, line
    assert "the A/B or baseline gate: NOT RUN (it measured nothing) (exit 5)" in line and "the job exits 0" in line
    cache = cached_history(tmp_path / "cache", 10)
    proc = ci_history(job_history(tmp_path / "planted", plant={CELLS[1]: 0.0003}), NOT_RUN, cache)
    assert proc.returncode == 1, the_line(proc)


def test_a_full_cache_binds_a_history_regression(tmp_path):
    """10 comparable runs: the history gate binds; a +30% loader plant in one cell fails a job whose A/B
    passed, and the failed job's runs are not added."""
    cache = cached_history(tmp_path / "cache", 10)
    proc = ci_history(job_history(tmp_path, plant={CELLS[1]: 0.0003}), 0, cache)
    line = the_line(proc)
    assert proc.returncode == 1, line
    assert "the A/B or baseline gate: passed (exit 0)" in line and "history gate against the CI cache" in line
    assert "FAILED: 1 slower" in line and "against the last 10 comparable runs" in line
    assert "both bind (10 comparable runs" in line and "the job exits 1" in line
    assert "this job's runs are not added" in line and len(cached_runs(cache)) == 10
    assert "slower" in proc.stdout  # the gate's table


def test_the_cache_judges_the_three_figures_the_other_gates_judge(tmp_path):
    """A cell whose every cost rose 30% against its references (decode and the rank slower, the loader's
    stages over decode unchanged): stages/decode passes it, decode/reference and rank/reference fail it, each
    figure judged at alpha / 3; the job fails."""
    cache = cached_history(tmp_path / "cache", 10)
    parent = write_run(tmp_path / "job-parent", "aaa", 40)
    current = write_run(tmp_path / "job-current", "ccc", 41, cpu={CELLS[1]: 1.3})
    proc = ci_history(store_of(tmp_path / "job.sqlite", [parent, current]), 0, cache)
    line = the_line(proc)
    assert proc.returncode == 1, line
    assert "0 slower, 0 faster, 3 unchanged (metric: the loader's timed stages' CPU over its decode" in line
    assert "1 slower, 0 faster, 2 unchanged (metric: the decode stage's CPU over the reference decode's" in line
    assert "1 slower, 0 faster, 2 unchanged (metric: the rank's main thread's CPU over the reference step's" in line
    assert line.count("alpha 0.0166667 over the cells") == 3


def test_a_full_cache_passes_same_code_and_keeps_its_runs(tmp_path):
    """The same code against 10 runs: passed, exit 0, and the commit's run (not the parent's) appended."""
    cache = cached_history(tmp_path / "cache", 10)
    line = the_line(proc := ci_history(job_history(tmp_path), 0, cache))
    assert proc.returncode == 0, line
    assert "passed: 0 slower" in line and "both bind" in line
    assert "1 run(s) of this commit added to the cache (now 11 runs" in line
    assert [r["commit_id"] for r in cached_runs(cache)].count("ccc") == 1


def test_the_a_b_binds_whatever_the_history_says(tmp_path):
    cache = cached_history(tmp_path / "cache", 10)
    proc = ci_history(job_history(tmp_path), 1, cache)
    assert proc.returncode == 1 and "FAILED (a regression) (exit 1)" in the_line(proc)
    assert len(cached_runs(cache)) == 10


def test_a_short_cache_reports_only(tmp_path):
    """5 comparable runs: the regression is reported, the job passes on the A/B, its runs kept."""
    cache = cached_history(tmp_path / "cache", 5)
    proc = ci_history(job_history(tmp_path, plant={CELLS[1]: 0.0003}), 0, cache)
    line = the_line(proc)
    assert proc.returncode == 0, line
    assert "FAILED: 1 slower" in line and "the history verdict is reported only (5 of the 10" in line
    assert len(cached_runs(cache)) == 6


def test_too_short_and_first_jobs_are_not_run(tmp_path):
    cache = cached_history(tmp_path / "cache", 2)
    line = the_line(proc := ci_history(job_history(tmp_path), 0, cache))
    assert proc.returncode == 0 and "NOT RUN: 2 comparable run(s) in the cache" in line and "needs 3" in line
    empty = tmp_path / "restored-nothing"
    line = the_line(proc := ci_history(job_history(tmp_path / "second"), 0, empty))
    assert proc.returncode == 0 and "NOT RUN: the cache holds no earlier run of scenario ci" in line
    assert "1 run(s) of this commit added" in line and len(cached_runs(empty)) == 1


def test_another_machines_cache_is_named_and_never_fails(tmp_path):
    cache = cached_history(tmp_path / "cache", 10, cpu_model="Intel Xeon")
    proc = ci_history(job_history(tmp_path, plant={CELLS[1]: 0.0003}), 0, cache)
    line = the_line(proc)
    assert proc.returncode == 0, line
    assert "NOT RUN: the cache's 10 run(s) of scenario ci are of another machine" in line
    assert "cpu_model Intel Xeon there, AMD EPYC here" in line and "key the cache by the runner's kind" in line


@pytest.mark.parametrize("content", [b"not a database at all" * 100, b""], ids=["garbage", "damaged-sqlite"])
def test_a_damaged_cache_file_is_one_line_and_left_alone(tmp_path, content):
    cache = tmp_path / "cache"
    cache.mkdir()
    damaged = cache / cicache.CACHE_FILE
    damaged.write_bytes(content or b"SQLite format 3\x00" + b"\xff" * 4000)
    before = damaged.read_bytes()
    proc = ci_history(job_history(tmp_path), 0, cache)
    line = the_line(proc)
    assert proc.returncode == 0, line
    assert "the history gate: NOT RUN: history store" in line and "delete it or change the cache key" in line
    assert "this job's runs are not added" in line and damaged.read_bytes() == before


def test_a_job_without_runs_of_the_commit_is_not_run(tmp_path):
    cache = cached_history(tmp_path / "cache", 10)
    line = the_line(proc := ci_history(tmp_path / "no-job.sqlite", 0, cache))
    assert proc.returncode == 0 and "NOT RUN: this job recorded no run" in line
    parent_only = store_of(tmp_path / "parent.sqlite", [write_run(tmp_path / "p", "aaa", 40)])
    line = the_line(proc := ci_history(parent_only, 0, cache))
    assert proc.returncode == 0 and "NOT RUN: this job recorded no run of commit ccc" in line


def test_a_cache_path_that_is_a_file_is_the_users_mistake(tmp_path):
    not_a_dir = tmp_path / "cache"
    not_a_dir.write_text("x")
    proc = ci_history(job_history(tmp_path), 0, not_a_dir)
    assert proc.returncode == 2
    assert the_line(proc) == (f"run_bench.py: error: DLBENCH_CI_CACHE={not_a_dir} is a file; set it to the "
                              f"directory your CI restores and saves between jobs (docs/ci-gate.md)")


def test_ci_run_ends_with_the_cached_verdict():
    """.ci/run gives ci-history the gate's exit code and exits with what ci-history says."""
    ci = (REPO / ".ci" / "run").read_text()
    gate = ci.index("bash scripts/ci_gate.sh || gate_rc=$?")
    step = ci.index('python run_bench.py ci-history --gate-exit "$gate_rc" --job-history results/ci-history.sqlite'
                    ' || job_rc=$?')
    assert gate < step and ci.rstrip().endswith('exit "$job_rc"')


def job(tmp_path: Path, data_dir: Path, name: str, runs: int, cache: Path | None) -> subprocess.CompletedProcess:
    """One CI job as .ci/run makes it, with a cheap gate: `runs` real smoke runs of one cell recorded into a
    fresh job store (DLBENCH_HISTORY, as the gate's runs are), then `run_bench.py ci-history` with the cache
    in DLBENCH_CI_CACHE (unset: None)."""
    store = tmp_path / f"{name}.sqlite"
    env = {k: v for k, v in os.environ.items() if k != "DLBENCH_CI_CACHE"}
    for _ in range(runs):
        proc = subprocess.run([sys.executable, str(REPO / "run_bench.py"), "--scenario", "smoke", "--quiet",
                               "--only", "storage=raw", "--data-dir", str(data_dir), "--out", str(tmp_path / name)],
                              cwd=REPO, capture_output=True, text=True, timeout=300,
                              env=dict(env, DLBENCH_HISTORY=str(store)))
        assert proc.returncode == 0, proc.stderr
    return subprocess.run([sys.executable, str(REPO / "run_bench.py"), "ci-history", "--gate-exit", "0",
                           "--job-history", str(store)], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env=dict(env, **({"DLBENCH_CI_CACHE": str(cache)} if cache else {})))


@pytest.mark.slow  # 4 real runs (about 20-35 s each here), processes
def test_two_jobs_in_a_row_share_the_cached_history(tmp_path, data_dir):
    """The first job (3 runs, an empty cache) adds its runs; the second (1 run, the same cache) judges its run
    against the first job's 3 and adds it too; the second job's store without the cache: NOT RUN."""
    cache = tmp_path / "ci-cache"
    first = job(tmp_path, data_dir, "job1", 3, cache)
    line = the_line(first)
    assert first.returncode == 0, first.stderr
    assert "NOT RUN: the cache holds no earlier run of scenario smoke" in line
    assert "3 run(s) of this commit added to the cache (now 3 runs" in line
    second = job(tmp_path, data_dir, "job2", 1, cache)
    line = the_line(second)
    assert second.returncode == 0, second.stderr
    assert "against the last 3 comparable runs" in line and "reported only (3 of the 10" in line
    assert "1 run(s) of this commit added to the cache (now 4 runs" in line
    judged = {r["run_dir"] for r in cached_runs(cache)[:3]}
    assert judged == {str(p.absolute()) for p in (tmp_path / "job1").iterdir()}  # the first job's runs
    alone = subprocess.run([sys.executable, str(REPO / "run_bench.py"), "ci-history", "--gate-exit", "0",
                            "--job-history", str(tmp_path / "job2.sqlite")], cwd=REPO, capture_output=True,
                           text=True, timeout=120,
                           env={k: v for k, v in os.environ.items() if k != "DLBENCH_CI_CACHE"})
    assert alone.returncode == 0 and "the history gate: NOT RUN: no CI cache" in the_line(alone)

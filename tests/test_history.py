"""The history store (harness.history.database, runrows) and `run_bench.py history` (harness.commands.history):
real run directories imported, a run that adds itself (harness.commands.history.recorded), the store's version, the
gate against the history, and bad input as one line, exit 2. The command line runs in this process (`history`);
the tests that make real runs are slow."""
from __future__ import annotations

import contextlib
import io
import json
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import REPO

from harness import cli
from harness.commands import history as history_command
from harness.config.request import BenchRequest
from harness.gates import history as history_gate
from harness.history import database, runrows
from harness.results.fileformat import VERSION_KEY, FileFormat, ResultsError

CELLS = ["storage=raw,batching=fixed", "storage=mmap,batching=fixed", "storage=hdf5,batching=fixed"]
V02 = REPO / "tests" / "fixtures" / "run-v0.2"


def write_run(path: Path, commit: str, minute: int, cpu: dict[str, float] | None = None, noise: float = 1.0,
              scenario: str = "ci", cpu_model: str = "AMD EPYC", plant: dict[str, float] | None = None,
              jitter: float = 1.0) -> Path:
    """A run directory of one repeat: each cell's loader + rank CPU per sample 1 ms x cpu[cell] x noise (the
    machine's load moves all of it), half of it the loader's, whose timed stages (100 samples) are its decode
    and its read, half each; the read x jitter (the loader's own noise), plus plant[cell] s a sample."""
    path.mkdir(parents=True)
    lines = []
    for cell in CELLS:
        c = 0.001 * (cpu or {}).get(cell, 1.0) * noise
        read = c / 4 * jitter + (plant or {}).get(cell, 0.0)
        stages = {"s": {"read": read * 100, "decode": c / 4 * 100}, "samples": 100, "batches": 10, "processes": 1}
        loader = read + c / 4
        lines.append({"cell": cell, "repeat": 0, "error": None, "params": {"storage": {}},
                      "figures": {"throughput": 1.0 / (loader + c / 2), "step_p50_ms": 16.0, "au_pct": 50.0,
                                  "throughput_ci": [0.9 / (loader + c / 2), 1.1 / (loader + c / 2)],
                                  "loader_cpu_s_per_sample": loader, "rank_cpu_s_per_sample": c / 2,
                                  # the gates' figures: the references slowed by the load (noise) as the code is
                                  "loader_vs_decode": loader / (c / 4),
                                  "decode_vs_reference": c / 4 / (2.5e-4 * noise) * jitter,
                                  "rank_vs_reference": c / 2 / (5e-4 * noise) * jitter},
                      "ranks": [{"rank": 0, "samples": 100, "stages": stages}]})
    (path / "cells.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    env = {"scenario": scenario, "comparable": {"batch_size": 16}, "cpu_model": cpu_model, "cpu_count": 2,
           "cpu_affinity": 2, "hostname": "h", "memory_gb": 25.2, "versions": {"torch": "2.13"},
           "git": {"commit": commit, "dirty": False}, "time_utc": f"2026-12-01T10:{minute:02d}:00Z"}
    (path / "env.json").write_text(json.dumps(env))
    return path


def in_process(*argv: str) -> SimpleNamespace:
    """`run_bench.py ARGV...` in this process: its exit code, stdout and stderr as a process's."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


def history(*args: str) -> SimpleNamespace:
    return in_process("history", *args)


@pytest.mark.slow  # a real run
def test_history_add_imports_real_run_directories(smoke_run, tmp_path):
    """A run this harness just wrote and one v0.2 wrote: one row per cell visit, the machine's fingerprint
    and the commit from env.json; a second add skips them; `list` names both."""
    _, run_dir, cells = smoke_run
    db_path = tmp_path / "h.sqlite"
    proc = history("add", str(run_dir), str(V02), "--history", str(db_path), "--branch", "main")
    assert proc.returncode == 0, proc.stderr
    db = database.open_store(db_path)
    runs = database.runs(db)
    assert sorted(r["scenario"] for r in runs) == ["smoke", "smoke"] and {r["branch"] for r in runs} == {"main"}
    mine = next(r for r in runs if r["run_dir"] == str(run_dir.absolute()))
    assert len(database.visits_of(db, mine["id"])) == len(cells)
    # the stage figures the history gate divides, from the real run's stage profile (harness.analysis.stages)
    assert all(v["loader_stages_cpu"] > v["decode_cpu"] > 0 for v in database.visits_of(db, mine["id"]))
    assert database.effects_of(db, mine["id"]) or mine["repeats"] == 1
    env = json.loads((run_dir / "env.json").read_text())
    assert mine["commit_id"] == env["git"]["commit"] and mine["verdict"].startswith("FASTEST")
    assert json.loads(mine["machine"])["cpu_model"] == env["cpu_model"]
    old = next(r for r in runs if r is not mine)
    assert old["commit_id"].startswith("51a6757") and len(database.visits_of(db, old["id"])) == 3
    assert {v["loader_stages_cpu"] for v in database.visits_of(db, old["id"])} == {None}  # v0.2 timed no stages
    again = history("add", str(run_dir), "--history", str(db_path))
    assert again.returncode == 0 and "already in the store" in again.stderr
    assert len(database.runs(database.open_store(db_path))) == 2
    listed = history("list", "--history", str(db_path))
    # the fixture's machine (an AMD EPYC) is this one's only where this runs on one
    assert "smoke on machine" in listed.stdout
    assert str(run_dir.absolute()) in listed.stdout and str(V02) in listed.stdout


@pytest.mark.slow  # a real run, a process
def test_a_run_adds_itself_with_dlbench_history(tmp_path, data_dir):
    """DLBENCH_HISTORY=FILE: the run's directory is in the store at its end, under the commit it recorded."""
    import os
    import subprocess
    import sys

    db_path, out = tmp_path / "h.sqlite", tmp_path / "out"
    proc = subprocess.run([sys.executable, str(REPO / "run_bench.py"), "--scenario", "smoke", "--quiet",
                           "--data-dir", str(data_dir), "--out", str(out), "--only", "storage=raw"],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, DLBENCH_HISTORY=str(db_path)))
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = list(out.iterdir())
    (run,) = database.runs(database.open_store(db_path))
    assert run["run_dir"] == str(run_dir.absolute()) and f"history: {db_path}" in proc.stderr
    assert run["commit_id"] == json.loads((run_dir / "env.json").read_text())["git"]["commit"]


def test_a_store_of_a_newer_version_stops_a_run_before_it_measures(tmp_path):
    db_path, out = tmp_path / "new.sqlite", tmp_path / "out"
    db = database.open_store(db_path)
    with db:
        db.execute("UPDATE meta SET value = '99' WHERE key = ?", (VERSION_KEY,))
    proc = in_process("--scenario", "smoke", "--quiet", "--out", str(out), "--history", str(db_path))
    assert proc.returncode == 2 and not out.exists()
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"run_bench.py: error: history store {db_path}: history store version 99; this harness "
                           f"reads up to {database.STORE_VERSION}")
    assert "Traceback" not in proc.stderr


def test_an_old_store_is_upgraded_on_open_and_others_are_refused(tmp_path):
    """A version-1 store (no stage columns) with a run in it opened by this harness (version 3): the steps add
    the columns, null for the old run, and a new run fills them; a version-4 format made here (one more step)
    takes it on; this harness then refuses the newer store; a file that is not SQLite, or not a history store,
    is one line."""
    db_path = tmp_path / "h.sqlite"
    run, visits, effects = runrows.rows_of(write_run(tmp_path / "r", "aaa", 1))
    v1 = database.open_store(db_path, FileFormat("history store", 1, {1: "first"}))
    v1_visit = [c for c in database.VISIT_COLUMNS if c not in database.OPTIONAL_VISIT_COLUMNS]
    marks = ", ".join("?" * (len(v1_visit) + 1))
    with v1:
        run_id = v1.execute(f"INSERT INTO runs ({', '.join(database.RUN_COLUMNS)}) VALUES "
                            f"({', '.join('?' * len(database.RUN_COLUMNS))})",
                            [run[c] for c in database.RUN_COLUMNS]).lastrowid
        v1.executemany(f"INSERT INTO visits (run_id, {', '.join(v1_visit)}) VALUES ({marks})",
                       [[run_id, *[v[c] for c in v1_visit]] for v in visits])
    v1.close()
    db = database.open_store(db_path)
    version = db.execute("SELECT value FROM meta WHERE key = ?", (VERSION_KEY,)).fetchone()[0]
    assert version == str(database.STORE_VERSION)
    assert {tuple(r) for r in db.execute("SELECT commit_id, loader_stages_cpu, decode_cpu, loader_vs_decode FROM runs "
                                         "JOIN visits ON runs.id = visits.run_id")} == {("aaa", None, None, None)}
    later = write_run(tmp_path / "r2", "bbb", 2)
    database.insert_run(db, *runrows.rows_of(later))
    new_visits = database.visits_of(db, database.runs(db)[-1]["id"])
    assert {round(r["loader_stages_cpu"], 9) for r in new_visits} == {0.0005}
    assert all(r["loader_vs_decode"] is not None for r in new_visits)  # the cell's own figure, stored
    db.close()

    def add_note(db: sqlite3.Connection) -> sqlite3.Connection:
        db.execute("ALTER TABLE runs ADD COLUMN note TEXT NOT NULL DEFAULT ''")
        return db

    newer = FileFormat("history store", 4, {**database.STORE_HISTORY, 4: "runs.note"},
                       {**database.STORE.upgrades, 3: add_note})
    db = database.open_store(db_path, newer)
    assert db.execute("SELECT value FROM meta WHERE key = ?", (VERSION_KEY,)).fetchone()[0] == "4"
    assert [tuple(r) for r in db.execute("SELECT note, commit_id FROM runs")] == [("", "aaa"), ("", "bbb")]
    with pytest.raises(ResultsError, match="history store version 4; this harness reads up to 3"):
        database.open_store(db_path)
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a database at all, just text\n" * 100)
    with pytest.raises(ResultsError, match="cannot be read as SQLite"):
        database.open_store(junk)
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE t (x)")
    with pytest.raises(ResultsError, match="not a dlbench history store"):
        database.open_store(other)


def test_bad_input_is_one_line_exit_2_and_good_runs_are_still_added(tmp_path):
    db_path = tmp_path / "h.sqlite"
    good = write_run(tmp_path / "good", "aaa", 1)
    (tmp_path / "notrun").mkdir()
    proc = history("add", str(tmp_path / "missing"), str(tmp_path / "notrun"), str(good), "--history", str(db_path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("run_bench.py: error:")]
    assert errors == [f"run_bench.py: error: {tmp_path / 'missing'} does not exist; pass a run directory "
                      f"(results/<time>-<scenario>)",
                      f"run_bench.py: error: {tmp_path / 'notrun'} is not a run directory (it lacks env.json and "
                      f"cells.jsonl); pass a directory a run wrote (results/<time>-<scenario>)"]
    assert len(database.runs(database.open_store(db_path))) == 1  # the good one
    for args, says in [(["compare", "aaa"], "history compare takes COMMIT_A COMMIT_B, got 1 (aaa)"),
                       (["show", "storage=nosuch"], "history show storage=nosuch: no cell or axis of that name"),
                       (["gate", str(good), "--last", "0"], "--last 0 must be a positive number of runs"),
                       (["gate", str(good), "--figure", "au"],
                        "the gate compares stages/decode, decode/reference, rank/reference, stages, cpu, "
                        "throughput; pass one"),
                       (["list", "--history", str(tmp_path / "none.sqlite")], "does not exist; add runs to it")]:
        proc = history(*args, *(["--history", str(db_path)] if "--history" not in args else []))
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and says in proc.stderr, proc.stderr


def history_of(tmp_path: Path, runs: int, cpu: dict | None = None) -> Path:
    """A store of `runs` same-code runs of commit aaa (noise +-4%, the loader's own +-4%), one a minute."""
    db_path = tmp_path / "h.sqlite"
    paths = [write_run(tmp_path / f"r{i}", "aaa", i, cpu, 1 + 0.02 * ((i * 3) % 5 - 2),
                       jitter=1 + 0.02 * ((i * 2) % 5 - 2)) for i in range(runs)]
    assert history("add", *map(str, paths), "--history", str(db_path)).returncode == 0
    return db_path


def test_the_history_gate_fails_a_planted_rise_and_passes_the_same_code(tmp_path):
    db_path = history_of(tmp_path, 10)
    same = write_run(tmp_path / "same", "bbb", 30, noise=1.01)
    proc = history("gate", str(same), "--history", str(db_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "history gate: 0 slower, 0 faster, 3 unchanged" in proc.stdout and "last 10 comparable runs" in proc.stdout
    # 0.15 ms a sample more in the mmap cell's read: its stages over its decode 2 -> 2.6
    slow = write_run(tmp_path / "slow", "ccc", 31, plant={CELLS[1]: 0.00015})
    proc = history("gate", str(slow), "--history", str(db_path))
    assert proc.returncode == 1 and "1 slower" in proc.stdout and "FAILED" in proc.stdout
    row = next(line for line in proc.stdout.splitlines() if line.startswith(CELLS[1]))
    assert row.endswith("slower") and "x1.300" in row, row  # against the geometric mean of the 10 runs
    loaded = write_run(tmp_path / "loaded", "ccc", 31, noise=1.4)  # the load of its minutes: x1.4 on every cost
    assert history("gate", str(loaded), "--history", str(db_path)).returncode == 0
    assert history("gate", str(loaded), "--history", str(db_path), "--figure", "cpu").returncode == 1
    fewer = write_run(tmp_path / "fewer", "ddd", 32, plant={CELLS[1]: 0.00015})
    proc = history("gate", str(fewer), "--history", str(db_path), "--last", "2")
    assert proc.returncode == 0 and "NOT RUN: 2 comparable run(s)" in proc.stdout


def test_the_gate_compares_only_the_same_machine_and_earlier_runs(tmp_path):
    db_path = history_of(tmp_path, 5)
    xeon = write_run(tmp_path / "xeon", "bbb", 30, {CELLS[1]: 1.5}, cpu_model="Intel Xeon")
    run, visits, _ = runrows.rows_of(xeon)
    db = database.open_store(db_path)
    assert history_gate.comparable_runs(db, run, 10) == []  # another machine has no history here
    early = write_run(tmp_path / "early", "bbb", 2)
    run, visits, _ = runrows.rows_of(early)
    assert [r["time_utc"][-6:-4] for r in history_gate.comparable_runs(db, run, 10)] == ["00", "01"]


def test_a_directory_of_run_directories_adds_each_of_them(tmp_path):
    """`history add results`: the run directories inside, what is not one (results/baselines) left alone."""
    for i in range(3):
        write_run(tmp_path / "results" / f"r{i}", f"c{i}", i)
    (tmp_path / "results" / "baselines").mkdir()
    db_path = tmp_path / "h.sqlite"
    proc = history("add", str(tmp_path / "results"), "--history", str(db_path))
    assert proc.returncode == 0, proc.stderr
    assert [r["commit_id"] for r in database.runs(database.open_store(db_path))] == ["c0", "c1", "c2"]


def made_run(out: Path, argv: tuple[str, ...], name: str = "r", code: int = 0):
    """A stand-in for the bench: writes one run directory under OUT whose env.json records ARGV; exit CODE."""
    def run() -> int:
        path = write_run(out / name, "aaa", 1)
        env = json.loads((path / "env.json").read_text())
        (path / "env.json").write_text(json.dumps({**env, "argv": list(argv)}))
        return code
    return run


def test_a_run_is_recorded_after_it_ran_and_only_its_own_directory(tmp_path, capsys):
    """harness.commands.history.recorded, what the bench's end-to-end test above runs through a real run."""
    db_path, out, argv = tmp_path / "h.sqlite", tmp_path / "out", ("--scenario", "ci")
    request = BenchRequest(scenario="ci", argv=argv, order_seed=1, out=out)
    assert history_command.recorded(db_path, request, made_run(out, argv)) == 0
    (run,) = database.runs(database.open_store(db_path))
    assert run["run_dir"] == str((out / "r").absolute()) and f"history: {db_path}" in capsys.readouterr().err
    neighbour = made_run(out, ("--scenario", "other"), "n", code=1)  # another run's directory, same --out
    assert history_command.recorded(db_path, request, neighbour) == 1
    assert len(database.runs(database.open_store(db_path))) == 1
    for i, quiet in enumerate((BenchRequest(scenario="ci", argv=argv, order_seed=1, out=out, dry_run=True),
                               request)):
        store = tmp_path / "none.sqlite" if quiet.dry_run else None  # --dry-run, or no store: the run alone
        assert history_command.recorded(store, quiet, made_run(out, argv, f"d{i}")) == 0
        assert not (tmp_path / "none.sqlite").exists()
    assert len(database.runs(database.open_store(db_path))) == 1


def test_a_run_that_cannot_be_added_is_exit_2_and_its_directory_stays(tmp_path, capsys):
    out, argv = tmp_path / "out", ("--scenario", "ci")
    request = BenchRequest(scenario="ci", argv=argv, order_seed=1, out=out)

    def broken() -> int:
        made_run(out, argv)()
        (out / "r" / "cells.jsonl").write_text("[1, 2]\n")  # not a cell line: runrows refuses it
        return 0

    assert history_command.recorded(tmp_path / "h.sqlite", request, broken) == 2
    assert "run_bench.py: error:" in capsys.readouterr().err and (out / "r").is_dir()
    assert history_command.recorded(tmp_path / "h.sqlite", request, lambda: 1) == 1  # no directory: the run's code

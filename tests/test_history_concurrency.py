"""Concurrent writers of one history store (harness.history.database), in real processes: creating one new store
at once (1 of 8 tries failed with UNIQUE constraint failed: meta.key), adding the same runs at once (4 of 8 failed
with UNIQUE ... runs.run_key, and the loser stopped), and a store another process holds locked ("internal error:
database is locked")."""
from __future__ import annotations

import json
import multiprocessing as mp
import sqlite3

import pytest

from harness.history import database
from harness.results.fileformat import ResultsError

pytestmark = pytest.mark.slow  # writers in processes of their own

RUN = {"run_dir": "/runs/x", "commit_id": "c" * 40, "dirty": 0, "branch": "main", "time_utc": "2026-12-01T00:00:00Z",
       "scenario": "ci", "settings_hash": "s", "settings": "{}", "machine_fp": "m1", "repeats": 1, "verdict": "",
       "gate": "", "machine": json.dumps({"cpu_model": "x", "cpu_count": 2})}
VISIT = {"cell": "storage=raw", "repeat": 0, "error": None, "throughput": 100.0, "throughput_low": 95.0,
         "throughput_high": 105.0, "au_pct": 40.0, "loader_cpu": 0.001, "rank_cpu": 0.001, "cpu_per_sample": 0.002,
         "step_p50_ms": 10.0, "disturbed": 0}


def _writer(path: str, start, keys: list[str], out) -> None:
    start.wait()
    try:
        db = database.open_store(path)
        added = [database.insert_run(db, {**RUN, "run_key": k}, [VISIT], []) is not None for k in keys]
        out.put(("ok", sum(added)))
    except Exception as err:  # noqa: BLE001 - the test reports what a writer raised
        out.put(("error", f"{type(err).__name__}: {err}"))


def _together(path, keys_per_writer) -> list:
    ctx = mp.get_context("fork")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(str(path), start, keys, out)) for keys in keys_per_writer]
    for p in procs:
        p.start()
    start.set()
    got = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    return got


def test_writers_creating_one_new_store_at_once_all_succeed(tmp_path):
    for attempt in range(4):
        path = tmp_path / f"h{attempt}.sqlite"
        got = _together(path, [[f"k{i}"] for i in range(6)])
        assert [g[0] for g in got] == ["ok"] * 6, got
        db = database.open_store(path)
        assert db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()[0] == str(database.STORE_VERSION)
        assert len(database.runs(db)) == 6


def test_writers_adding_the_same_runs_at_once_add_each_once_and_all_finish(tmp_path):
    path = tmp_path / "h.sqlite"
    database.open_store(path).close()
    keys = [f"k{i}" for i in range(20)]
    got = _together(path, [keys] * 4)
    assert [g[0] for g in got] == ["ok"] * 4, got
    assert sum(n for _, n in got) == 20  # every run added by exactly one writer, nobody stopped
    assert len(database.runs(database.open_store(path))) == 20


def test_a_store_locked_by_another_process_waits_then_says_so(tmp_path, monkeypatch):
    path = tmp_path / "h.sqlite"
    database.open_store(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    monkeypatch.setattr(database, "LOCK_WAIT_S", 0.5)
    try:
        with pytest.raises(ResultsError, match=r"h\.sqlite is locked by another process \(waited 0\.5 s\)"):
            database.open_store(path)
    finally:
        holder.execute("ROLLBACK")
    database.open_store(path).close()  # free again


def test_a_foreign_layout_or_a_damaged_page_is_the_stores_own_line(tmp_path):
    """Not a test of processes: kept beside the other store-safety tests."""
    foreign = tmp_path / "foreign.sqlite"
    db = sqlite3.connect(foreign)
    db.executescript("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT); INSERT INTO meta VALUES ('schema', "
                     f"'{database.STORE_VERSION}'); CREATE TABLE runs (id INTEGER PRIMARY KEY, name TEXT);")
    db.close()
    with pytest.raises(ResultsError, match=r"foreign\.sqlite has a table runs without the columns run_key"):
        database.open_store(foreign)
    damaged = tmp_path / "damaged.sqlite"
    database.open_store(damaged).close()
    data = bytearray(damaged.read_bytes())
    data[4096: 4096 + 512] = b"\xff" * 512  # the header and cells of a table's page overwritten
    damaged.write_bytes(bytes(data))
    with pytest.raises(ResultsError, match=r"damaged\.sqlite (is damaged|cannot be read as SQLite)"):
        database.open_store(damaged)

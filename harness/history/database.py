"""The history store: one SQLite file (the standard library's sqlite3), one row per run, per cell
visit and per effect, versioned like every file the harness writes (harness.results.fileformat's
conventions).

Tables (version 3; version 1 lacked the visits' two stage figures, version 2 their three gate
figures):

    meta(key, value)      "schema" -> the store's version (VERSION_KEY; none: version 1)
    runs                  one row per run: run_key (unique: a run added twice is skipped), run_dir,
                          commit_id, dirty, branch, time_utc, scenario, settings_hash and settings
                          (env.json's `comparable`, what a baseline must share), machine_fp and
                          machine (the machine the baseline gate checks,
                          harness.history.runrows.fingerprint), repeats, verdict (the report's
                          verdict lines), gate (comparison.md's summary line, when the run was
                          gated)
    visits                one row per cell visit: run_id, cell, repeat, error, throughput and its
                          interval (throughput_low/high), au_pct, loader_cpu and rank_cpu
                          (s/sample), cpu_per_sample (their sum), step_p50_ms, disturbed (outside
                          load above the threshold), other_cpu_pct (the outside load itself); from
                          version 2 loader_stages_cpu (the loader's timed stages, CPU s/sample:
                          harness.analysis.stages) and decode_cpu (its decode stage alone); from
                          version 3 loader_vs_decode, decode_vs_reference, rank_vs_reference (the
                          cell's figures, harness.results.metrics.against_reference)
    effects               one row per effect of effects.jsonl: run_id, figure, axis, level,
                          reference, kind, ratio, low, high, n

Opening (`open_store`): a missing file is created as version 1 (TABLES) and taken through the same
steps as an old store, so a new store and an upgraded one are one schema; an older version is
upgraded in place by the format's chain of steps (STORE.upgrades[v]: a connection at version v to
one at v + 1, in one transaction); a newer version, a version that is no number, or a file that is
not a SQLite database is a ResultsError (one line naming the file and the remedy).
"""
from __future__ import annotations

import sqlite3
from pathlib import Path

from harness.results.fileformat import VERSION_KEY, FileFormat, ResultsError

STORE_VERSION = 3
STORE_HISTORY = {
    1: "the first history store: runs (commit, branch, time, scenario, settings hash, machine fingerprint, verdict, "
       "gate), visits (one per cell visit: throughput and interval, AU, loader and rank CPU per sample), effects",
    2: "visits.loader_stages_cpu and visits.decode_cpu (the loader's timed stages and its decode stage, CPU s per "
       "sample: what the history gate's `stages` figure is made of) and visits.other_cpu_pct (the outside load); "
       "null in the rows of a version-1 store",
    3: "visits.loader_vs_decode, visits.decode_vs_reference and visits.rank_vs_reference (the gates' three "
       "figures as the cell's figures hold them, harness.results.metrics.against_reference: what the history "
       "gate judges since issue 40, as the A/B and baseline gates do); null in the rows of an older store",
}


def _stage_columns(db: sqlite3.Connection) -> sqlite3.Connection:
    """Version 1 -> 2: the visits' stage figures and outside load, null for the runs already in the
    store."""
    for column in ("loader_stages_cpu", "decode_cpu", "other_cpu_pct"):
        db.execute(f"ALTER TABLE visits ADD COLUMN {column} REAL")
    return db


def _figure_columns(db: sqlite3.Connection) -> sqlite3.Connection:
    """Version 2 -> 3: the visits' three gate figures, null for the runs already in the store."""
    for column in FIGURE_COLUMNS:
        db.execute(f"ALTER TABLE visits ADD COLUMN {column} REAL")
    return db


FIGURE_COLUMNS = ("loader_vs_decode", "decode_vs_reference", "rank_vs_reference")
LOCK_WAIT_S = 30.0  # how long a writer waits for another's lock before it says so
STORE = FileFormat("history store", STORE_VERSION, STORE_HISTORY, {1: _stage_columns, 2: _figure_columns})
REMEDY = "pass another --history file, or move this one aside and add the run directories again (history add)"

TABLES = """  -- version 1; open_store takes a new store through the upgrade steps from here
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY, run_key TEXT NOT NULL UNIQUE, run_dir TEXT NOT NULL, commit_id TEXT NOT NULL,
    dirty INTEGER NOT NULL, branch TEXT NOT NULL, time_utc TEXT NOT NULL, scenario TEXT NOT NULL,
    settings_hash TEXT NOT NULL, settings TEXT NOT NULL, machine_fp TEXT NOT NULL, machine TEXT NOT NULL,
    repeats INTEGER NOT NULL, verdict TEXT NOT NULL, gate TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS runs_by_scenario ON runs (scenario, machine_fp, settings_hash, time_utc);
CREATE TABLE IF NOT EXISTS visits (
    run_id INTEGER NOT NULL REFERENCES runs(id), cell TEXT NOT NULL, repeat INTEGER NOT NULL, error TEXT,
    throughput REAL, throughput_low REAL, throughput_high REAL, au_pct REAL, loader_cpu REAL, rank_cpu REAL,
    cpu_per_sample REAL, step_p50_ms REAL, disturbed INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS visits_by_run ON visits (run_id, cell);
CREATE TABLE IF NOT EXISTS effects (
    run_id INTEGER NOT NULL REFERENCES runs(id), figure TEXT NOT NULL, axis TEXT NOT NULL, level TEXT NOT NULL,
    reference TEXT NOT NULL, kind TEXT NOT NULL, ratio REAL, low REAL, high REAL, n INTEGER);
"""
RUN_COLUMNS = ("run_key", "run_dir", "commit_id", "dirty", "branch", "time_utc", "scenario", "settings_hash",
               "settings", "machine_fp", "machine", "repeats", "verdict", "gate")
VISIT_COLUMNS = ("cell", "repeat", "error", "throughput", "throughput_low", "throughput_high", "au_pct",
                 "loader_cpu", "rank_cpu", "cpu_per_sample", "step_p50_ms", "disturbed", "loader_stages_cpu",
                 "decode_cpu", "other_cpu_pct", *FIGURE_COLUMNS)
# null where a visit lacks them
OPTIONAL_VISIT_COLUMNS = ("loader_stages_cpu", "decode_cpu", "other_cpu_pct", *FIGURE_COLUMNS)
EFFECT_COLUMNS = ("figure", "axis", "level", "reference", "kind", "ratio", "low", "high", "n")


def _version(db: sqlite3.Connection, where: str) -> int | None:
    """The store's version (None: an empty file, nothing in it yet)."""
    names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not names:
        return None
    if "meta" not in names:
        raise ResultsError(f"{where} is a SQLite database but not a dlbench history store (no meta table); {REMEDY}")
    row = db.execute("SELECT value FROM meta WHERE key = ?", (VERSION_KEY,)).fetchone()
    found = row[0] if row is not None else None
    obj = {} if found is None else {VERSION_KEY: int(found) if str(found).isdigit() else found}
    return STORE.version_of(obj, where)


def open_store(path: str | Path, fmt: FileFormat = STORE, create: bool = True) -> sqlite3.Connection:
    """The store at `path`, at `fmt`'s version: created when missing (with `create`), an older one
    upgraded in place. A ResultsError (one line) for a newer store, a damaged file or a path that
    cannot be opened."""
    path = Path(path)
    if path.is_dir():
        raise ResultsError(f"history store {path} is a directory; pass a file path (e.g. {path / 'history.sqlite'})")
    if not path.exists() and not create:
        raise ResultsError(f"history store {path} does not exist; add runs to it first "
                           f"(run_bench.py history add RUN_DIR... --history {path})")
    try:
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, timeout=LOCK_WAIT_S, isolation_level=None)  # transactions begun below
        _settle_version(db, fmt, f"history store {path}")
        _check_layout(db, f"history store {path}")
    except sqlite3.OperationalError as err:
        raise _locked_or_damaged(path, err) from None
    except sqlite3.DatabaseError as err:
        raise ResultsError(f"history store {path} cannot be read as SQLite ({err}); {REMEDY}") from None
    except OSError as err:
        raise ResultsError(f"history store {path} cannot be opened ({err.strerror or err}); pass a writable "
                           f"path") from None
    db.isolation_level = ""  # from here the module's default: `with db:` is one transaction
    db.row_factory = sqlite3.Row
    return db


def _settle_version(db: sqlite3.Connection, fmt: FileFormat, where: str) -> None:
    """Create or upgrade the store under a write lock taken before its version is read, so that two
    processes opening one new (or old) store at once create (or upgrade) it once."""
    db.execute("BEGIN IMMEDIATE")
    try:
        found = _version(db, where)
        if found is None:  # version 1's tables, then the steps every older store takes
            sql = "\n".join(line for line in TABLES.splitlines() if not line.lstrip().startswith("--"))
            for statement in filter(str.strip, sql.split(";")):  # one by one: executescript would commit
                db.execute(statement)
            db.execute("INSERT INTO meta VALUES (?, ?)", (VERSION_KEY, "1"))
            found = 1
        if found < fmt.version:
            fmt.upgrade(db, found)  # each step a connection at version v to one at v + 1
            db.execute("UPDATE meta SET value = ? WHERE key = ?", (str(fmt.version), VERSION_KEY))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _check_layout(db: sqlite3.Connection, where: str) -> None:
    """The store's pages read back (quick_check) and its tables hold the columns this harness
    writes: a damaged file or another program's tables under the same names is one line, not an
    error at the first query."""
    if db.execute("PRAGMA quick_check(1)").fetchone()[0] != "ok":
        raise ResultsError(f"{where} is damaged (SQLite's quick_check fails); {REMEDY}")
    first = tuple(c for c in VISIT_COLUMNS if c not in OPTIONAL_VISIT_COLUMNS)  # what every version's visits hold
    for table, columns in (("runs", RUN_COLUMNS), ("visits", first), ("effects", EFFECT_COLUMNS)):
        have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        lacking = [c for c in columns if c not in have]
        if lacking:
            raise ResultsError(f"{where} has a table {table} without the columns {', '.join(lacking)}: not a "
                               f"dlbench history store's layout; {REMEDY}")


def _locked_or_damaged(path: Path, err: sqlite3.OperationalError) -> ResultsError:
    if "locked" in str(err) or "busy" in str(err):
        return ResultsError(f"history store {path} is locked by another process (waited {LOCK_WAIT_S:g} s); "
                            f"run again when that process has finished")
    return ResultsError(f"history store {path} cannot be read as SQLite ({err}); {REMEDY}")


def has_run(db: sqlite3.Connection, run_key: str) -> bool:
    return db.execute("SELECT 1 FROM runs WHERE run_key = ?", (run_key,)).fetchone() is not None


def insert_run(db: sqlite3.Connection, run: dict, visits: list[dict], effects: list[dict]) -> int | None:
    """One run with its visits and effects, in one transaction; None when the run is in the store
    already (also when another process added it a moment ago). A store locked longer than
    LOCK_WAIT_S is a ResultsError."""
    if has_run(db, run["run_key"]):
        return None
    try:
        return _insert(db, run, visits, effects)
    except sqlite3.IntegrityError:
        if has_run(db, run["run_key"]):  # another writer added the same run first
            return None
        raise
    except sqlite3.OperationalError as err:
        path = db.execute("PRAGMA database_list").fetchone()[2]
        raise _locked_or_damaged(Path(path), err) from None


def _insert(db: sqlite3.Connection, run: dict, visits: list[dict], effects: list[dict]) -> int:
    with db:
        cur = db.execute(f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}) VALUES ({', '.join('?' * len(RUN_COLUMNS))})",
                         [run[c] for c in RUN_COLUMNS])
        run_id = cur.lastrowid
        db.executemany(f"INSERT INTO visits (run_id, {', '.join(VISIT_COLUMNS)}) VALUES "
                       f"({', '.join('?' * (len(VISIT_COLUMNS) + 1))})",
                       [[run_id, *[v.get(c) if c in OPTIONAL_VISIT_COLUMNS else v[c] for c in VISIT_COLUMNS]]
                        for v in visits])
        db.executemany(f"INSERT INTO effects (run_id, {', '.join(EFFECT_COLUMNS)}) VALUES "
                       f"({', '.join('?' * (len(EFFECT_COLUMNS) + 1))})",
                       [[run_id, *[e[c] for c in EFFECT_COLUMNS]] for e in effects])
    return run_id


def runs(db: sqlite3.Connection, scenario: str | None = None, machine_fp: str | None = None) -> list[sqlite3.Row]:
    """The runs, oldest first, of one scenario and machine where given."""
    where, args = [], []
    for column, value in (("scenario", scenario), ("machine_fp", machine_fp)):
        if value is not None:
            where.append(f"{column} = ?")
            args.append(value)
    sql = "SELECT * FROM runs" + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY time_utc, id"
    return db.execute(sql, args).fetchall()


def visits_of(db: sqlite3.Connection, run_id: int) -> list[sqlite3.Row]:
    return db.execute("SELECT * FROM visits WHERE run_id = ? ORDER BY cell, repeat", (run_id,)).fetchall()


def effects_of(db: sqlite3.Connection, run_id: int) -> list[sqlite3.Row]:
    return db.execute("SELECT * FROM effects WHERE run_id = ?", (run_id,)).fetchall()

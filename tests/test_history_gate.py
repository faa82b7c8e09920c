"""The history gate (harness.gates.history) on seeded synthetic histories shaped like the loaded 2-core
machine's (docs/history.md): the load of a run's minutes multiplies every CPU cost of the run by one factor
(sd 0.25 on the log: -40% .. +40%), and each stage has its own small noise. A loader slowdown planted in one
cell's read stage is caught by the default figure (stages over decode), a same-code run of the same spread is
not flagged, and the loader + rank CPU figure, which the load moves, misses the plant. No wall clock."""
from __future__ import annotations

import math
import random

from harness.gates import history as history_gate
from harness.history import database

CELLS = ["storage=raw,batching=fixed", "storage=mmap,batching=fixed", "storage=mmap,batching=dynamic",
         "storage=hdf5,batching=fixed", "storage=raw,batching=dynamic", "storage=hdf5,batching=dynamic"]
PLANTED = CELLS[1]
LOAD_SD, STAGE_SD = 0.25, 0.04  # log sd: the run's load (all costs alike); each stage's own
DECODE, OTHER, RANK = 0.17e-3, 0.16e-3, 0.38e-3  # s a sample: the ci scenario's decode, other stages, rank


def run_rows(rnd: random.Random, minute: int, plant_s: float = 0.0) -> tuple[dict, list[dict]]:
    """One single-repeat run of the six cells: its runs row and its visits (harness.history.database's columns)."""
    load = math.exp(rnd.gauss(0, LOAD_SD))
    visits = []
    for cell in CELLS:
        decode = DECODE * load * math.exp(rnd.gauss(0, STAGE_SD))
        other = OTHER * load * math.exp(rnd.gauss(0, STAGE_SD)) + (plant_s * load if cell == PLANTED else 0.0)
        rank = RANK * load * math.exp(rnd.gauss(0, STAGE_SD))
        loader = (decode + other) * math.exp(rnd.gauss(0, 0.1))  # /proc's clock tick on a short window
        visits.append({"cell": cell, "repeat": 0, "error": None, "throughput": 1 / (loader + rank),
                       "throughput_low": None, "throughput_high": None, "au_pct": 50.0, "loader_cpu": loader,
                       "rank_cpu": rank, "cpu_per_sample": loader + rank, "step_p50_ms": 10.0, "disturbed": 1,
                       "loader_stages_cpu": decode + other, "decode_cpu": decode, "other_cpu_pct": 60.0})
    run = {"run_key": f"k{minute}-{rnd.random()}", "run_dir": f"/r{minute}", "commit_id": "c", "dirty": 0,
           "branch": "", "time_utc": f"2026-12-01T{minute // 60:02d}:{minute % 60:02d}:00Z", "scenario": "ci",
           "settings_hash": "s", "settings": "{}", "machine_fp": "m", "machine": "{}", "repeats": 1,
           "verdict": "", "gate": ""}
    return run, visits


def trial(tmp_path, seed: int, plant_s: float, figure: str) -> int:
    """The gate's exit code for one new run after a history of 10 same-code runs."""
    rnd = random.Random(seed)
    db = database.open_store(tmp_path / f"h{seed}-{figure.replace('/', '_')}-{plant_s}.sqlite")
    for minute in range(10):
        database.insert_run(db, *run_rows(rnd, minute), [])
    run, visits = run_rows(rnd, 30, plant_s)
    result = history_gate.gate(db, run, visits, figure)
    assert result.ran and len(result.history) == 10
    return result.exit_code


def test_the_default_figure_catches_a_loader_slowdown_under_load_and_passes_same_code(tmp_path):
    """A plant of 0.1 ms a sample (30% of the loader's stages, 14% of the cell's loader + rank CPU) in 20
    seeded histories: caught by stages/decode in all 20; 20 same-code runs drawn the same way: none flagged.
    The cpu figure, moved by the load, catches the plant in at most 2 of the 20."""
    assert history_gate.DEFAULT == "stages/decode"
    seeds = range(20)
    caught = sum(trial(tmp_path, s, 0.1e-3, "stages/decode") for s in seeds)
    alarms = sum(trial(tmp_path, s, 0.0, "stages/decode") for s in seeds)
    cpu_caught = sum(trial(tmp_path, s, 0.1e-3, "cpu") for s in seeds)
    assert (caught, alarms) == (20, 0)
    assert cpu_caught <= 2


def test_a_figure_the_history_lacks_is_no_verdict(tmp_path):
    """A history of version-1 rows (no stage figures) or a run without a decode stage (features): the gate
    gives no verdict and says why, exit 0."""
    rnd = random.Random(0)
    db = database.open_store(tmp_path / "h.sqlite")
    for minute in range(10):
        database.insert_run(db, *run_rows(rnd, minute), [])
    run, visits = run_rows(rnd, 30, 1e-3)
    for v in visits:
        v["decode_cpu"] = 0.0
    result = history_gate.gate(db, run, visits)
    assert result.exit_code == 0 and not result.ran
    assert "NOT RUN: no cell of this run has the figure stages/decode" in history_gate.render(result)

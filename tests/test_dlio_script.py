"""scripts/dlio_side_by_side.py: DLIO's workload follows the loop-cost scenario, DLIO's own summary.json is
read, dlbench's cells.jsonl is read, bad arguments are one line and exit 2. DLIO itself is not run here (it
lives in its own venv with Open MPI; docs/dlio.md)."""
from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.config import scenario as scenario_mod
from harness.results.fileformat import ResultsError

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "dlio_side_by_side.py"
FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def sbs():
    spec = importlib.util.spec_from_file_location("dlio_side_by_side", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dlios_workload_follows_the_scenario(sbs, tmp_path):
    """Batch, readers, steps and computation_time come from the scenario (here overridden, so a constant
    that happened to equal the file's would fail), and the YAML carries them where DLIO reads them."""
    sc = scenario_mod.load(sbs.SCENARIO, {"batch_size": 64, "steps": 20, "workers": 2})
    settings = sbs.dlio_settings(sc, max_ranks=4)
    step_s = sc.accelerator.step_seconds("features", 64, 0)
    assert step_s != pytest.approx(0.015, rel=0.05)  # a batch of 64 is not the file's 15 ms step
    workload = yaml.safe_load(sbs.workload_yaml(tmp_path / "data", settings))
    assert workload["framework"] == "pytorch" and workload["dataset"]["format"] == "synthetic"
    assert workload["reader"] == {"data_loader": "pytorch", "batch_size": 64, "read_threads": 2}
    assert workload["train"]["computation_time"] == pytest.approx(step_s, rel=1e-4)
    assert workload["train"]["total_training_steps"] == sc.training.warmup_steps + 20
    files, per_file = workload["dataset"]["num_files_train"], workload["dataset"]["num_samples_per_file"]
    assert files * per_file >= 4 * 64 * (sc.training.warmup_steps + 20)  # DLIO refuses fewer samples
    assert workload["dataset"]["record_length"] == (2048 + 768) * 4


def test_dlios_au_is_read_from_its_own_summary(sbs):
    """summary.json as DLIO 2.0.0 wrote it (4 ranks, this workload, on the 2-core machine)."""
    assert sbs.dlio_au(FIXTURES / "dlio" / "summary.json") == pytest.approx(76.35995, abs=1e-4)


def test_dlbench_figures_are_read_from_cells_jsonl(sbs, tmp_path):
    """Through the versioned reader (harness.results.rundir): the first cell's figures as written, and a
    line of a newer version is refused in one line rather than read as if it were this one's."""
    shutil.copy(FIXTURES / "cells_1xV100.jsonl", tmp_path / "cells.jsonl")
    figures = sbs.ours_figures(tmp_path)
    first = json.loads((FIXTURES / "cells_1xV100.jsonl").read_text().splitlines()[0])["figures"]
    assert figures == {k: first.get(k) for k in sbs.OUR_FIGURES} and figures["au_pct"] is not None
    newer = tmp_path / "newer"
    newer.mkdir()
    (newer / "cells.jsonl").write_text(json.dumps({**json.loads((tmp_path / "cells.jsonl").read_text().splitlines()[0]),
                                                   "schema": 999}) + "\n")
    with pytest.raises(ResultsError):
        sbs.ours_figures(newer)


def test_the_table_gives_every_tool_at_every_rank_count(sbs):
    """Medians and spread per tool; the ratio to DLIO pairs runs of the same round (here 60/90, not the
    ratio of medians 60/80)."""
    rows = [{"round": 0, "tool": "dlio", "ranks": 2, "au_pct": 70.0, "other_cpu_pct": 10.0},
            {"round": 1, "tool": "dlio", "ranks": 2, "au_pct": 80.0, "other_cpu_pct": 30.0},
            {"round": 2, "tool": "dlio", "ranks": 2, "au_pct": 90.0, "other_cpu_pct": 20.0},
            {"round": 2, "tool": "dlbench", "ranks": 2, "au_pct": 60.0, "overrun_pct": 5.0, "peer_wait_pct": 9.0,
             "other_cpu_pct": 1.0}]
    text = sbs.table(rows, [2], ["dlbench"])
    assert "| 2 | DLIO 2.0.0 | 80.0 (70.0-90.0) | 1 | - | - | 20.0 | 3 |" in text
    assert "| 2 | dlbench | 60.0 | 0.67 | 5.0 | 9.0 | 1.0 | 1 |" in text


BAD_ARGUMENTS = [
    (["--dlio-python", "/nonexistent/python"], "--dlio-python /nonexistent/python: no such interpreter"),
    (["--dlio-python", sys.executable, "--ranks", "0,x"], "--ranks '0,x'"),
    (["--dlio-python", sys.executable, "--tree", "nopath"], "--tree 'nopath'"),
]


@pytest.mark.parametrize("args, words", BAD_ARGUMENTS)
def test_bad_arguments_are_one_line_and_exit_2_in_process(sbs, capsys, args, words):
    assert sbs.main(args) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow  # a process each
@pytest.mark.parametrize("args, words", BAD_ARGUMENTS)
def test_bad_arguments_are_one_line_and_exit_2(args, words):
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert words in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1

"""A run directory written by an older version, v0.2 (tests/fixtures/run-v0.2, README there), still reads
with the upgrades applied on read, and `python run_bench.py report DIR` rebuilt on a copy of it shows what
v0.2 measured, unchanged, without rewriting the files it read."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from harness.results import rundir
from harness.results.cellresult import NO_HINT, SCHEMA_VERSION
from harness.results.fileformat import VERSION_KEY

REPO = Path(__file__).resolve().parent.parent
RUN = REPO / "tests" / "fixtures" / "run-v0.2"
READ = ("cells.jsonl", "env.json", "probe.jsonl")  # what a report is rebuilt from
STORAGES = ["raw", "mmap", "hdf5"]


def raw_lines(name: str) -> list[dict]:
    return [json.loads(line) for line in (RUN / name).read_text().splitlines() if line.strip()]


def test_the_fixture_is_of_the_formats_before_the_version_keys():
    lines = raw_lines("cells.jsonl")
    assert [line["schema"] for line in lines] == [2, 2, 2] and all("advice" not in line for line in lines)
    assert all("read_amplification" not in line["figures"] and "stages" not in line["ranks"][0] for line in lines)
    env = json.loads((RUN / "env.json").read_text())
    assert VERSION_KEY not in env and "data_dir" not in env and env["git"]["commit"].startswith("51a6757")
    assert all(VERSION_KEY not in line for line in raw_lines("probe.jsonl"))


def test_it_reads_with_the_upgrades_applied_on_read():
    results = rundir.read_results(RUN)
    assert [r.name("storage") for r in results] == STORAGES
    for r, line in zip(results, raw_lines("cells.jsonl")):
        assert r.schema == SCHEMA_VERSION and not r.legacy_figures and r.measured and r.contract_ok
        assert r.advice == NO_HINT  # written before the readers gave access hints
        assert r.figures.read_amplification == line["figures"]["disk_read_mb"] / line["figures"]["logical_read_mb"]
        assert r.to_json() == line  # upgraded in memory only
    env = rundir.read_env(RUN)
    assert env.scenario == "smoke" and env.cell_ids == [r.cell for r in results] and env.extra == {}
    assert env.data_dir is None and env.read_ahead_kb is None and env.gpu == {}  # absent then: defaults
    assert env.to_json()[VERSION_KEY] == 1  # read as version 1, and would be written with its version
    assert rundir.read_probe(RUN).ideal(0) == raw_lines("probe.jsonl")[0]["ideal_samples_per_s"]


def table_rows(text: str) -> dict[str, list[str]]:
    """The rows of each markdown table of a report, by its header line."""
    tables, header = {}, None
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|--"):
            header = line
            tables[header] = []
        elif line.startswith("|") and header is not None and not line.startswith("|--"):
            tables[header].append(line)
        elif not line.startswith("|"):
            header = None
    return tables


@pytest.mark.slow  # runs run_bench.py as a process
def test_the_report_rebuilt_from_it_shows_what_v02_measured(tmp_path):
    run = tmp_path / "run-v0.2"
    shutil.copytree(RUN, run)
    done = subprocess.run([sys.executable, "run_bench.py", "report", str(run)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "hdf5" in done.stdout
    for name in READ:  # read, never rewritten
        assert (run / name).read_bytes() == (RUN / name).read_bytes(), name
    old, new = pd.read_csv(RUN / "summary.csv"), pd.read_csv(run / "summary.csv")
    pd.testing.assert_frame_equal(new[list(old.columns)], old)  # every column v0.2 wrote, the same values
    assert new["advice"].tolist() == [NO_HINT] * 3  # the upgrade on read, shown
    before, after = table_rows((RUN / "report.md").read_text()), table_rows((run / "report.md").read_text())
    same = [header for header in before if header in after]
    assert len(same) >= 4, "the tables v0.2 wrote are no longer in the report"
    for header in same:  # a table whose columns did not change shows the same rows
        assert after[header] == before[header], header
    assert (run / "effects.jsonl").exists() and (run / "plots" / "throughput.png").exists()

"""Real multi-rank runs of the features users reach for: the LRU cache (worker and shared scope) and the
balanced sampler inside DDP training, --exclude, and --repeats with --save-baseline then --baseline."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import read_cells, run_bench
from scenarios_for_tests import write_scenario

from harness.results.cellresult import CellResult

pytestmark = pytest.mark.slow  # rank processes and DataLoader workers

MATRIX = {
    "storage": ["mmap"],
    "cache": ["none", {"name": "lru", "capacity_mb": 64, "scope": "worker"},
              {"name": "lru", "capacity_mb": 64, "scope": "shared"}],
    "sampler": ["default", "balanced"],
}
TRAINING = {"batch_size": 8, "image_size": 48, "warmup_steps": 1, "workers": 1, "persistent_workers": True}


def cells_of(out: Path) -> tuple[Path, list[CellResult]]:
    (run_dir,) = list(out.iterdir())
    return run_dir, read_cells(run_dir)


@pytest.fixture(scope="module")
def scenario(tmp_path_factory) -> Path:
    return write_scenario(tmp_path_factory.mktemp("scenario") / "runs.toml", MATRIX, training=TRAINING,
                          description="cache and sampler inside a real run")


def test_lru_cache_and_balanced_sampler_in_a_real_run_with_exclude(scenario, data_dir, tmp_path):
    # two epochs: the first fills each cache, the second reads from it
    proc = run_bench("--scenario", str(scenario), "--data-dir", str(data_dir), "--out", str(tmp_path),
                     "--epochs", "2", "--exclude", "cache=none", "--exclude", "sampler=default", "--quiet")
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, cells = cells_of(tmp_path)
    assert sorted(c.params["cache"].get("scope") for c in cells) == ["shared", "worker"]
    for cell in cells:
        assert cell.error is None
        assert cell.label("sampler") == "balanced" and cell.label("cache").startswith("lru(")
        assert cell.coverage.ok and cell.coverage.coverage_pct == 100.0
        assert len({r.param_digest for r in cell.ranks}) == 1
        cache = cell.cache
        assert cache.scope == cell.params["cache"]["scope"]
        assert cache.hits > 0 and cache.misses > 0 and cache.evictions == 0
        # one cache per DataLoader worker (1 per rank) or one server per rank: 2 either way here
        assert cache.caches == 2
        # the cell's figures are the ranks' records summed
        assert cache.hits == sum(r.cache.hits for r in cell.ranks) and all(r.cache.scope == cache.scope
                                                                          for r in cell.ranks)


def test_repeats_save_baseline_then_compare(scenario, data_dir, tmp_path):
    baseline = tmp_path / "baseline.json"
    common = ("--scenario", str(scenario), "--data-dir", str(data_dir), "--steps", "3", "--repeats", "2",
              "--only", "cache=none", "--only", "sampler=default", "--quiet")
    first = run_bench(*common, "--out", str(tmp_path / "a"), "--save-baseline", str(baseline))
    assert first.returncode == 0, first.stderr[-3000:]
    assert json.loads(baseline.read_text())  # written and readable
    _, cells = cells_of(tmp_path / "a")
    assert sorted(c.repeat for c in cells) == [0, 1]
    # a 2-core machine shared with other work drifts: only a change of 95% would count as a regression
    second = run_bench(*common, "--out", str(tmp_path / "b"), "--baseline", str(baseline),
                       "--min-effect", "0.95")
    if second.returncode == 3 and "beyond its noise" in second.stderr:  # harness.gates.baseline.check_machine
        pytest.skip("the machine probe moved beyond its noise between the two runs (a loaded machine): the "
                    "baseline is refused as from another machine, the designed answer; nothing to compare")
    assert second.returncode == 0, second.stderr[-3000:] + second.stdout[-3000:]
    run_dir, _ = cells_of(tmp_path / "b")
    comparison = (run_dir / "comparison.md").read_text()
    assert "storage=mmap" in comparison or "mmap" in comparison

"""The history's views of a synthetic history with a planted step and a slow drift: `history show` and the
static dashboard (harness.history.dashboard), which a real headless Chromium loads: the page it renders shows
every cell and the marked step, and a screenshot of it shows the step's red line.

Chromium is Debian's package: found on PATH, else installed with apt-get when this is root (as CI is: like
scripts/slurm_check.sh installs slurm-wlm), else the browser test is skipped with the reason."""
from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from test_history import history
from test_history_stats import planted

from harness.history import dashboard, database

CELLS = ["storage=raw,batching=fixed", "storage=mmap,batching=fixed", "storage=hdf5,batching=fixed"]
STEPPED = CELLS[1]
BROWSERS = ("chromium", "chromium-browser")


def commit(i: int) -> str:
    return hashlib.sha1(f"commit {i}".encode()).hexdigest()


def synthetic_store(path: Path, seed: int = 3) -> Path:
    """40 commits of 2 runs each: the mmap cell's CPU per sample with the planted step (+30% at commit 12) and
    the drift after it (test_history_stats.planted), the other cells flat; the storage axis's effect."""
    db = database.open_store(path)
    series = planted(seed)
    rnd = random.Random(seed)
    for n, (name, value) in enumerate(series):
        i = int(name[1:])
        run = {"run_key": f"k{n}", "run_dir": f"/runs/{n}", "commit_id": commit(i), "dirty": 0, "branch": "main",
               "time_utc": f"2026-11-{1 + n // 60:02d}T{(n // 60) % 24:02d}:{n % 60:02d}:00Z", "scenario": "ci",
               "settings_hash": "s", "settings": "{}", "machine_fp": "m1", "repeats": 1, "verdict": "", "gate": "",
               "machine": json.dumps({"cpu_model": "AMD EPYC", "cpu_count": 2, "cpu_affinity": 2, "memory_gb": 25,
                                      "gpus": [], "torch": "2.13", "hostname": "h"})}
        visits = []
        for cell in CELLS:
            cpu = 0.001 * (value if cell == STEPPED else math.exp(rnd.gauss(0, 0.02)))
            visits.append({"cell": cell, "repeat": 0, "error": None, "throughput": 1 / cpu,
                           "throughput_low": 0.95 / cpu, "throughput_high": 1.05 / cpu, "au_pct": 40.0,
                           "loader_cpu": cpu / 2, "rank_cpu": cpu / 2, "cpu_per_sample": cpu, "step_p50_ms": 10.0,
                           "disturbed": 0})
        effects = [{"figure": "throughput", "axis": "storage", "level": "mmap", "reference": "raw", "kind": "main",
                    "ratio": 1 / value, "low": 0.9 / value, "high": 1.1 / value, "n": 6}]
        database.insert_run(db, run, visits, effects)
    return path


def test_history_show_names_the_step_and_the_drift(tmp_path):
    db_path = synthetic_store(tmp_path / "h.sqlite")
    proc = history("show", STEPPED, "--history", str(db_path))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    (step,) = [ln for ln in lines if "STEP" in ln]
    assert step.startswith(f"  STEP at {commit(12)[:10]} (after {commit(11)[:10]}): x1.3")
    (drift,) = [ln for ln in lines if "DRIFT" in ln]
    assert drift.startswith(f"  DRIFT over 28 commits {commit(12)[:10]} .. {commit(39)[:10]}: x1.1")
    assert [ln.split()[0] for ln in lines[1:41]] == [commit(i)[:10] for i in range(40)]  # a line per commit
    flat = history("show", CELLS[0], "--history", str(db_path))
    assert "no step and no drift" in flat.stdout


def test_the_dashboard_is_one_small_offline_page_per_scenario(tmp_path):
    db_path = synthetic_store(tmp_path / "h.sqlite")
    pages = dashboard.write(database.open_store(db_path), tmp_path / "html")
    assert [p.name for p in pages] == ["index.html", "ci.html"]
    html = pages[1].read_text()
    assert len(html.encode()) < 200_000
    assert "<script" not in html and not re.search(r"(src|href)=\"(https?:)?//", html)  # nothing to fetch
    assert [m for m in re.findall(r'data-cell="([^"]+)"', html)] == sorted(CELLS)
    # the step on the stepped cell's throughput and CPU charts, nowhere else
    assert re.findall(r'<g class="step" data-commit="([^"]+)"', html) == [commit(12)] * 2
    assert "machine m1" in html and "AMD EPYC, 2 cores allowed of 2, 25 GB, no GPU, torch 2.13" in html
    assert re.findall(r'<g class="drift" data-commit="([^"]+)"', html) == [commit(12)] * 2
    assert 'data-axis="storage"' in html and "drift over 28 commits" in html


def _install_chromium() -> str | None:
    """Debian's chromium with apt-get (root only), once for parallel sessions; the reason when it cannot."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return "chromium is not installed and this is not root with apt-get (apt-get install chromium)"
    with open("/tmp/dlbench-chromium.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not any(shutil.which(b) for b in BROWSERS):
                env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
                for cmd in (["apt-get", "update", "-q"],
                            ["apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium"]):
                    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
                    if done.returncode != 0:
                        return f"{' '.join(cmd)} failed: {(done.stdout + done.stderr).strip().splitlines()[-1:]}"
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return None


@pytest.fixture(scope="session")
def chromium() -> str:
    found = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if found is None:
        why = _install_chromium()
        if why:
            pytest.skip(why)
        found = next(shutil.which(b) for b in BROWSERS if shutil.which(b))
    return found


def browse(chromium: str, page: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           f"--user-data-dir={page.parent / '.profile'}", *flags, page.as_uri()],
                          capture_output=True, text=True, timeout=180)


@pytest.mark.slow  # Chromium
def test_chromium_renders_the_cells_and_the_marked_step(tmp_path, chromium):
    from PIL import Image

    db_path = synthetic_store(tmp_path / "h.sqlite")
    proc = history("html", str(tmp_path / "html"), "--history", str(db_path))
    assert proc.returncode == 0, proc.stderr
    page = tmp_path / "html" / "ci.html"
    dom = browse(chromium, page, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    shown = dom.stdout
    assert re.findall(r'<section class="cell" data-cell="([^"]+)"', shown) == sorted(CELLS)  # as the browser parsed it
    assert re.findall(r'<g class="step" data-commit="([^"]+)"', shown) == [commit(12)] * 2
    assert "step x1.3" in shown and "drift x1.1" in shown and "<svg" in shown
    shot = tmp_path / "shot.png"
    done = browse(chromium, page, f"--screenshot={shot}", "--window-size=1250,1400", "--hide-scrollbars")
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    image = Image.open(shot).convert("RGB")
    assert image.size == (1250, 1400)
    colours = image.getcolors(1 << 20)
    red = sum(n for n, (r, g, b) in colours if r > 180 and g < 60 and b < 60)  # the step's line and label
    blue = sum(n for n, (r, g, b) in colours if b > 140 and r < 90)  # the points and their intervals
    assert red > 100 and blue > 1000, (red, blue)
    target = os.environ.get("DLBENCH_HISTORY_SCREENSHOT")  # docs/img/history-dashboard.png is made so
    if target:
        shutil.copy(shot, target)


def test_every_scenario_gets_a_page_of_its_own_and_the_index_stays():
    """A scenario named `index` overwrote the index, `a/b` and `a_b` shared a page, a 300-character name was an
    internal error: each name now has its own safe page of bounded length."""
    names = ["ci", "index", "INDEX", "a/b", "a_b", "x" * 300, "../up", ".hidden", "é"]
    pages = [dashboard._file_name(n) for n in names]
    assert pages[0] == "ci.html" and pages[4] == "a_b.html"  # a plain name keeps its page
    assert len(set(pages)) == len(pages) and "index.html" not in pages
    assert all(len(p) < 100 and "/" not in p and not p.startswith(".") for p in pages)

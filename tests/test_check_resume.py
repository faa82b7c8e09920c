"""check-resume: the repeated/dropped arithmetic against hand-computed orders, and a real DataLoader (worker
processes) stopped in the middle of an epoch and resumed each way, its order recorded across the stop."""
from __future__ import annotations

import os
import signal
from pathlib import Path

import procs
import pytest

from harness import cli
from harness.checks.resume import counting, measuring, table
from harness.config import scenario


def test_an_exact_resume_repeats_and_drops_nothing():
    c = counting.count([3, 1, 4, 0, 2], [3, 1], [4, 0, 2])
    assert (c.repeated, c.dropped, c.same_order, c.expected, c.before, c.after) == (0, 0, True, 5, 2, 3)


def test_a_restart_from_the_start_repeats_what_was_read():
    c = counting.count([3, 1, 4, 0, 2], [3, 1], [3, 1, 4, 0, 2])
    assert (c.repeated, c.dropped, c.same_order) == (2, 0, False)


def test_a_resume_past_the_stop_drops_what_it_skipped():
    c = counting.count([3, 1, 4, 0, 2], [3, 1], [2])
    assert (c.repeated, c.dropped) == (0, 2)


def test_padding_repeats_count_as_a_multiset():
    # the epoch repeats 3 once as padding: delivering it twice is no repeat, three times is one
    ref = [3, 1, 4, 0, 2, 3]
    assert counting.count(ref, [3, 1, 4], [0, 2, 3]).repeated == 0
    c = counting.count(ref, [3, 1, 4], [3, 0, 2, 3])
    assert (c.repeated, c.dropped) == (1, 0)
    c = counting.count(ref, [3, 1, 4], [0, 2])
    assert (c.repeated, c.dropped) == (0, 1)


def test_a_reordered_resume_is_complete_but_not_the_same_order():
    c = counting.count([0, 1, 2, 3], [0, 1], [3, 2])
    assert (c.repeated, c.dropped, c.same_order) == (0, 0, False)


def test_the_table_names_each_row_and_the_unverified_cold_drop():
    row = {"loader": "threads", "storage": "raw", "sampler": "default", "method": "none",
           "resumable": "no state", "stop_batches": 2, "epoch_batches": 4, "first_batch_warm_s": 0.01,
           "first_batch_cold_s": 0.02, "cold_verified": False, "repeated": 64, "dropped": 0, "same_order": False}
    lines = table.table([row])
    assert "threads" in lines[1] and "0.020?" in lines[1] and " 64 " in lines[1] and "2/4" in lines[1]


def _scenario(tmp_path: Path, matrix: str) -> Path:
    path = tmp_path / "resume.toml"
    path.write_text('description = "resume test"\n[hardware]\naccelerator = "V100-16GB"\ncount = 2\n'
                    '[dataset]\nsamples = 96\nseed = 0\nprofile = "cc3m"\nimage_scale = 0.25\n'
                    '[training]\nworkload = "features"\nbatch_size = 8\nimage_size = 64\nwarmup_steps = 1\n'
                    f'steps = 2\nworkers = 1\nprefetch_factor = 2\n[matrix]\n{matrix}\n')
    return path


def test_a_scenario_without_a_loader_or_storage_axis_is_one_line(tmp_path, capsys):
    path = _scenario(tmp_path, 'sampler = ["default"]')
    code = cli.main(["check-resume", "--scenario", str(path), "--data-dir", str(tmp_path / "data"),
                     "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "neither a loader nor a storage axis" in err and "Traceback" not in err


def test_an_unknown_loader_is_one_line(tmp_path, capsys):
    path = _scenario(tmp_path, 'storage = ["raw"]')
    code = cli.main(["check-resume", "--scenario", str(path), "--loader", "bogus", "--data-dir",
                     str(tmp_path / "data"), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "loader 'bogus'" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_real_dataloader_stopped_mid_epoch_counts_each_way(tmp_path):
    sc = scenario.load(str(_scenario(tmp_path, 'storage = ["raw"]\nloader = ["workers"]')))
    jobs = measuring.jobs(sc, tmp_path / "data")
    assert [j.method for j in jobs] == ["none", "position", "state"]
    reference = measuring.epoch(jobs[0])
    assert len(reference) == 6  # 48 samples of one of 2 ranks, batches of 8
    rows = {j.method: measuring.measure(j, reference, stop=2, fresh=j.method == "state") for j in jobs}
    assert (rows["none"]["repeated"], rows["none"]["dropped"]) == (16, 0)  # the 2 batches read again
    for method in ("position", "state"):  # the state one restarted in a fresh process
        assert (rows[method]["repeated"], rows[method]["dropped"], rows[method]["same_order"]) == (0, 0, True)
    assert rows["state"]["fresh_process"] and rows["state"]["after"] == 32


def _restart_child(parent: int) -> int | None:
    """check-resume's restart process, once it has started processes of its own (its DataLoader's forkserver)."""
    for pid in procs.children(parent):
        try:
            spawned = b"multiprocessing.spawn" in Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if spawned and procs.children(pid):
            return pid
    return None


def _check_resume(tmp_path: Path):
    path = _scenario(tmp_path, 'storage = ["raw"]\nloader = ["workers"]')
    return procs.start("check-resume", "--scenario", str(path), "--data-dir", str(tmp_path / "data"),
                       "--out", str(tmp_path / "out"))


def _end(proc) -> None:
    """A check-resume that did not end by itself (the defect): ended with all its processes."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.communicate()


@pytest.mark.slow
def test_a_killed_restart_process_is_one_line_and_leaves_nothing(tmp_path):
    proc, tag = _check_resume(tmp_path)
    try:
        child = procs.wait_for(lambda: _restart_child(proc.pid), 240, "the restart process", proc)
        os.kill(child, signal.SIGKILL)  # as the OOM killer would
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            _end(proc)
    assert proc.returncode == 2, stderr[-2000:]
    assert "was killed by SIGKILL" in stderr and "Traceback" not in stderr, stderr[-2000:]
    assert procs.no_survivors(tag, timeout=10) == []


@pytest.mark.slow
def test_ctrl_c_during_check_resume_is_one_line_exit_130(tmp_path):
    proc, tag = _check_resume(tmp_path)
    try:
        procs.wait_for(lambda: _restart_child(proc.pid), 240, "the restart process", proc)
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: its foreground process group
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            _end(proc)
    assert proc.returncode == 130, stderr[-2000:]
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr[-3000:]
    assert procs.no_survivors(tag, timeout=10) == []

"""A cells.jsonl cut off by a crash, and --resume's checks (the end-to-end resume is in test_faults)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness import cli
from harness.commands import bench
from harness.errors import UsageError
from harness.results import rundir
from harness.run import resume

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "cells_1xV100.jsonl"


def _cut_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    text = FIXTURE.read_text()
    (run / "cells.jsonl").write_text(text + text.splitlines()[0][:57])  # a last line cut mid-write
    return run


def test_a_cut_last_line_is_skipped_with_one_warning(tmp_path, capsys):
    run = _cut_run(tmp_path)
    whole = len(FIXTURE.read_text().splitlines())
    assert len(rundir.read_results(run)) == whole
    assert len(rundir.read_results(run)) == whole
    err = capsys.readouterr().err
    assert err.count("warning") == 1 and f"cells.jsonl:{whole + 1}" in err and "cut off" in err


def test_a_bad_line_in_the_middle_is_still_an_error(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    lines = FIXTURE.read_text().splitlines()
    (run / "cells.jsonl").write_text("\n".join([lines[0], "{not json", *lines[1:]]) + "\n")
    with pytest.raises(rundir.ResultsError, match="cells.jsonl:2 is not valid JSON"):
        rundir.read_results(run)


def test_drop_cut_tail_keeps_appended_lines_whole(tmp_path):
    run = _cut_run(tmp_path)
    whole = len(FIXTURE.read_text().splitlines())
    assert rundir.drop_cut_tail(run / "cells.jsonl")
    rundir.append_cell(run, json.loads(FIXTURE.read_text().splitlines()[0]))
    assert len(rundir.read_results(run)) == whole + 1
    assert not rundir.drop_cut_tail(run / "cells.jsonl")


def test_report_and_compare_read_a_cut_file(tmp_path, capsys):
    run = _cut_run(tmp_path)
    assert cli.main(["report", str(run)]) == 0
    assert (run / "report.md").exists()
    other = tmp_path / "other"
    shutil.copytree(run, other)
    for d in (run, other):
        (d / "env.json").write_text(json.dumps({"scenario": "1xV100", "comparable": {"world_size": 1}}))
        (d / "probe.jsonl").write_text('{"repeat": 0, "ideal_samples_per_s": 1000, "memcpy_gb_s": 5}\n')
    assert cli.main(["compare", str(run), str(other)]) == 0
    assert "cut off" in capsys.readouterr().err


SETTINGS = {"scenario": "smoke", "comparable": {"steps": 6, "batch_size": 8}, "cells": ["a", "b"],
            "repeats": 1, "cache_state": "as-is"}


def test_resume_refuses_other_settings_in_one_line(tmp_path):
    resume.check_settings(tmp_path, SETTINGS, dict(SETTINGS))
    with pytest.raises(UsageError, match=r"comparable: steps 6 -> 9\); resume with the run's own options"):
        resume.check_settings(tmp_path, SETTINGS, {**SETTINGS, "comparable": {"steps": 9, "batch_size": 8}})
    with pytest.raises(UsageError, match="cells: 2 cells -> 1"):
        resume.check_settings(tmp_path, SETTINGS, {**SETTINGS, "cells": ["a"]})


def test_resume_replays_the_recorded_command_line(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    rundir.write_json(run / "env.json", {"settings": SETTINGS, "argv": ["--scenario", "smoke", "--steps", "3"]})
    parser = cli.build_parser()
    assert cli.resume_argv(["--resume", str(run), "--quiet"], parser) == (run, ["--scenario", "smoke", "--steps",
                                                                              "3", "--quiet"])
    assert cli.resume_argv([f"--resume={run}", "--scenario", "ci"], parser) == (run, ["--scenario", "ci"])


def test_resume_of_something_else_is_one_line_exit_2(tmp_path, capsys):
    assert cli.main(["--resume", str(tmp_path / "nope")]) == 2
    assert "not a directory" in capsys.readouterr().err
    (tmp_path / "old").mkdir()
    rundir.write_json(tmp_path / "old" / "env.json", {"scenario": "smoke"})
    assert cli.main(["--resume", str(tmp_path / "old")]) == 2
    assert "lacks the run's settings" in capsys.readouterr().err


def test_resume_with_a_changed_option_is_refused_before_anything_runs(tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["--scenario", "smoke", "--steps", "3", "--out", str(out), "--data-dir", str(tmp_path / "d")]
    sc_settings = None
    from harness.config import scenario
    from harness.config.matrix import expand

    sc = scenario.load("smoke", {"steps": 3})
    ns = cli.build_parser().parse_args([*argv, "--order-seed", "7"])  # the resumed run takes the recorded seed
    sc_settings = resume.settings_of(cli.bench_request(ns, argv, None), sc, expand(sc), "emulated",
                                     bench.comparable_of(sc, "emulated", "as-is"))
    run = out / "run"
    run.mkdir(parents=True)
    rundir.write_json(run / "env.json", {"settings": sc_settings, "argv": argv})
    assert cli.main(["--resume", str(run), *argv[:2], "--steps", "4", *argv[4:]]) == 2
    err = capsys.readouterr().err
    assert "settings differ" in err and "steps 3 -> 4" in err
    assert not (run / "cells.jsonl").exists()


def _recorded_run(tmp_path: Path) -> tuple[Path, list[str]]:
    """A run directory whose env.json holds what a run of `argv` records (settings as typed values)."""
    from harness.config import scenario
    from harness.config.matrix import expand

    out = tmp_path / "out"
    argv = ["--scenario", "smoke", "--steps", "3", "--out", str(out), "--data-dir", str(tmp_path / "d"),
            "--order-seed", "7"]
    sc = scenario.load("smoke", {"steps": 3})
    settings = resume.settings_of(cli.bench_request(cli.build_parser().parse_args(argv), argv, None), sc,
                                  expand(sc), "emulated", bench.comparable_of(sc, "emulated", "as-is"))
    run = out / "run"
    run.mkdir(parents=True)
    rundir.write_json(run / "env.json", {"settings": settings, "argv": argv})
    return run, argv


@pytest.mark.parametrize("edit", [["--plugin", "planted_on_import"], ["--out", "/tmp/elsewhere"],
                                  ["--data", "s3://someone/else"]])
def test_a_hand_edited_command_line_is_refused_before_a_plugin_is_imported(tmp_path, capsys, monkeypatch, edit):
    """env.json's argv edited by hand (code to import, another output folder, another bucket): the replay is
    checked against the settings the run recorded, and refused before anything is imported or measured."""
    import sys

    (tmp_path / "planted_on_import.py").write_text(f"open({str(tmp_path / 'imported')!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    run, argv = _recorded_run(tmp_path)
    env = json.loads((run / "env.json").read_text())
    rundir.write_json(run / "env.json", {**env, "argv": [*argv, *edit]})
    assert cli.main(["--resume", str(run)]) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()  # one line
    assert "settings differ from the run's" in err and err.startswith("run_bench.py: error: --resume")
    assert not (tmp_path / "imported").exists() and "planted_on_import" not in sys.modules
    assert not (run / "cells.jsonl").exists()


def test_the_recorded_line_itself_replays(tmp_path):
    run, argv = _recorded_run(tmp_path)
    _, replayed = cli.resume_argv(["--resume", str(run)], cli.build_parser())
    request = cli.bench_request(cli.build_parser().parse_args(replayed), replayed, run)
    resume.check_replay(run, request)  # nothing differs: no error


HOLD = ("import fcntl, os, sys, time\n"
        "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
        "if sys.argv[2] == 'take':\n"
        "    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB); os.write(fd, str(os.getpid()).encode())\n"
        "    print('held', flush=True); time.sleep(120)\n"
        "try:\n"
        "    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB); print('free')\n"
        "except BlockingIOError:\n"
        "    print('locked')\n")


def test_a_second_writer_of_a_run_directory_is_one_line_exit_2(tmp_path, capsys, monkeypatch):
    """Two --resume of one run at once duplicated visits: the one writer holds the run directory's lock."""
    run, argv = _recorded_run(tmp_path)
    monkeypatch.setattr(bench.remoterun, "with_remote", lambda *args: 0)  # nothing runs past the lock
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run / ".writer.lock"), "take"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert cli.main(["--resume", str(run)]) == 2
    finally:
        holder.kill()
        holder.wait()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(run) in err[0] and f"pid {holder.pid}" in err[0], err
    assert not (run / "cells.jsonl").exists()


def test_a_run_and_its_resume_hold_the_lock_while_they_write(tmp_path, monkeypatch):
    run, argv = _recorded_run(tmp_path)
    seen = []

    def check(*args):
        seen.append(subprocess.run([sys.executable, "-c", HOLD, str(run / ".writer.lock"), "try"],
                                   capture_output=True, text=True).stdout.strip())
        return 0

    monkeypatch.setattr(bench.remoterun, "with_remote", check)
    assert cli.main(["--resume", str(run)]) == 0
    assert seen == ["locked"]
    assert (run / ".writer.lock").read_text().strip() == str(os.getpid())


def test_a_link_planted_as_the_lock_file_is_refused(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / ".writer.lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UsageError, match="symbolic link"):
        resume.take_lock(run)
    assert not (tmp_path / "elsewhere").exists()

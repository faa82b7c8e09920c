"""No write goes through a symbolic link planted in a run directory, a dashboard folder or a data directory
(harness.safewrite): `report RUN` and `target-report RUN` overwrote a linked report.md and summary.csv and wrote
their PNGs into a linked plots/, `history html OUT` a linked OUT/index.html, and the data directory's lock was
opened through a link. Each is refused in one line (exit 2) and the link's target is left as it was."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness import cli, safewrite
from harness.data import materialise
from harness.errors import UsageError
from harness.history import database
from harness.results import rundir

RUN = Path(__file__).resolve().parent / "fixtures" / "run-v0.2"
REFUSED = r"is a symbolic link \(to .*\); the harness writes nothing through a symbolic link .*remove the link"


@pytest.fixture
def outside(tmp_path):
    """A folder outside the run directory: a file each link points at, and an empty folder."""
    out = tmp_path / "outside"
    (out / "plots").mkdir(parents=True)
    for name in ("victim.md", "victim.csv", "victim.html", "victim.jsonl"):
        (out / name).write_text("precious\n")
    return out


def untouched(outside: Path) -> bool:
    return all((outside / n).read_text() == "precious\n" for n in ("victim.md", "victim.csv", "victim.html",
                                                                    "victim.jsonl")) \
        and not any((outside / "plots").iterdir()) and sorted(p.name for p in outside.iterdir()) == [
            "plots", "victim.csv", "victim.html", "victim.jsonl", "victim.md"]


def one_error_line(capsys, argv: list[str]) -> str:
    code = cli.main([str(a) for a in argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "internal error" not in err[0], err
    return err[0]


def a_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    return run


@pytest.mark.parametrize("linked", ["report.md", "summary.csv", "plots"])
def test_report_refuses_a_linked_file_or_plots_folder(tmp_path, outside, capsys, linked):
    run = a_run(tmp_path)
    target = {"report.md": "victim.md", "summary.csv": "victim.csv", "plots": "plots"}[linked]
    (run / linked).unlink(missing_ok=True)
    (run / linked).symlink_to(outside / target)
    line = one_error_line(capsys, ["report", run])
    assert str(run / linked) in line and "symbolic link" in line
    assert untouched(outside)


def test_target_report_refuses_a_linked_plots_folder(tmp_path, outside, capsys):
    run = a_run(tmp_path)
    (run / "plots").symlink_to(outside / "plots")
    line = one_error_line(capsys, ["target-report", run])
    assert str(run / "plots") in line and "symbolic link" in line
    assert untouched(outside)


def test_history_html_refuses_a_linked_index(tmp_path, outside, capsys):
    out = tmp_path / "html"
    out.mkdir()
    (out / "index.html").symlink_to(outside / "victim.html")
    database.open_store(tmp_path / "h.sqlite").close()
    line = one_error_line(capsys, ["history", "html", out, "--history", tmp_path / "h.sqlite"])
    assert str(out / "index.html") in line and "symbolic link" in line
    assert untouched(outside)


def test_a_linked_cells_file_and_data_lock_are_refused(tmp_path, outside):
    run = tmp_path / "run"
    run.mkdir()
    (run / "cells.jsonl").symlink_to(outside / "victim.jsonl")
    with pytest.raises(UsageError, match=REFUSED):
        rundir.append_line(run / "cells.jsonl", {"a": 1})
    lock = tmp_path / ".raw.lock"
    lock.symlink_to(outside / "made-by-the-lock")
    with pytest.raises(UsageError, match=REFUSED):
        with materialise._locked(lock):
            pass
    assert untouched(outside)


def test_the_helper_keeps_writes_under_the_named_folder(tmp_path, outside):
    root = tmp_path / "run"
    (root / "sub").mkdir(parents=True)
    with pytest.raises(UsageError, match=r"this path is not inside"):
        safewrite.write_text(root / ".." / "escaped.txt", "x", root)
    (root / "linked").symlink_to(outside)
    with pytest.raises(UsageError, match=REFUSED):
        safewrite.write_text(root / "linked" / "victim.md", "x", root)
    safewrite.write_text(root / "sub" / "a.txt", "new", root)
    with safewrite.open_append(root / "sub" / "a.txt", root) as f:
        f.write("er")
    assert (root / "sub" / "a.txt").read_text() == "newer" and not (tmp_path / "escaped.txt").exists()
    assert sorted(p.name for p in (root / "sub").iterdir()) == ["a.txt"]  # no temporary file left
    assert untouched(outside)


@pytest.mark.parametrize("write", ["heartbeat", "rank error", "remote figures", "trace fix"])
def test_the_run_loops_own_files_are_refused_through_a_link(tmp_path, outside, write):
    """The ranks' heartbeat and error files, the remote figures page and a fixed profiler trace: each writer
    of the run loop goes through the helper."""
    from harness.measure import profiling
    from harness.run import remoterun, supervisor

    run = tmp_path / "run"
    run.mkdir()
    if write in ("heartbeat", "rank error"):
        (run / supervisor.HEARTBEATS).symlink_to(outside / "plots")
        act = (lambda: supervisor.write_heartbeat(run, 0, cell="x")) if write == "heartbeat" else \
            (lambda: supervisor._write_rank_error(run, 0, RuntimeError("boom")))
    elif write == "remote figures":
        (run / "remote.md").symlink_to(outside / "victim.md")
        act = lambda: remoterun.write_figures(run, ["a"], "text")  # noqa: E731
    else:
        trace = run / "rank0.pt.trace.json"
        trace.write_text('{"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": '
                         '"enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"}]}')
        (outside / "plots" / "t.json").symlink_to(trace)
        act = lambda: profiling.fix_dataloader_events(outside / "plots" / "t.json")  # noqa: E731
    with pytest.raises(UsageError, match=REFUSED):
        act()
    if write != "trace fix":
        assert untouched(outside)

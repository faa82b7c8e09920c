"""Progress output fits where it goes: a live carriage-return bar on a terminal, plain lines every 10%
elsewhere (a log, CI)."""
from __future__ import annotations

import io

from harness import progress
from harness.data.materialise import _progress
from harness.progress import Progress
from harness.run.rankloop import StepProgress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_not_a_tty_prints_a_plain_line_every_tenth():
    out = io.StringIO()
    samples = list(_progress(iter(range(256)), 256, "materialise mmap", out))
    assert samples == list(range(256))
    text = out.getvalue()
    lines = text.splitlines()
    assert "\r" not in text and len(lines) == 10
    assert lines[0].endswith(" 26/256") and lines[-1].endswith("256/256")
    assert all(line.startswith("materialise mmap [") for line in lines)


def test_tty_redraws_one_live_line(monkeypatch):
    monkeypatch.setattr(progress, "REDRAW_S", 0.0)
    out = Terminal()
    bar = Progress("materialise raw", 60, out)
    for n in range(1, 61):
        bar.update(n)
    bar.close()
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("60/60\n")
    assert text.count("\r") == 61  # every update redrawn in place, then the final state


def test_fewer_steps_than_tenths_and_an_early_stop():
    out = io.StringIO()
    bar = Progress("    step", 3, out, bar_width=0)
    for n in (1, 2):
        bar.update(n)
    bar.close()  # stopped at 2 of 3: the last line says so
    assert out.getvalue().splitlines() == ["    step 1/3", "    step 2/3", "    step 2/3"]


def test_step_progress_starts_a_new_bar_per_phase():
    out = io.StringIO()
    steps = StepProgress(out)
    for _phase in range(3):  # --decompose: three phases of 20 steps
        for step in range(1, 21):
            steps(step, 20)
    steps.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 30 and lines.count("    step 20/20") == 3 and "\r" not in out.getvalue()

"""Progress output that fits where it goes.

On a terminal: one live line redrawn with a carriage return (at most every 0.1 s) and ended with a
newline. Anywhere else (a log file, CI): a plain line at every tenth of the way, so a log holds
about ten short lines per task instead of dozens of carriage-return updates run together on one
line.
"""
from __future__ import annotations

import sys
import time
from typing import TextIO

REDRAW_S = 0.1
STEPS = 10  # plain lines per task when the stream is not a terminal


def is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class Progress:
    """`update(n)` as work advances towards `total`; `close()` once done (ends the live line)."""

    def __init__(self, label: str, total: int, stream: TextIO | None = None, bar_width: int = 30):
        self.label, self.total = label, total
        self.stream = stream if stream is not None else sys.stderr
        self.live = is_tty(self.stream)
        self.bar_width = bar_width
        self._last_draw = float("-inf")
        self._tenths_shown = 0
        self._n = 0

    def _text(self, n: int) -> str:
        if not self.bar_width:
            return f"{self.label} {n}/{self.total}"
        filled = self.bar_width * n // self.total if self.total else self.bar_width
        return f"{self.label} [{'#' * filled}{' ' * (self.bar_width - filled)}] {n}/{self.total}"

    def update(self, n: int) -> None:
        self._n = n
        if self.live:
            now = time.monotonic()
            if now - self._last_draw >= REDRAW_S or n >= self.total:
                self._last_draw = now
                self.stream.write("\r" + self._text(n))
                self.stream.flush()
            return
        tenths = STEPS * n // self.total if self.total else STEPS
        if tenths > self._tenths_shown:
            self._tenths_shown = tenths
            self.stream.write(self._text(n) + "\n")
            self.stream.flush()

    def close(self) -> None:
        if self.live:
            self.stream.write("\r" + self._text(self._n) + "\n")
        elif self._tenths_shown < STEPS:  # stopped early (or nothing to do): say where it ended
            self.stream.write(self._text(self._n) + "\n")
        self.stream.flush()

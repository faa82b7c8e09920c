"""spdl: Meta's SPDL pipeline (``pip install spdl``) in the rank process: one stage of ``threads`` concurrent
tasks (0: the scenario's workers, at least 1) each preparing whole batches, ``prefetch`` batches per task in
its sink, in the batch sampler's order (harness.train.spdlloader). Absent the package, the axis excludes it
with one line."""
from __future__ import annotations

import importlib

from strategies.params import integer
from strategies.protocols import LoaderBase
from strategies.registry import Unavailable, register

INSTALL = "the spdl loader needs the spdl package: pip install spdl==0.8.0 (the README's test command installs it)"


@register("loader", "spdl")
class SpdlLoader(LoaderBase):
    kind = "spdl"

    def __init__(self, threads: int = 0, prefetch: int = 2) -> None:
        try:
            importlib.import_module("spdl.pipeline")
        except ImportError:
            raise Unavailable(INSTALL) from None
        self.threads = integer("threads", threads, 0)
        self.prefetch = integer("prefetch", prefetch, 1)

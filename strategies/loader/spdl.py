"""spdl: Meta's SPDL pipeline (``pip install spdl``) in the rank process: one stage of ``threads``
concurrent tasks (0: the scenario's workers, at least 1) each preparing whole batches, ``prefetch``
batches per task in its sink, in the batch sampler's order. Absent the package, the axis excludes
it with one line.

Its pipeline, SpdlPipeline (spdl.pipeline.PipelineBuilder): a source (the batch sampler's index
lists), one stage that prepares whole batches (the Dataset's __getitems__: read, cache, decode,
transform, then the collate) with a concurrency of `threads` tasks in the batch sampler's order,
and a sink of `prefetch` batches per task, run on a thread pool of the rank process. One stage, not
SPDL's recommended stage per kind of work: the harness times a batch's stages in the thread that
prepares it (harness.train.stagetimer), which a read stage and a decode stage in different threads
would split. Decoding is the cell's decoder, as for every loader; SPDL's own FFmpeg image decode is
not used. The CPU is accounted as the thread loader's (strategies.loader.threads.BatchThreadPool:
per-thread CPU clock around each batch)."""
from __future__ import annotations

import importlib

from strategies.loader.threads import BatchThreadPool, InProcessLoader
from strategies.params import integer
from strategies.registry import Unavailable, register

INSTALL = "the spdl loader needs the spdl package: pip install spdl==0.8.0 (the README's test command installs it)"


class SpdlPipeline(BatchThreadPool):
    def __iter__(self):
        from spdl.pipeline import PipelineBuilder  # optional: the loader axis excludes this strategy without it

        pipeline = (PipelineBuilder()
                    .add_source(list(indices) for indices in self.batch_sampler)
                    .pipe(self._load, concurrency=self.threads, output_order="input", name="prepare")
                    .add_sink(self.depth)
                    .build(num_threads=self.threads))
        with pipeline.auto_stop():
            yield from pipeline


@register("loader", "spdl")
class SpdlLoader(InProcessLoader):
    kind = "spdl"
    pool = SpdlPipeline

    def __init__(self, threads: int = 0, prefetch: int = 2) -> None:
        try:
            importlib.import_module("spdl.pipeline")
        except ImportError:
            raise Unavailable(INSTALL) from None
        self.threads = integer("threads", threads, 0)
        self.prefetch = integer("prefetch", prefetch, 1)

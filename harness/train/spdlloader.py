"""loader = "spdl": Meta's SPDL pipeline (spdl.pipeline.PipelineBuilder): a source (the batch sampler's index
lists), one stage that prepares whole batches (the Dataset's __getitems__: read, cache, decode, transform,
then the collate) with a concurrency of `threads` tasks in the batch sampler's order, and a sink of
`prefetch` batches per task, run on a thread pool of the rank process. One stage, not SPDL's recommended stage
per kind of work: the harness times a batch's stages in the thread that prepares it
(harness.train.stagetimer), which a read stage and a decode stage in different threads would split. Decoding
is the cell's decoder, as for every loader; SPDL's own FFmpeg image decode is not used. The CPU is accounted
as the thread loader's (harness.train.threadloader.BatchThreadPool: per-thread CPU clock around each batch)."""
from __future__ import annotations

from harness.train.threadloader import BatchThreadPool


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

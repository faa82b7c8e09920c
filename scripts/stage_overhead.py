"""What timing the loader's stages costs (harness.train.stagetimer): a DataLoader worker's work per batch
(SampleDataset.__getitems__ + Collate, a scenario's dataset and settings, warm page cache) with the stage
clocks on, and with them replaced by no-ops, interleaved, in one process; plus the clock reads per batch
times one read's cost. docs/measurements/stage-profile.md shows a measured run.

    python scripts/stage_overhead.py [--scenario 4xV100] [--storage raw] [--batches 40] [--rounds 7]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from harness.config import scenario as scenario_mod  # noqa: E402
from harness.config.choices import StrategyChoice  # noqa: E402
from harness.data.fields import FIELDS_FOR  # noqa: E402
from harness.data.materialise import materialise  # noqa: E402
from harness.train import handover, stagetimer, torchdataset  # noqa: E402


class CountingClock:
    """time.thread_time, counted (how many clock reads one batch makes)."""

    def __init__(self):
        self.reads = 0

    def thread_time(self) -> float:
        self.reads += 1
        return time.thread_time()

    def __getattr__(self, name):
        return getattr(time, name)


class NoClock:
    """The stage clocks off: every read returns 0."""

    @staticmethod
    def thread_time() -> float:
        return 0.0

    def __getattr__(self, name):
        return getattr(time, name)


def one_pass(dataset, collate, batches) -> float:
    """CPU seconds per batch (the process's clock: one thread, as in a DataLoader worker; robust to the
    other processes of a shared host, which wall time is not)."""
    start = time.process_time()
    for b in batches:
        collate(dataset.__getitems__(b))
    return (time.process_time() - start) / len(batches)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--scenario", default="4xV100")
    p.add_argument("--storage", default="raw")
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--data-dir", type=Path, default=Path("data"))
    a = p.parse_args()
    torch.set_num_threads(1)  # as in a DataLoader worker
    sc = scenario_mod.load(a.scenario)
    tr = sc.training
    choice = StrategyChoice("storage", a.storage)
    path = materialise(sc.dataset, a.storage, a.data_dir, progress=False)
    reader = choice.create().open(path, fields=FIELDS_FOR[tr.workload])
    cache = StrategyChoice("cache", "none").create()
    prep = StrategyChoice("preprocess", "host").create()
    dataset = torchdataset.SampleDataset(reader, tr.workload, tr.image_size, cache=cache, preprocess=prep,
                                         decoder=tr.decoder)
    collate = torchdataset.Collate(prep.normalise)
    n = len(dataset)
    batches = [[(i * tr.batch_size + j) % n for j in range(tr.batch_size)] for i in range(a.batches)]
    one_pass(dataset, collate, batches)  # page cache and decoder warm
    counting = CountingClock()
    torchdataset.time = stagetimer.time = handover.time = counting
    one_pass(dataset, collate, batches[:1])
    reads = counting.reads + 2  # + the rank's two (harness.train.batches.BatchSource._fetch)
    on, off = [], []
    for _ in range(a.rounds):
        torchdataset.time = stagetimer.time = handover.time = time
        on.append(one_pass(dataset, collate, batches))
        torchdataset.time = stagetimer.time = handover.time = NoClock()
        off.append(one_pass(dataset, collate, batches))
    torchdataset.time = stagetimer.time = handover.time = time
    k = 200_000
    start = time.perf_counter()
    for _ in range(k):
        time.thread_time()
    clock_s = (time.perf_counter() - start) / k
    t_on, t_off = statistics.median(on), statistics.median(off)
    print(f"scenario {sc.name}, storage {a.storage}, batch {tr.batch_size}, image size {tr.image_size}, "
          f"decoder {tr.decoder}: {a.rounds} rounds x {a.batches} batches, interleaved")
    print(f"CPU per batch: stages timed {t_on * 1e3:.3f} ms, clocks off {t_off * 1e3:.3f} ms "
          f"(median of rounds), difference {100 * (t_on - t_off) / t_off:+.2f}% "
          f"(rounds: on {min(on) * 1e3:.3f}-{max(on) * 1e3:.3f}, off {min(off) * 1e3:.3f}-{max(off) * 1e3:.3f} ms)")
    print(f"clock reads per batch {reads}, {clock_s * 1e6:.2f} us each: {reads * clock_s * 1e6:.1f} us per batch, "
          f"{100 * reads * clock_s / t_off:.2f}% of the batch")
    return 0


if __name__ == "__main__":
    sys.exit(main())

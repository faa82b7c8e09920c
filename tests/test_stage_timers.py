"""Each loader stage is timed around its own code (harness.train.stagetimer), and what no timer covers stays out
of every stage: it is the profile's `untimed` share (harness.analysis.stages), never a stage's remainder.

The work is made of known CPU: each stage's code is replaced by a burner that spins until its own thread's
clock has advanced by a set amount (CPU time, so the machine's other load does not change it), beside the
real code. A stage must hold at least its burn (its timer removed, it holds nothing) and less than its burn
plus a margin smaller than the glue (CPU burnt where no timer runs: had a stage been a remainder, the glue
would be in it). No test here asserts wall-clock speed."""
from __future__ import annotations

import time
from dataclasses import dataclass

import pytest

from harness.data.generator import DatasetSpec, generate_sample
from harness.train import stagetimer, torchdataset
from harness.train.stagetimer import STAGE_KEY
from harness.train.torchdataset import Collate, SampleDataset
from strategies import registry
from strategies.sample import Sample

SPEC = DatasetSpec(samples=16, profile="tiny")
MS = 1e-3
READ, CACHE, DECODE, TOKENS, COLLATE, NORMALISE = 3 * MS, 2 * MS, 3 * MS, 2 * MS, 3 * MS, 2 * MS
GLUE = 10 * MS  # per sample, in the items' building: no timer runs there
N = 4  # samples per batch
MARGIN = N * GLUE / 2  # a stage's real work stays below it; the glue of a batch is twice it


def burn(seconds: float) -> None:
    """Spin until this thread has used `seconds` more CPU."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


@dataclass(slots=True)
class GlueSample(Sample):
    """A sample whose `nbytes`, read once per item when the item is built (outside every timer), burns GLUE."""

    @property
    def nbytes(self) -> int:
        burn(GLUE)
        return Sample.nbytes.__get__(self)


SAMPLES = [generate_sample(SPEC, i) for i in range(SPEC.samples)]  # made once: a read is the burn, and a copy


class Reader:
    def __init__(self, glue: bool):
        self.kind = GlueSample if glue else Sample

    def __len__(self) -> int:
        return SPEC.samples

    def read_batch(self, indices):
        burn(READ)
        return [self.kind(s.index, s.jpeg, s.caption, s.image_emb, s.text_emb) for s in map(SAMPLES.__getitem__,
                                                                                         indices)]


class BurningFetch:
    """A cache strategy's call: its own code burns CACHE before and after the call to what it wraps."""

    def __init__(self, fetch, sizeof):
        self.fetch, self.sizeof = fetch, sizeof

    def __call__(self, indices):
        burn(CACHE)
        items = list(self.fetch(indices))
        burn(CACHE)
        return items

    def stats(self):
        return None


class BurningCache:
    scope = "worker"

    def __init__(self, level: str):
        self.level = level

    def wrap(self, fetch, sizeof):
        return BurningFetch(fetch, sizeof)


@pytest.fixture
def burners(monkeypatch):
    """decode, tokenise, collate and normalise each burn their share beside the real call."""
    def wrapped(real, seconds):
        def call(*args, **kwargs):
            burn(seconds)
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(torchdataset, "decode_resize", wrapped(torchdataset.decode_resize, DECODE))
    monkeypatch.setattr(torchdataset, "tokenize", wrapped(torchdataset.tokenize, TOKENS))
    monkeypatch.setattr(torchdataset, "collate", wrapped(torchdataset.collate, COLLATE))
    monkeypatch.setattr(torchdataset, "normalise", wrapped(torchdataset.normalise, NORMALISE))


def within(value: float, low: float) -> bool:
    return low <= value < low + MARGIN


# cache: None, or the level of a cache strategy; glue: the items' building burns (only where no cache's own
# code builds them: a stored-level cache sizes the samples it keeps, which is its own work, timed as cache)
@pytest.mark.parametrize("cache,glue", [(None, True), ("decoded", True), ("stored", False)])
def test_each_stage_holds_its_own_code_and_the_glue_is_in_none(burners, cache, glue):
    ds = SampleDataset(Reader(glue), "pixels", 32, cache=None if cache is None else BurningCache(cache),
                       preprocess=registry.create("preprocess", "host"), decoder="pil")
    start = time.thread_time()
    batch = Collate(normalise=True)(ds.__getitems__(list(range(N))))
    spent = time.thread_time() - start
    a = batch[STAGE_KEY]
    assert within(a.get("read", 0.0), READ), a
    assert within(a.get("decode", 0.0), N * DECODE), a
    assert within(a.get("transform", 0.0), N * TOKENS + NORMALISE), a  # the tokens per sample, the normalisation
    assert within(a.get("collate", 0.0), COLLATE), a
    assert within(a.get("cache", 0.0), 2 * CACHE) if cache else "cache" not in a, a
    assert stagetimer.INSIDE_KEY not in a  # the cache's bookkeeping does not travel with the batch
    untimed = spent - stagetimer.timed_total(a)
    if glue:  # the glue burnt in the batch is in no stage, and the stages are all the rest but a margin
        assert N * GLUE <= untimed < N * GLUE + MARGIN, (untimed, a)
    else:
        assert 0.0 <= untimed < MARGIN, (untimed, a)


def test_a_real_cache_is_timed_around_its_own_call():
    """The LRU strategy's lookups and inserts are `cache`; the read inside it is `read`, not cache."""
    ds = SampleDataset(Reader(False), "pixels", 32,
                       cache=registry.create("cache", "lru", capacity_mb=1, scope="worker", level="stored"),
                       preprocess=registry.create("preprocess", "host"), decoder="pil")
    first = Collate()(ds.__getitems__([0, 1, 2, 3]))[STAGE_KEY]
    again = Collate()(ds.__getitems__([0, 1, 2, 3]))[STAGE_KEY]  # all hits: no read at all
    assert first["read"] >= READ and first["cache"] < READ
    assert again.get("read", 0.0) == 0.0 and again["cache"] > 0.0


# --- in a DataLoader worker: send, queue, and the untimed glue ---------------------------------------------

FEED, INDEX, WORKER_GLUE = 10 * MS, 10 * MS, 40 * MS
BATCHES = 6


def _burnt_list(items: list, seconds: float) -> list:
    burn(seconds)
    return items


class Indices(list):
    """A batch's indices whose unpickling (by the worker's main thread, taking them from the index queue: the
    worker loop) burns INDEX."""

    def __reduce__(self):
        return _burnt_list, (list(self), INDEX)


class BurnOnPickle:
    """Pickled by the worker's queue feeder thread (the data queue's helper thread): burns FEED there."""

    def __reduce__(self):
        burn(FEED)
        return int, (0,)


class GlueDataset(SampleDataset):
    """The dataset's call burns WORKER_GLUE after the stages' timers have stopped (untimed work)."""

    def __getitems__(self, indices):
        batch = super().__getitems__(indices)
        burn(WORKER_GLUE)
        return batch


class ProcessCollate(Collate):
    """The collate, then the batch's pickled burner and the worker's process clock at the batch's end."""

    def __call__(self, items):
        batch = super().__call__(items)
        batch["burner"] = BurnOnPickle()
        batch[STAGE_KEY]["_process_s"] = time.process_time()
        return batch


@pytest.mark.slow
def test_in_a_worker_send_and_queue_are_timed_and_the_rest_is_untimed():
    from torch.utils.data import DataLoader

    ds = GlueDataset(Reader(False), "pixels", 32, preprocess=registry.create("preprocess", "host"),
                     decoder="pil")
    batches = [Indices(range(2 * k, 2 * k + 2)) for k in range(BATCHES)]
    loader = DataLoader(ds, batch_sampler=batches, num_workers=1, collate_fn=ProcessCollate(),
                        multiprocessing_context="forkserver")
    accounts = [b[STAGE_KEY] for b in loader]
    assert len(accounts) == BATCHES and len({a["pid"] for a in accounts}) == 1
    assert all(a["send"] > 0 for a in accounts)  # the tensors moved into shared memory, in the worker
    assert "queue" not in accounts[0]  # a worker's first batch: no loop before it
    rest = accounts[1:]
    queue = sum(a["queue"] for a in rest)
    # the loop's main thread took BATCHES - 1 index lists in the window; the feeder thread pickled all but the
    # last batches by then (two left as slack for the thread's timing)
    low = (BATCHES - 1) * INDEX + (BATCHES - 3) * FEED
    assert low <= queue < (BATCHES - 1) * INDEX + BATCHES * FEED + WORKER_GLUE / 2, accounts
    process = accounts[-1]["_process_s"] - accounts[0]["_process_s"]  # the worker's CPU over batches 2..N
    untimed = process - sum(stagetimer.timed_total(a) for a in rest)
    assert untimed >= 0.9 * (BATCHES - 1) * WORKER_GLUE, (untimed, accounts)


def test_the_queue_threads_are_named_and_read_from_their_own_clocks():
    import threading

    assert stagetimer.is_queue_thread(threading.Thread(name="QueueFeederThread"))
    assert stagetimer.is_queue_thread(threading.Thread(name="Thread-3 (_serve)"))
    assert not stagetimer.is_queue_thread(threading.current_thread())
    spun, stop = threading.Event(), threading.Event()

    def spin():
        burn(20 * MS)
        spun.set()
        stop.wait()

    t = threading.Thread(target=spin, name="QueueFeederThread", daemon=True)
    t.start()
    spun.wait()
    try:
        cpu = stagetimer.queue_threads_cpu_s()[t.native_id]
        assert cpu >= 20 * MS and stagetimer.thread_cpu_s(t.native_id) >= cpu
    finally:
        stop.set()
        t.join()
    for _ in range(500):  # ended: its clock goes with it (join returns a moment before the thread exits)
        if stagetimer.thread_cpu_s(t.native_id) is None:
            break
        time.sleep(0.01)
    assert stagetimer.thread_cpu_s(t.native_id) is None

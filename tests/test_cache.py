"""The lru cache strategy: byte bound, LRU order, batching of misses, stats, pickling, and a real
DataLoader (forkserver workers) showing that the shared scope hits more than the per-worker one."""
from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, Dataset

from strategies import registry
from strategies.cache.lru import LRUCache, LRUStore
from strategies.protocols import Cache, Fetch

SCOPES = ("worker", "shared")


def make_item(index: int, size: int = 100) -> bytes:
    return index.to_bytes(4, "little") * (size // 4)


def fetch_bytes(indices: list[int]) -> list[bytes]:
    """Module-level, so a CachedFetch holding it pickles into DataLoader workers."""
    return [make_item(i, 1024) for i in indices]


class RecordingFetch:
    def __init__(self, size: int = 100):
        self.size, self.calls = size, []

    def __call__(self, indices):
        self.calls.append(list(indices))
        return [make_item(i, self.size) for i in indices]


@pytest.fixture(params=SCOPES)
def make_cache(request):
    made = []

    def make(capacity_bytes: int, fetch, level: str = "stored"):
        cache = LRUCache(capacity_mb=capacity_bytes / 2**20, scope=request.param, level=level)
        made.append(cache)
        return cache.wrap(fetch, len)

    yield make
    for cache in made:
        cache.close()


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_registered_with_defaults():
    cache = registry.create("cache", "lru")
    assert (cache.scope, cache.level, cache.capacity_bytes) == ("worker", "stored", 64 * 2**20)


@pytest.mark.parametrize("params, name", [
    ({"scope": "node"}, "scope"), ({"level": "raw"}, "level"), ({"capacity_mb": -1}, "capacity_mb"),
    ({"capacity_mb": "big"}, "capacity_mb"), ({"capacity_mb": float("nan")}, "capacity_mb")])
def test_invalid_params_raise(params, name):
    with pytest.raises(ValueError, match=name):
        LRUCache(**params)


def test_no_cache_wraps_fetch_and_has_no_stats():
    cache = registry.create("cache", "none")
    fetch = RecordingFetch()
    cf = cache.wrap(fetch, len)
    assert isinstance(cache, Cache) and isinstance(cf, Fetch)
    assert cf([3, 1, 3]) == [make_item(i) for i in (3, 1, 3)] and fetch.calls == [[3, 1, 3]]
    assert cf.stats() is None
    assert pickle.loads(pickle.dumps(cf))([2]) == [make_item(2)]
    cache.close()  # the protocol's default: nothing to stop


def test_lru_wrap_returns_a_fetch_with_stats():
    cache = LRUCache(capacity_mb=1)
    cf = cache.wrap(RecordingFetch(), len)
    assert isinstance(cache, Cache) and isinstance(cf, Fetch)
    cf([1])
    assert cf.stats()["misses"] == 1 and cf.stats()["scope"] == "worker"


@pytest.mark.parametrize("module, other", [("strategies.cache.lru_shared", "strategies.cache.lru"),
                                           ("strategies.cache.lrumap", "strategies.cache.lru_shared")])
def test_shared_scope_does_not_import_the_strategy_module(module, other):
    """lru imports lru_shared and store; neither imports lru back (no import cycle)."""
    code = f"import sys, {module}; print({other!r} in sys.modules)"
    repo = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=repo).stdout
    assert out.strip() == "False"


@settings(max_examples=60, deadline=None)
@given(capacity=st.integers(0, 2000),
       ops=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 2500)), max_size=60))
def test_resident_bytes_never_exceed_capacity(capacity, ops):
    store = LRUStore(capacity)
    for key, size in ops:
        store.put_many([(key, b"", size)])
        s = store.stats()
        assert s["resident_bytes"] <= capacity
        assert (key in store.keys()) == (size <= capacity)  # an oversize item is not cached
        assert s["resident_bytes"] == sum(n for _, n in store._data.values())


def test_byte_bound_through_fetch(make_cache):
    sizes = {0: 400, 1: 300, 2: 200, 3: 1200, 4: 100}
    cf = make_cache(1000, lambda idx: [b"x" * sizes[i] for i in idx])
    for batch in ([0, 1], [2, 3], [4], [3, 0]):
        cf(batch)
        assert cf.stats()["resident_bytes"] <= 1000
    assert 3 not in cf.store.keys()  # 1200 bytes > capacity: never cached
    assert cf.stats()["evictions"] == 0 and cf.stats()["resident_bytes"] == 1000


def test_eviction_is_least_recently_used_with_exact_stats(make_cache):
    fetch = RecordingFetch(100)
    cf = make_cache(300, fetch)
    cf([0, 1, 2])  # 3 misses; order 0 1 2
    cf([0])  # hit refreshes 0: order 1 2 0
    cf([3])  # miss, evicts 1: 2 0 3
    assert cf.store.keys() == [2, 0, 3]
    cf([1, 2])  # 2 hits and is refreshed (0 3 2); 1 misses and its put evicts 0: 3 2 1
    assert cf.store.keys() == [3, 2, 1]
    assert fetch.calls == [[0, 1, 2], [3], [1]]
    s = cf.stats()
    assert {k: s[k] for k in ("hits", "misses", "evictions", "resident_bytes", "items")} == \
        {"hits": 2, "misses": 5, "evictions": 2, "resident_bytes": 300, "items": 3}
    assert s["capacity_bytes"] == 300 and s["level"] == "stored" and s["scope"] in SCOPES


def test_one_fetch_per_batch_in_order_without_duplicates(make_cache):
    fetch = RecordingFetch(100)
    cf = make_cache(10_000, fetch)
    cf([3, 8])
    out = cf([5, 3, 9, 5, 8, 1, 9])
    assert fetch.calls == [[3, 8], [5, 9, 1]]  # misses only, first-seen order, each once
    assert out == [make_item(i) for i in (5, 3, 9, 5, 8, 1, 9)]
    s = cf.stats()
    assert (s["hits"], s["misses"]) == (4, 5)  # hits + misses = items requested; misses = items read


def test_pickled_worker_cache_starts_empty():
    cf = LRUCache(capacity_mb=1).wrap(RecordingFetch(), len)
    cf([1, 2, 3])
    copy = pickle.loads(pickle.dumps(cf))
    assert copy.stats()["items"] == 0 and copy.stats()["hits"] == 0
    assert copy.stats()["capacity_bytes"] == 2**20 and cf.stats()["items"] == 3


def test_pickled_shared_cache_shares_contents_and_server_stops():
    cache = LRUCache(capacity_mb=1, scope="shared")
    cf = cache.wrap(RecordingFetch(), len)
    cf([1, 2, 3])
    copy = pickle.loads(pickle.dumps(cf))
    assert copy.store.keys() == [1, 2, 3]
    copy([2])
    assert cf.stats()["hits"] == 1 and copy.fetch.calls == [[1, 2, 3]]  # no new read
    pid = cache._server.pid
    cache.close()
    deadline = time.monotonic() + 5
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid)


def _start_and_vanish(queue) -> None:
    cache = LRUCache(capacity_mb=1, scope="shared")
    cache.wrap(fetch_bytes, len)
    queue.put(cache._server.pid)
    time.sleep(0.2)
    os._exit(0)  # no finalisers, no atexit: the server must notice on its own


@pytest.mark.slow
def test_server_exits_when_its_rank_dies_without_cleanup():
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_start_and_vanish, args=(queue,))
    proc.start()
    pid = queue.get(timeout=20)
    proc.join(10)
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(pid)


class CachedDataset(Dataset):
    def __init__(self, cached, n: int):
        self.cached, self.n = cached, n

    def __len__(self):
        return self.n

    def __getitems__(self, indices):
        items = self.cached(list(indices))
        assert items == fetch_bytes(list(indices))
        return {"pid": os.getpid(), "stats": self.cached.stats()}


def keep_batch(batch):
    return batch


def run_two_epochs(scope: str) -> tuple[dict, dict]:
    """Hits and misses summed over the workers, after epoch 1 and after epoch 2."""
    cache = LRUCache(capacity_mb=1, scope=scope)  # fits all 96 x 1 KiB items
    try:
        loader = DataLoader(CachedDataset(cache.wrap(fetch_bytes, len), 96), batch_size=8, shuffle=True,
                            num_workers=2, multiprocessing_context="forkserver", persistent_workers=True,
                            collate_fn=keep_batch, generator=torch.Generator().manual_seed(0))
        totals = []
        for _ in range(2):
            latest: dict = {}
            for batch in loader:
                key = "shared" if scope == "shared" else batch["pid"]
                old = latest.get(key)
                if old is None or old["hits"] + old["misses"] < batch["stats"]["hits"] + batch["stats"]["misses"]:
                    latest[key] = batch["stats"]
            totals.append({k: sum(s[k] for s in latest.values()) for k in ("hits", "misses")})
        del loader
        return totals[0], totals[1]
    finally:
        cache.close()


@pytest.mark.slow
def test_shared_scope_hits_more_than_per_worker_in_a_real_dataloader():
    worker1, worker2 = run_two_epochs("worker")
    shared1, shared2 = run_two_epochs("shared")
    assert worker1 == shared1 == {"hits": 0, "misses": 96}  # epoch 1: every item read once
    assert shared2 == {"hits": 96, "misses": 96}  # epoch 2 from the shared cache: all hits
    worker_rate = worker2["hits"] / (worker2["hits"] + worker2["misses"])
    shared_rate = shared2["hits"] / (shared2["hits"] + shared2["misses"])
    assert worker2["hits"] + worker2["misses"] == 192
    assert worker_rate < shared_rate  # each worker only hits the half it read itself


def fetch_decoded(indices):
    return [{"index": i, "image": torch.full((4, 5, 3), i, dtype=torch.uint8).transpose(0, 1),
             "emb": torch.ones(3, dtype=torch.bfloat16) * i, "tokens": [i, 2 * i]} for i in indices]


def test_decoded_items_survive_the_shared_cache():
    cache = LRUCache(capacity_mb=1, scope="shared", level="decoded")
    try:
        cf = cache.wrap(fetch_decoded, lambda it: it["image"].numel() + 6)
        cf([1, 2])
        out = cf([2, 1])
        assert cf.stats()["hits"] == 2 and cf.stats()["level"] == "decoded"
        for got, want in zip(out, fetch_decoded([2, 1])):
            assert got["index"] == want["index"] and got["tokens"] == want["tokens"]
            for k in ("image", "emb"):
                assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k])
    finally:
        cache.close()

"""The small measurements the prediction checks make besides their cells (calibration.py composes
them): a disk's read rate and latency (cold, with the page cache dropped), the extra cost of a cold
small file and of a storage's cold sample, the CPU cost of a reader's batches and of a decode, the
CPU-cost factor when every core is busy, and the host's runnable tasks outside this process tree
while a launch runs (OutsideRunnable).

Each is timed with the CPU clock of the thread doing the work. What drops a file from the page
cache and what decodes an image are given by the caller (`drop`, `decode`): it imports
harness.measure.telemetry alone. """
from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from harness.measure.telemetry import descendants, stat_fields

CHUNK = 4 << 20
SEQUENTIAL_BYTES = 256 << 20
RANDOM_READS = 300
RANDOM_BYTES = 4096

Drop = Callable[[list[Path]], None]  # drops the files' pages from the page cache
Decode = Callable[[bytes], object]  # one JPEG decoded (and resized); picklable, for contention's processes


def disk(files: list[Path], drop: Drop) -> dict:
    """Read rate (MB/s, sequential, cold), latency per request (ms, 4 KiB random reads, cold) and
    the extra CPU a cold byte costs over a warm one (s/byte), on the largest of `files`."""
    path = max(files, key=lambda p: p.stat().st_size)
    size = path.stat().st_size
    drop([path])
    n, wall, cpu_cold = _sequential(path)
    _, _, cpu_warm = _sequential(path)  # now cached
    drop([path])
    rng = random.Random(0)
    fd = os.open(path, os.O_RDONLY)
    try:
        start = time.perf_counter()
        for _ in range(RANDOM_READS):
            os.pread(fd, RANDOM_BYTES, rng.randrange(0, max(1, size - RANDOM_BYTES)))
        latency = (time.perf_counter() - start) / RANDOM_READS
    finally:
        os.close(fd)
    drop([path])
    return {"path": str(path), "bytes": n, "read_mb_s": n / wall / 1e6 if wall > 0 else 0.0,
            "latency_ms": latency * 1e3, "cold_cpu_s_per_byte": max(0.0, cpu_cold - cpu_warm) / n if n else 0.0}


def cold_files(files: list[Path], drop: Drop, suffixes: tuple[str, ...] = (".jpg", ".txt"), most: int = 200) -> dict:
    """Small files read whole, cold then warm (the raw storage: a file per field of a sample;
    `suffixes`: those the workload reads): the extra wall time and the extra CPU (the kernel's: the
    directory entry, the inode, the pages) a cold file costs, per file."""
    files = [f for f in files if f.suffix in suffixes and f.stat().st_size > 0]
    picked = files[:: max(1, len(files) // most)][:most]
    drop(picked)
    cold = _read_all(picked)
    warm = _read_all(picked)
    drop(picked)
    n = len(picked) or 1
    return {"files": len(picked), "bytes_per_file": cold[2] / n, "cold_wall_s_per_file": cold[0] / n,
            "warm_wall_s_per_file": warm[0] / n, "extra_wall_s_per_file": max(0.0, cold[0] - warm[0]) / n,
            "extra_cpu_s_per_file": max(0.0, cold[1] - warm[1]) / n}


def _read_all(paths: list[Path]) -> tuple[float, float, int]:
    """(wall s, thread CPU s, bytes) of reading every path whole."""
    n, start, cpu = 0, time.perf_counter(), time.thread_time()
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            n += len(f.read())
    return time.perf_counter() - start, time.thread_time() - cpu, n


def _sequential(path: Path) -> tuple[int, float, float]:
    n, start, cpu = 0, time.perf_counter(), time.thread_time()
    with open(path, "rb", buffering=0) as f:
        while n < SEQUENTIAL_BYTES and (chunk := f.read(CHUNK)):
            n += len(chunk)
    return n, time.perf_counter() - start, time.thread_time() - cpu


def cold_read(open_reader: Callable[[], object], files: list[Path], drop: Drop, indices: list[int],
              batch: int) -> dict:
    """A storage's reader over `indices` in their order (a shuffled sampler's) in batches, cold
    (its files dropped from the page cache, the reader opened after) and then warm: the extra wall
    time and thread CPU a cold sample costs. How many device requests a sample makes cold depends
    on the layout and the kernel's readahead (a packed file's neighbours come in with a sample's
    pages): measured here, not assumed."""
    batches = _split(indices, batch)
    drop(files)
    reader = open_reader()
    try:
        cold = _batches(reader, batches)
        warm = _batches(reader, batches)
    finally:
        close = getattr(reader, "close", None)
        if close is not None:
            close()
    drop(files)
    n = len(indices) or 1
    return {"samples": len(indices), "extra_wall_s_per_sample": max(0.0, cold[0] - warm[0]) / n,
            "extra_cpu_s_per_sample": max(0.0, cold[1] - warm[1]) / n}


def _split(indices: list[int], batch: int) -> list[list[int]]:
    return [indices[i:i + batch] for i in range(0, len(indices), batch)]


def _batches(reader, batches: list[list[int]]) -> tuple[float, float]:
    """(wall s, thread CPU s) of the reader's read_batch over the batches."""
    start, cpu = time.perf_counter(), time.thread_time()
    for b in batches:
        reader.read_batch(b)
    return time.perf_counter() - start, time.thread_time() - cpu


def read_cost(reader, indices: list[int], batch: int, rounds: int = 3) -> float:
    """Warm CPU seconds per sample of an open reader's read_batch (the best of `rounds` passes)."""
    batches = _split(indices, batch)
    _batches(reader, batches)  # into the page cache and the reader's own buffers
    return min(_batches(reader, batches)[1] for _ in range(rounds)) / len(indices)


def decode_costs(decodes: dict, jpegs: list[bytes], rounds: int = 5) -> dict:
    """CPU seconds per image of each of `decodes` (key -> a decode), the best of `rounds` passes.
    The decodes take turns within each round (the order turned by one each round), so a spell of
    outside work or a slower clock lands on every decode alike and the ratios the model takes stay
    true (measured one after the other, simplejpeg once came out at 0.60 ms against PIL's 0.56;
    0.43 and 0.53 measured again)."""
    keys = list(decodes)
    best = dict.fromkeys(keys, float("inf"))
    for r in range(rounds):
        for key in keys[r % len(keys):] + keys[: r % len(keys)]:
            start = time.thread_time()
            for jpeg in jpegs:
                decodes[key](jpeg)
            best[key] = min(best[key], time.thread_time() - start)
    return {key: best[key] / len(jpegs) for key in keys}


def _decode_for(args: tuple[Decode, list[bytes], float]) -> float:
    """In a process of its own: CPU seconds per image, decoding for about `seconds` of wall
    time."""
    decode, jpegs, seconds = args
    done, start, cpu = 0, time.perf_counter(), time.thread_time()
    while time.perf_counter() - start < seconds:
        for jpeg in jpegs:
            decode(jpeg)
        done += len(jpegs)
    return (time.thread_time() - cpu) / done


def contention(decode: Decode, jpegs: list[bytes], cores: int, seconds: float = 3.0) -> dict:
    """The factor a sample's CPU cost rises by when every core is busy: the decode loop in one
    process, then in `cores` processes at once (same work, same clock)."""
    ctx = get_context("spawn")
    with ProcessPoolExecutor(max_workers=cores, mp_context=ctx) as pool:
        list(pool.map(_decode_for, [(decode, jpegs[:4], 0.2)] * cores))  # start every process first
        alone = pool.submit(_decode_for, (decode, jpegs, seconds)).result()
        busy = list(pool.map(_decode_for, [(decode, jpegs, seconds)] * cores))
    mean_busy = sum(busy) / len(busy)
    return {"alone_s": alone, "busy_s": mean_busy, "factor": mean_busy / alone if alone > 0 else 1.0,
            "cores": cores}


def _running_tasks(pids: list[int]) -> int:
    """Tasks (threads) of these processes that are running or runnable (state R)."""
    n = 0
    for pid in pids:
        for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
            fields = stat_fields(stat)
            n += bool(fields) and fields[0] == "R"
    return n


def procs_running() -> int | None:
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("procs_running"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


class OutsideRunnable:
    """Samples, every `interval` seconds in a thread, how many tasks of the host are runnable
    outside this process's tree (/proc/stat procs_running less this tree's tasks in state R): the
    other busy processes the run's processes share the cores with. `mean` after the with-block
    (None where /proc has no count)."""

    def __init__(self, interval: float = 0.1):
        self.interval, self.samples, self.total = interval, 0, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="OutsideRunnable", daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            total = procs_running()
            if total is None:
                return
            ours = _running_tasks([os.getpid(), *descendants(os.getpid())])
            self.total += max(0, total - ours)
            self.samples += 1

    def __enter__(self) -> OutsideRunnable:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def mean(self) -> float | None:
        return self.total / self.samples if self.samples else None

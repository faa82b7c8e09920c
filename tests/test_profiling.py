"""CellProfiler writes traces that TensorBoard's torch-tb-profiler plugin reads with real DataLoader time.

A tiny training loop whose dataset sleeps SLEEP_S per batch is profiled; a real TensorBoard is started on the
traces and its plugin's HTTP API is asked for the Overview step-time breakdown. A raw trace of the same loop
(plain torch.profiler, no post-processing) shows the plugin's DataLoader time as 0: the fix is what matters.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from harness.measure.profiling import CellProfiler, fix_dataloader_events, is_dataloader_event

SLEEP_S = 0.02  # per batch
STEPS = 6  # wait 1 + warmup 1 + active 3, and one more
PLUGIN = "/data/plugin/pytorch_profiler"
CELL_A = "storage=raw,cache=none"  # named like a harness cell id; written by two ranks
CELL_B = "workers=1"
CELL_RECEIVE = "receive-ahead"  # the emulated rank's way: its batches received in a thread (ReceiveAhead)


class SlowBatches(Dataset):
    """Each item is a whole batch (batch_size=None) that takes SLEEP_S to produce."""

    def __len__(self) -> int:
        return STEPS + 2

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(SLEEP_S)
        return torch.full((4, 8), float(i))


def train(workers: int, on_step) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(SlowBatches(), batch_size=None, num_workers=workers)
    for i, batch in enumerate(loader):
        if i == STEPS:
            break
        optimizer.zero_grad()
        model(batch).sum().backward()
        optimizer.step()
        on_step()


def profile_cell(out_dir: Path, workers: int, rank: int = 0) -> Path:
    with CellProfiler(out_dir, rank=rank) as prof:
        train(workers, prof.step)
    assert len(prof.trace_paths) == 1
    return prof.trace_paths[0]


def profile_receive(out_dir: Path) -> Path:
    """The harness's emulated rank: the DataLoader iterated in a receiving thread one batch ahead
    (harness.train.batches.ReceiveAhead), the rank's main thread waiting in take()."""
    from harness.train.batches import ReceiveAhead

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    it = iter(DataLoader(SlowBatches(), batch_size=None, num_workers=0))
    ahead = ReceiveAhead(lambda: next(it, None))
    with CellProfiler(out_dir, rank=0) as prof:
        for _ in range(STEPS):
            batch = ahead.take()
            optimizer.zero_grad()
            model(batch).sum().backward()
            optimizer.step()
            prof.step()
    ahead.stop()
    return prof.trace_paths[0]


def profile_raw(out_dir: Path) -> Path:
    """The same loop under plain torch.profiler, exported without the fix (the plugin's file name rule)."""
    out_dir.mkdir(parents=True)
    path = out_dir / "rank0.1.pt.trace.json"
    sched = torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                profile_memory=True,
                                on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        train(0, prof.step)
    return path


def events(path: Path) -> list[dict]:
    return json.loads(path.read_text())["traceEvents"]


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("profiling") / "traces"
    return {
        CELL_A: profile_cell(root / CELL_A, workers=0),
        CELL_A + "/rank1": profile_cell(root / CELL_A, workers=0, rank=1),
        CELL_B: profile_cell(root / CELL_B, workers=1),
        "raw": profile_raw(root / "raw"),
        CELL_RECEIVE: profile_receive(root / CELL_RECEIVE),
    }


@pytest.mark.slow  # the traces fixture runs a DataLoader worker process
def test_trace_has_steps_and_dataloader_events(traces):
    for key in (CELL_A, CELL_A + "/rank1", CELL_B):
        path = traces[key]
        rank = 1 if key.endswith("rank1") else 0
        assert path.parent.name == key.split("/")[0]
        assert path.name.startswith(f"rank{rank}.") and path.name.endswith(".pt.trace.json")
        evs = events(path)
        steps = sorted(e["name"] for e in evs if e.get("name", "").startswith("ProfilerStep#"))
        assert steps == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
        loads = [e for e in evs if is_dataloader_event(e)]
        assert len(loads) == 3 and {e["cat"] for e in loads} == {"cpu_op"}
        assert all(e["dur"] >= 0.5 * SLEEP_S * 1e6 for e in loads)
        assert not list(path.parent.glob("*.raw")) and not list(path.parent.glob("*.tmp"))
    raw = [e for e in events(traces["raw"]) if is_dataloader_event(e)]
    assert {e["cat"] for e in raw} == {"user_annotation"}  # what current PyTorch writes


@pytest.mark.slow  # the traces fixture runs a DataLoader worker process
def test_fix_is_idempotent_and_keeps_everything_else(traces, tmp_path):
    copy = tmp_path / "rank0.1.pt.trace.json"
    copy.write_text(traces["raw"].read_text())
    assert fix_dataloader_events(copy) == 3
    assert fix_dataloader_events(copy) == 0
    before, after = events(traces["raw"]), events(copy)
    assert len(before) == len(after)
    changed = [(b, a) for b, a in zip(before, after) if b != a]
    assert len(changed) == 3
    assert all({**b, "cat": "cpu_op"} == a for b, a in changed)


def test_the_trace_is_exported_after_the_loop_not_inside_a_step(tmp_path, monkeypatch):
    """Inside prof.step() the export took 1-3 s of the measured window (counted as the next step's wait): the
    trace is written at the profiler's exit; the profiler's first start is paid in __enter__ (a throwaway
    session, before the window), and memory profiling is off unless asked for."""
    from harness.measure import profiling

    monkeypatch.setattr(profiling, "_warmed", set())
    exported_inside_steps = []
    prof = CellProfiler(tmp_path / "cell", rank=0)
    assert prof._prof.profile_memory is False
    with prof:
        assert profiling._warmed  # the throwaway start happened on entering, before any step
        for _ in range(STEPS):  # wait 1, warmup 1, active 3: the trace is ready after the 5th step
            torch.ones(64, 64).matmul(torch.ones(64, 64))
            prof.step()
            exported_inside_steps.append(bool(list((tmp_path / "cell").glob("*.json*"))))
        assert prof.trace_ready and prof.trace_paths == []
    assert exported_inside_steps == [False] * STEPS
    assert len(prof.trace_paths) == 1 and prof.trace_paths[0].is_file()
    steps = [e["name"] for e in events(prof.trace_paths[0]) if e.get("name", "").startswith("ProfilerStep#")]
    assert sorted(steps) == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]


def test_a_loop_that_ends_inside_the_active_steps_still_writes_them(tmp_path):
    with CellProfiler(tmp_path / "cell", rank=0) as prof:
        for _ in range(3):  # wait, warmup, one active step
            prof.step()
    assert len(prof.trace_paths) == 1


def test_each_rank_writes_its_kernel_busy_time_beside_its_trace(tmp_path):
    """rank<N>.kernel_busy.json: per profiled step, GPU-kernel busy and span; none on CPU (no kernels), and
    the plugin still sees one worker (the file is not a *.pt.trace.json)."""
    with CellProfiler(tmp_path / "cell", rank=1) as prof:
        for _ in range(5):
            prof.step()
    written = json.loads((tmp_path / "cell" / "rank1.kernel_busy.json").read_text())
    assert written == {} and prof.kernel_busy == {}
    assert [p.name for p in (tmp_path / "cell").glob("*.pt.trace.json")] == [prof.trace_paths[0].name]


def test_profiler_without_out_dir_is_a_no_op(tmp_path):
    with CellProfiler(None, rank=0) as prof:
        for _ in range(10):
            prof.step()
    assert prof.trace_paths == [] and list(tmp_path.iterdir()) == []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(base: str, route: str, **params):
    url = f"{base}{PLUGIN}/{route}" + ("?" + urllib.parse.urlencode(params) if params else "")
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


@pytest.fixture(scope="module")
def tensorboard(traces):
    pytest.importorskip("tensorboard")
    pytest.importorskip("torch_tb_profiler")
    logdir = traces[CELL_A].parent.parent
    port = free_port()
    log = open(logdir.parent / "tensorboard.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--port",
                             str(port), "--host", "127.0.0.1"], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 45
        while True:  # the plugin loads runs asynchronously: wait until all three are in
            assert proc.poll() is None, (logdir.parent / "tensorboard.log").read_text()[-3000:]
            try:
                runs = get_json(base, "runs")
                if {CELL_A, CELL_B, "raw", CELL_RECEIVE} <= set(runs["runs"]) and not runs["loading"]:
                    break
            except (urllib.error.URLError, ConnectionError, json.JSONDecodeError):
                pass
            assert time.monotonic() < deadline, "TensorBoard did not load the runs within 45 s"
            time.sleep(0.5)
        yield base
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # TensorBoard and the loader processes it started
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def dataloader_us(base: str, run: str, worker: str = "rank0") -> tuple[float, list[float]]:
    """The Overview's average DataLoader time per step and its per-step column, in microseconds."""
    spans = get_json(base, "spans", run=run, worker=worker)
    assert len(spans) == 1
    overview = get_json(base, "overview", run=run, worker=worker, span=spans[0], view="Overview")
    average = {c["name"]: c["value"] for c in overview["performance"][0]["children"]}
    column = [c.get("name") for c in overview["steps"]["columns"]].index("DataLoader")
    return average["DataLoader"], [row[column] for row in overview["steps"]["rows"]]


@pytest.mark.slow  # the traces fixture runs a DataLoader worker process
def test_tensorboard_has_one_run_per_cell_and_one_worker_per_rank(tensorboard):
    assert get_json(tensorboard, "workers", run=CELL_A, view="Overview") == ["rank0", "rank1"]
    assert get_json(tensorboard, "workers", run=CELL_B, view="Overview") == ["rank0"]


@pytest.mark.slow  # the traces fixture runs a DataLoader worker process
@pytest.mark.parametrize("run, worker", [(CELL_A, "rank0"), (CELL_A, "rank1"), (CELL_B, "rank0"),
                                         (CELL_RECEIVE, "rank0")])
def test_tensorboard_overview_shows_dataloader_time(tensorboard, run, worker):
    average, per_step = dataloader_us(tensorboard, run, worker)
    assert len(per_step) == 3
    assert average >= 0.5 * SLEEP_S * 1e6
    assert all(t >= 0.5 * SLEEP_S * 1e6 for t in per_step)


@pytest.mark.slow  # the traces fixture runs a DataLoader worker process
def test_tensorboard_overview_without_the_fix_shows_no_dataloader_time(tensorboard):
    average, per_step = dataloader_us(tensorboard, "raw")
    assert average == 0 and per_step == [0, 0, 0]

"""A short torch.profiler window per cell and rank (``--profile``), written for TensorBoard and
Perfetto.

Each rank records one window (skip_first, wait, warmup, active steps; ``repeat=1``) and writes
``<out_dir>/rank<N>.<milliseconds>.pt.trace.json``. The torch-tb-profiler plugin treats every
directory holding ``*.pt.trace.json`` files as a run (so ``results/<run>/traces/<cell>/`` is one
run per cell) and derives the worker from the file name with
``^(.*?)(\\.\\d+)?\\.pt\\.trace\\.json(\\.gz)?$`` (torch_tb_profiler/consts.py WORKER_PATTERN):
worker ``rank<N>``, span ``<milliseconds>``. The part after ``rank<N>`` must be all digits, or it
becomes part of the worker name.

The DataLoader fix (:func:`fix_dataloader_events`): the plugin's step-time breakdown counts as
"DataLoader" the X events named ``enumerate(DataLoader)#<iterator>.__next__`` (or
``enumerate(DataPipe)#...``) (profiler/event_parser.py, StepParser._parse_step). Current PyTorch
records them with ``cat: "user_annotation"``, and torch-tb-profiler 0.4.3 drops every
user_annotation event at creation except ``ProfilerStep#N`` and gloo/nccl collectives
(profiler/trace.py, create_trace_event), so DataLoader time shows as 0. Re-labelling exactly those
events ``cat: "cpu_op"`` (what the plugin's EventTypeMap reads as an operator, as PyTorch used to
record them) makes the plugin count them; nothing else changes, and the file stays valid Chrome
trace JSON (``cat`` is a free-form string), so Perfetto and chrome://tracing still open it.

What the profiler costs the measured window. The trace is exported (and fixed) in
:meth:`CellProfiler.__exit__`, after the loop, never inside ``prof.step()``: ``on_trace_ready``
only marks the trace ready. The profiler's first start in a process (kineto's set-up, CUPTI's on a
GPU) is paid in :meth:`__enter__` by a throwaway session, before the warm-up steps: inside the
window it took 1.27-2.07 s (4 runs on the 2-core CPU machine), counted as the next step's wait.
What stays inside the window is the stop at the end of the active steps (5-36 ms there, without
memory profiling). ``profile_memory`` is off by default: recording every allocation makes the
profiled steps slower than the others (and the stop 0.5 s longer in one of two CPU runs), and the
harness reads the device memory from the allocator's peak anyway. Run the profiler as the outermost
context of a phase (harness.train.trainloop) so that the telemetry samplers' windows end before the
export.

Kernel-busy time (:func:`kernel_busy`): per profiled step (the trace's ``ProfilerStep#N`` ranges),
the union of the GPU kernels' intervals inside it and the step's span: the GPU-busy share without
the launch gaps, host-side syncs and hooks that the event-timed ``device`` part holds. After its
export each rank writes it beside its trace (``rank<N>.kernel_busy.json``: {N: [busy_us, span_us]},
empty without CUDA kernels), and :attr:`CellProfiler.kernel_busy` keeps it for the rank's record;
scripts/gpu/check_run.py reads the same.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from harness import safewrite


def is_dataloader_event(event: dict) -> bool:
    """The DataLoader-iteration events the plugin's step breakdown matches (by name, as its parser
    does)."""
    name = event.get("name") or ""
    return (name.startswith("enumerate(DataLoader)#") and name.endswith(".__next__")) \
        or name.startswith("enumerate(DataPipe)#")


def fix_dataloader_events(path: Path | str) -> int:
    """Re-label the trace's DataLoader-iteration events from ``user_annotation`` to ``cpu_op`` in
    place, so torch-tb-profiler counts them as DataLoader time. Returns the number of events
    changed (0 when the trace already uses ``cpu_op``, as older PyTorch did; running it twice
    changes nothing)."""
    path = Path(path)
    with path.open() as f:
        trace = json.load(f)
    changed = 0
    for event in trace.get("traceEvents", []):
        if event.get("ph") == "X" and event.get("cat") == "user_annotation" and is_dataloader_event(event):
            event["cat"] = "cpu_op"
            changed += 1
    if changed:
        safewrite.write_text(path, json.dumps(trace))
    return changed


def union_within(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Length of the union of [a, b) intervals clipped to [lo, hi)."""
    total, end = 0.0, lo
    for a, b in sorted(intervals):
        a, b = max(a, end), min(b, hi)
        if b > a:
            total += b - a
            end = b
    return total


def trace_steps(trace: dict) -> tuple[dict[int, tuple[float, float]], list[tuple[float, float]]]:
    """({N: (start, end) of ProfilerStep#N on the host}, [(start, end) of every GPU kernel]),
    microseconds."""
    steps, kernels = {}, []
    for e in trace.get("traceEvents", []):
        if e.get("ph") != "X" or "dur" not in e:
            continue
        name, cat = str(e.get("name", "")), e.get("cat")
        if cat == "kernel":
            kernels.append((float(e["ts"]), float(e["ts"]) + float(e["dur"])))
        elif cat in ("user_annotation", "cpu_op") and name.startswith("ProfilerStep#"):
            steps[int(name.split("#", 1)[1])] = (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
    return steps, kernels


def kernel_busy(trace: dict) -> dict[int, tuple[float, float]]:
    """{N: (kernel-busy microseconds, span microseconds)} of each profiled step; {} without
    kernels."""
    steps, kernels = trace_steps(trace)
    if not kernels:
        return {}
    return {n: (union_within(kernels, a, b), b - a) for n, (a, b) in sorted(steps.items())}


class CellProfiler:
    """torch.profiler around one cell on one rank; call :meth:`step` once per training step.

    With ``out_dir=None`` nothing is profiled and :meth:`step` is a no-op (one attribute test). The
    window is ``skip_first`` steps (e.g. the harness's warm-up steps), ``wait`` untraced steps,
    ``warmup`` traced but discarded steps, then ``active`` recorded steps; a loop that ends inside
    the active part still writes the steps it recorded.
    """

    def __init__(self, out_dir: Path | str | None, rank: int, wait: int = 1, warmup: int = 1, active: int = 3,
                 skip_first: int = 0, profile_memory: bool = False):
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.rank = rank
        self.trace_paths: list[Path] = []
        self.trace_ready = False  # the active steps are recorded; exported at __exit__
        self.kernel_busy: dict[int, tuple[float, float]] = {}  # of the last trace (kernel_busy)
        self._prof = None
        if self.out_dir is None:
            return
        self._activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            self._activities.append(ProfilerActivity.CUDA)
        self._prof = profile(
            activities=self._activities,
            schedule=schedule(skip_first=skip_first, wait=wait, warmup=warmup, active=active, repeat=1),
            on_trace_ready=self._mark_ready,
            record_shapes=False, profile_memory=profile_memory, with_stack=False,
        )

    def __enter__(self) -> CellProfiler:
        if self._prof is not None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            _warm_up(self._activities)
            self._prof.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._prof is not None:
            self._prof.__exit__(*exc)  # stops a window that ended inside the active steps (marks it ready)
            if self.trace_ready:
                self.trace_ready = False
                self._write_trace(self._prof)

    def step(self) -> None:
        """Mark the end of one training step (the profiler's ProfilerStep#N ranges)."""
        if self._prof is not None:
            self._prof.step()

    def _mark_ready(self, prof: profile) -> None:
        """on_trace_ready, called inside prof.step() within the measured window: nothing to do
        there."""
        self.trace_ready = True

    def _write_trace(self, prof: profile) -> None:
        """Export under a name the plugin ignores, fix it, then rename: TensorBoard never sees a
        raw trace."""
        path = self.out_dir / f"rank{self.rank}.{time.time_ns() // 1_000_000}.pt.trace.json"
        tmp = path.with_name(path.name + ".raw")
        prof.export_chrome_trace(str(tmp))
        fix_dataloader_events(tmp)
        with tmp.open() as f:
            self.kernel_busy = kernel_busy(json.load(f))
        os.replace(tmp, path)
        self.trace_paths.append(path)
        safewrite.write_text(self.out_dir / f"rank{self.rank}.kernel_busy.json",
                             json.dumps({str(n): [round(b, 1), round(s, 1)] for n, (b, s) in self.kernel_busy.items()}))


_warmed: set[tuple[str, ...]] = set()  # the activity sets this process has started a profiler with


def _warm_up(activities: list) -> None:
    """Start and stop a throwaway profiler once per process and activity set: the first start's
    set-up (kineto, CUPTI) then happens here, before the window, not in the first profiled step."""
    key = tuple(sorted(str(a) for a in activities))
    if key in _warmed:
        return
    _warmed.add(key)
    with profile(activities=activities, record_shapes=False, profile_memory=False, with_stack=False):
        torch.ones(1).add_(1)

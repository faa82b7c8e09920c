"""A short torch.profiler window per cell and rank (``--profile``), written for TensorBoard and Perfetto.

Each rank records one window (skip_first, wait, warmup, active steps; ``repeat=1``) and writes
``<out_dir>/rank<N>.<milliseconds>.pt.trace.json``. The torch-tb-profiler plugin treats every directory holding
``*.pt.trace.json`` files as a run (so ``results/<run>/traces/<cell>/`` is one run per cell) and derives the
worker from the file name with ``^(.*?)(\\.\\d+)?\\.pt\\.trace\\.json(\\.gz)?$`` (torch_tb_profiler/consts.py
WORKER_PATTERN): worker ``rank<N>``, span ``<milliseconds>``. The part after ``rank<N>`` must be all digits, or
it becomes part of the worker name.

The DataLoader fix (:func:`fix_dataloader_events`): the plugin's step-time breakdown counts as "DataLoader" the
X events named ``enumerate(DataLoader)#<iterator>.__next__`` (or ``enumerate(DataPipe)#...``)
(profiler/event_parser.py, StepParser._parse_step). Current PyTorch records them with ``cat:
"user_annotation"``, and torch-tb-profiler 0.4.3 drops every user_annotation event at creation except
``ProfilerStep#N`` and gloo/nccl collectives (profiler/trace.py, create_trace_event), so DataLoader time shows
as 0. Re-labelling exactly those events ``cat: "cpu_op"`` (what the plugin's EventTypeMap reads as an operator,
as PyTorch used to record them) makes the plugin count them; nothing else changes, and the file stays valid
Chrome trace JSON (``cat`` is a free-form string), so Perfetto and chrome://tracing still open it.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule


def is_dataloader_event(event: dict) -> bool:
    """The DataLoader-iteration events the plugin's step breakdown matches (by name, as its parser does)."""
    name = event.get("name") or ""
    return (name.startswith("enumerate(DataLoader)#") and name.endswith(".__next__")) \
        or name.startswith("enumerate(DataPipe)#")


def fix_dataloader_events(path: Path | str) -> int:
    """Re-label the trace's DataLoader-iteration events from ``user_annotation`` to ``cpu_op`` in place, so
    torch-tb-profiler counts them as DataLoader time. Returns the number of events changed (0 when the trace
    already uses ``cpu_op``, as older PyTorch did; running it twice changes nothing)."""
    path = Path(path)
    with path.open() as f:
        trace = json.load(f)
    changed = 0
    for event in trace.get("traceEvents", []):
        if event.get("ph") == "X" and event.get("cat") == "user_annotation" and is_dataloader_event(event):
            event["cat"] = "cpu_op"
            changed += 1
    if changed:
        tmp = path.with_name(path.name + ".tmp")
        with tmp.open("w") as f:
            json.dump(trace, f)
        os.replace(tmp, path)
    return changed


class CellProfiler:
    """torch.profiler around one cell on one rank; call :meth:`step` once per training step.

    With ``out_dir=None`` nothing is profiled and :meth:`step` is a no-op (one attribute test). The window
    is ``skip_first`` steps (e.g. the harness's warm-up steps), ``wait`` untraced steps, ``warmup`` traced but
    discarded steps, then ``active`` recorded steps; a loop that ends inside the active part still writes
    the steps it recorded.
    """

    def __init__(self, out_dir: Path | str | None, rank: int, wait: int = 1, warmup: int = 1, active: int = 3,
                 skip_first: int = 0):
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.rank = rank
        self.trace_paths: list[Path] = []
        self._prof = None
        if self.out_dir is None:
            return
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        self._prof = profile(
            activities=activities,
            schedule=schedule(skip_first=skip_first, wait=wait, warmup=warmup, active=active, repeat=1),
            on_trace_ready=self._write_trace,
            record_shapes=False, profile_memory=True, with_stack=False,
        )

    def __enter__(self) -> CellProfiler:
        if self._prof is not None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            self._prof.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._prof is not None:
            self._prof.__exit__(*exc)

    def step(self) -> None:
        """Mark the end of one training step (the profiler's ProfilerStep#N ranges)."""
        if self._prof is not None:
            self._prof.step()

    def _write_trace(self, prof: profile) -> None:
        """Export under a name the plugin ignores, fix it, then rename: TensorBoard never sees a raw trace."""
        path = self.out_dir / f"rank{self.rank}.{time.time_ns() // 1_000_000}.pt.trace.json"
        tmp = path.with_name(path.name + ".raw")
        prof.export_chrome_trace(str(tmp))
        fix_dataloader_events(tmp)
        os.replace(tmp, path)
        self.trace_paths.append(path)

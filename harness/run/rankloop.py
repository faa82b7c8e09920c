"""Every cell of a run on one rank, in the already-joined process group.

Repeats interleave across cells (A B C A B C) so that machine drift spreads evenly. Rank 0 records
the machine probe once per repeat while the others wait; after each cell the ranks gather their
records to rank 0, which appends the cell's line to cells.jsonl at once (nothing measured is lost
if a later cell dies). Around a [remote] scenario each visit's reader is told the run's counters
folder (LaunchConfig.remote_counters, read through the RankContext) and the line gets the visit's
remote figures over its window (harness.measure.remotecounters).
"""
from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import torch.distributed as dist

from harness.analysis import budget
from harness.analysis.sequential import Rule
from harness.config.launchconfig import LaunchConfig, visit_order
from harness.config.matrix import Cell
from harness.data.materialise import verify_dir
from harness.measure import remotecounters
from harness.measure.hostload import HostLoad
from harness.measure.profiling import CellProfiler
from harness.progress import Progress
from harness.results import cellresult, rundir
from harness.run import budgetstate, probe, supervisor
from harness.train.trainloop import RankContext, run_cell

HEARTBEAT_S = 1.0


class StepProgress:
    """The per-step progress callback of a cell: a new bar whenever a phase starts again at step
    1."""

    def __init__(self, stream=None):
        self.stream = stream if stream is not None else sys.stderr
        self.bar: Progress | None = None

    def __call__(self, step: int, total: int) -> None:
        if self.bar is None or step == 1:
            self.close()
            self.bar = Progress("    step", total, self.stream, bar_width=0)
        self.bar.update(step)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class Heartbeat:
    """Per-step callback of a supervised rank: the rank's heartbeat file (harness.run.supervisor)
    at most every HEARTBEAT_S, passed on to the progress bar when there is one."""

    def __init__(self, run_dir: Path, rank: int, position: int, cell_id: str, bar=None):
        self.run_dir, self.rank, self.bar = run_dir, rank, bar
        self.fields = {"position": position, "cell": cell_id, "cell_t": time.time(), "step": 0}
        self.last = 0.0
        self.beat(0, 0)

    def beat(self, step: int, total: int) -> None:
        self.fields.update(step=step, total=total)
        self.last = time.monotonic()
        supervisor.write_heartbeat(self.run_dir, self.rank, **self.fields)

    def __call__(self, step: int, total: int) -> None:
        if self.bar is not None:
            self.bar(step, total)
        if time.monotonic() - self.last >= HEARTBEAT_S or step == total:
            self.beat(step, total)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_all(ctx: RankContext) -> None:
    """The planned visits (with those of a budget pass cut short first: harness.run.budgetstate),
    then (with a budget) further passes while the answer is open and time is left. `ctx`: this rank
    (harness.run.launch), with the launch it belongs to (ctx.config); ctx.host_group is the gloo
    group the ranks wait on while one of them does host work."""
    rank, config = ctx.rank, ctx.config
    began = config.started_at or time.time()
    plan = config.todo()
    verified: set[Path] = set()
    for i, (repeat, index) in enumerate(plan):
        first_of_repeat = i == 0 or plan[i - 1][0] != repeat
        visit(ctx, verified, (repeat, index), first_of_repeat, (i, f"{i + 1}/{len(plan)}"))
        _clock(rank, config, began)
    position = len(plan)
    while config.budget_s:
        decided = [next_pass(config, began) if rank == 0 else None]
        dist.broadcast_object_list(decided, src=0)  # rank 0 decides; every rank runs the same pass
        repeat, todo = decided[0]
        if not todo:
            break
        for k, index in enumerate(todo):
            label = f"budget pass {repeat + 1}, {k + 1}/{len(todo)}"
            visit(ctx, verified, (repeat, index), k == 0, (position, label))
            position += 1
            _clock(rank, config, began)


def next_pass(config: LaunchConfig, began: float) -> tuple[int, list[int]]:
    """Rank 0: the next budget pass (its repeat number, the cell indices in visiting order),
    recorded in the run's budget state before any visit; (repeat, []) when the budget ends, which
    is recorded too."""
    results = rundir.read_results(config.run_dir)
    gate = config.request.gate
    repeat = max([config.request.repeats, *(r.repeat + 1 for r in results)])
    cell_ids = [c.id for c in config.cells]
    left = config.budget_s - (time.time() - began)
    rule = Rule(gate.min_effect, gate.family_alpha, config.run_cpus, config.budget_s)
    picked = budget.next_pass(results, cell_ids, left, rule)
    state = budgetstate.BudgetState(config.budget_s, round(time.time() - began, 3))
    if not picked:
        print(budget.ending(results, cell_ids, left, repeat, rule), file=sys.stderr, flush=True)
        budgetstate.write(config.run_dir, dataclasses.replace(state, ended=True))
        return repeat, []
    todo = [picked[j] for j in visit_order(len(picked), repeat, config.request.order, config.request.order_seed)]
    budgetstate.write(config.run_dir, dataclasses.replace(state, repeat=repeat,
                                                          cells=tuple(cell_ids[i] for i in todo)))
    return repeat, todo


def _clock(rank: int, config: LaunchConfig, began: float) -> None:
    """Rank 0 of a budgeted run, after a visit: the budget's clock recorded (a resume goes on from
    it)."""
    if rank == 0 and config.budget_s:
        budgetstate.note_spent(config, time.time() - began)


def visit(ctx: RankContext, verified: set[Path], item: tuple[int, int], first_of_repeat: bool,
          where: tuple[int, str]) -> None:
    """One visit of one cell on this rank (the machine probe first when a repeat begins). `where`:
    the visit's position in the run (the heartbeat's) and its progress label."""
    position, label = where
    repeat, index = item
    rank, config, data_paths = ctx.rank, ctx.config, ctx.data_paths
    cell = config.cells[index]
    if first_of_repeat:  # the machine probe, once per repeat, while the others wait
        if rank == 0 and repeat not in _probed(config.run_dir):
            rundir.append_probe(config.run_dir, probe.measure(config.scenario, repeat))
        dist.barrier(group=ctx.host_group)
    storage = cell.choice("storage")
    started = time.perf_counter()
    if data_paths[storage.label] not in verified:  # sizes and sampled checksums: nothing runs on bad data
        verify_dir(data_paths[storage.label], storage.name)  # (once per storage and rank, not per visit)
        verified.add(data_paths[storage.label])
    show = config.progress and rank == 0
    if show:
        print(f"[{label}] {cell.id} ...", file=sys.stderr, flush=True)
    run_one(ctx, cell, repeat, show, position=position, started=started)


def _probed(run_dir: Path) -> set[int]:
    return {int(p.get("repeat", 0)) for p in rundir.read_lines(Path(run_dir) / "probe.jsonl")}


def _profiler(config: LaunchConfig, cell: Cell, rank: int, repeat: int) -> CellProfiler | None:
    if not config.request.profile or repeat != 0:
        return None
    return CellProfiler(config.run_dir / "traces" / cell.id.replace("/", "_"), rank,
                        skip_first=config.scenario.training.warmup_steps)


def run_one(ctx: RankContext, cell: Cell, repeat: int, show: bool, position: int = 0,
            started: float | None = None) -> None:
    """One cell on this rank; rank 0 gathers every rank's record and appends the cell's line.
    `started`: when the visit began (its data check included); the line's elapsed_s runs from there
    to the gather."""
    config = ctx.config
    started = time.perf_counter() if started is None else started
    checked = time.perf_counter()
    load = HostLoad() if ctx.rank == 0 else None  # the host's CPU used outside the run during the visit
    if load is not None:
        load.start()
    progress = StepProgress() if show and sys.stderr.isatty() else None  # a log gets the summary line
    if config.supervised:
        progress = Heartbeat(config.run_dir, ctx.rank, position, cell.id, progress)
    ctx.progress = progress
    profiler = _profiler(config, cell, ctx.rank, repeat)
    try:
        record = run_cell(ctx, cell, profiler=profiler)
    finally:
        if progress is not None:
            progress.close()
    if profiler is not None and profiler.kernel_busy:  # the profiled steps' kernel-busy time, for kernel AU
        record.kernel_busy_s = sum(b for b, _ in profiler.kernel_busy.values()) / 1e6
        record.kernel_span_s = sum(s for _, s in profiler.kernel_busy.values()) / 1e6
    record.setup_s = {"verify": round(checked - started, 4), **record.setup_s}
    gathered = [None] * ctx.world_size if ctx.rank == 0 else None
    t_gather = time.perf_counter()
    dist.gather_object(record, gathered, dst=0)
    if ctx.rank == 0:
        gathered[0].setup_s["gather"] = round(time.perf_counter() - t_gather, 4)
    if ctx.rank == 0:
        line = cellresult.cell_line(config.scenario, cell, config.device_name or ctx.device.name,
                                    config.device != "cuda", gathered, time.perf_counter() - started, repeat,
                                    outside=load.stop(),
                                    remote=remotecounters.of_visit(config.remote_counters, gathered))
        rundir.append_cell(config.run_dir, line)
        if show:
            print(cellresult.summary_text(line), file=sys.stderr, flush=True)

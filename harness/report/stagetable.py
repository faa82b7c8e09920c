"""The loader's per-stage profile per cell (a table and plots/stages.png, a stacked bar per cell),
and with a target (harness.config.target) what each cell would do there: samples/s, AU, stall, what
binds, the workers per rank that make the device bind, the accelerators a node keeps at AU >= 90%
and the configuration to use (harness.analysis.targetmodel, harness.analysis.recommend).
docs/stage-profile.md, docs/prediction.md.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.analysis import stages
from harness.analysis.recommend import recommend
from harness.analysis.targetmodel import capacity, predict
from harness.config.accelerators import get_accelerator
from harness.config.target import Target
from harness.measure.rankrecord import STAGES
from harness.report.tables import Table, fmt, shown_axes, stack_label
from harness.results.cellresult import CellResult
from harness.results.repeats import CellSummary, merge_repeats
from strategies import registry

STAGE_COLOURS = {"read": "#8c564b", "cache": "#e377c2", "decode": "#1f77b4", "transform": "#17becf",
                 "collate": "#2ca02c", "send": "#ff7f0e", "queue": "#bcbd22", "receive": "#d62728",
                 "untimed": "#c7c7c7"}


def _shown(results: list[CellResult]) -> tuple[list[CellSummary], list[str]]:
    cells = [c for c in merge_repeats(results) if c.measured]
    axes = shown_axes(cells) if cells else []
    return cells, [stack_label(cells, c, axes) for c in cells]


def _ms(seconds: float | None) -> str:
    return fmt(None if seconds is None else seconds * 1e3, ".3f")


def stage_table(results: list[CellResult]) -> Table:
    """ms of CPU per sample of each timed stage, the loader's CPU no timer covers (untimed), h2d
    (wall ms per sample), the timed loader stages' sum, the loader's /proc CPU and how much of it
    the timed stages cover."""
    cells, labels = _shown(results)
    rows = []
    for cell, label in zip(cells, labels):
        prof = stages.profile(cell.ranks)
        if prof is None:
            continue
        ms = prof.per_sample
        rows.append([label, *(_ms(ms[s]) for s in STAGES), _ms(prof.untimed_s), _ms(ms["h2d"]),
                     _ms(prof.loader_s), _ms(prof.proc_loader_s),
                     fmt(None if prof.coverage is None else 100 * prof.coverage, ".0f"),
                     fmt(cell.figures.decode_limit_ratio, ".2f")])
    return Table("Loader stages (ms of CPU per sample, where each runs; docs/stage-profile.md)",
                 ["cell", *STAGES, "untimed", "h2d", "timed", "/proc", "of /proc %", "x decode"], rows,
                 ["each stage timed where it runs; timed: the loader's stages (all but receive, which runs in "
                  "the rank); /proc: the loader's CPU per sample read from /proc over the same window; "
                  "untimed: /proc less timed (no timer covers it); of /proc %: timed over /proc; h2d: wall ms "
                  "per sample; x decode: the decode limit ratio, /proc over decode alone (1.00: the loader costs "
                  "what decoding costs)"])


def stage_plot(results: list[CellResult], path: Path) -> Path | None:
    """plots/stages.png: one stacked bar per cell, its stages in ms of CPU per sample, then its
    untimed share (the loader's /proc CPU less its timed stages, where positive)."""
    from harness.report.plots import _save, new_figure

    cells, labels = _shown(results)
    profiles = [(label, stages.profile(c.ranks)) for c, label in zip(cells, labels)]
    profiles = [(label, p) for label, p in profiles if p is not None]
    if not profiles:
        return None
    fig = new_figure(len(profiles))
    ax = fig.add_subplot()
    ax.set_yticks(range(len(profiles)), [label for label, _ in profiles], fontsize=8)
    ax.set_ylim(len(profiles) - 0.5, -0.5)
    ax.set_title("The loader's stages per sample (CPU, where each runs)", fontsize=10)
    ax.set_xlabel("ms of CPU per sample", fontsize=9)
    left = np.zeros(len(profiles))
    for stage in STAGES:
        widths = np.array([p.per_sample[stage] * 1e3 for _, p in profiles])
        ax.barh(range(len(profiles)), widths, left=left, height=0.7, color=STAGE_COLOURS[stage], label=stage)
        left += widths
    untimed = np.array([max(0.0, p.untimed_s or 0.0) * 1e3 for _, p in profiles])
    if untimed.any():  # the loader's /proc CPU that no stage's timer covers, hatched beside the stages
        ax.barh(range(len(profiles)), untimed, left=left, height=0.7, color=STAGE_COLOURS["untimed"],
                hatch="//", edgecolor="#7f7f7f", linewidth=0, label="untimed (/proc less timed)")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.6 / fig.get_figheight()), ncol=5,
              frameon=False)
    return _save(fig, Path(path))


def target_costs(cell: CellResult, target: Target):
    """The target model's costs of a cell (a summary or one visit), carried to the target's host
    (stages.for_target: nothing this host's load moves); None without the figures it needs."""
    real_same = not cell.emulated and target.accelerator and target.accelerator in str(cell.device or "")
    workload = cell.workload or "pixels"
    measured = stages.costs(cell.ranks, cell.figures, workload, measured_device=bool(real_same),
                            requests_per_sample=stages.requests_per_sample(cell.name("storage"), workload),
                            in_flight=in_flight(cell))
    return stages.for_target(measured, cell.ranks) if measured is not None else None


def in_flight(cell) -> int:
    """The read requests a worker of the cell keeps in flight: its storage's `in_flight` (a remote
    storage's, its default included), else 1 (local files, or a storage this installation cannot
    build)."""
    try:
        storage = registry.create("storage", cell.name("storage"), **cell.params.get("storage", {}))
    except Exception:  # a plugin not installed here, or parameters of another version: the serial model
        return 1
    return int(getattr(storage, "in_flight", 1))


def target_table(results: list[CellResult], target: Target) -> Table:
    """Per cell, its prediction on the target and the configuration to use."""
    accelerator = get_accelerator(target.accelerator)
    cells, labels = _shown(results)
    rows = []
    for cell, label in zip(cells, labels):
        costs = target_costs(cell, target)
        if costs is None:
            continue
        p = predict(costs, target, accelerator)
        rows.append([label, fmt(p.samples_per_s, ".0f"), fmt(p.au_pct, ".0f"), fmt(p.stall_pct, ".0f"), p.binds,
                     fmt(p.workers_for_device, "d") if p.workers_for_device else "none",
                     str(capacity(costs, target, accelerator, most=64)),
                     recommend(costs, target, accelerator).text()])
    return Table(f"On the target (modelled): {target.describe().removeprefix('TARGET: ')}",
                 ["cell", "samples/s", "AU %", "stall %", "binds", "workers for device",
                  f"{accelerator.name} at AU>=90%", "configuration to use"], rows,
                 ["modelled from each cell's measured stage costs and the accelerator catalogue "
                  "(docs/prediction.md); workers for device: the fewest workers per rank at which the device "
                  "binds (none: cores, storage or the rank's own host work bind first); at AU>=90%: "
                  "accelerators per node the node keeps at AU >= 90% (MLPerf Storage's measure)",
                  "not measured by a run, so defaults: " + "; ".join(stages.RUN_DEFAULTS)
                  + " (check-predictions measures the first two on its host, docs/prediction.md)"])


def tables(results: list[CellResult], target: Target | None) -> list[Table]:
    """The tables for a report: the stages, and with a target the predictions."""
    out = [stage_table(results)]
    if target is not None:
        out.append(target_table(results, target))
    return out

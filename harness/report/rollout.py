"""ROLL OUT, the line after FASTEST: the configuration to use on the target hardware (the run's
[target] or --target, else a stated host for the scenario's accelerators), predicted from each
visit's measured costs (harness.analysis.targetmodel: modelled, never measured there; the costs
carried there by harness.analysis.stages.for_target, CPU seconds and bytes that this host's load
does not move), with a prediction interval (the visits' spread and the model's own measured error),
what binds there and, where the device binds, what takes the rest of its time, and which of the
cells tied here stay tied there."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from harness.analysis.predictioninterval import LEVEL, MODEL_ERROR_SD, target_interval
from harness.analysis.recommend import Recommendation, recommend
from harness.config.accelerators import get_accelerator
from harness.config.target import Target
from harness.report.ordercost import TOLERANCE, cost_text, order_costs
from harness.report.stagetable import target_costs
from harness.report.tables import shown_axes, stack_label
from harness.results.cellresult import CellResult
from harness.results.repeats import CellSummary

CORES_PER_ACCELERATOR = 8  # the stated host: 8 cores per accelerator (AWS p3.8xlarge: 4 V100-16GB, 32 vCPUs)
SHOWN = 3  # cells named per group


@dataclass(frozen=True)
class Predicted:
    """A cell on the target with the configuration recommended for it: one prediction per measured
    visit."""

    cell: CellSummary
    samples_per_s: list[float]
    au_pct: list[float]
    advice: Recommendation  # from the cell's merged costs

    @property
    def middle(self) -> float:
        return statistics.median(self.samples_per_s)

    def settings(self) -> str:
        a = self.advice
        return ", ".join([f"workers {a.workers}", f"prefetch {a.prefetch}", f"preprocess {a.preprocess}"]
                         + ([a.decoder] if a.decoder != "keep" else []))


def stated_host(cell: CellSummary) -> Target | None:
    """One node of the run's own accelerators and rank count, CORES_PER_ACCELERATOR cores each,
    storage unlimited, page cache warm, the run's workers and batch size."""
    accelerator = str(cell.device or "").removesuffix(" (emulated)")
    ranks = cell.world_size or cell.figures.ranks
    if not accelerator or not ranks:
        return None
    workers = min((r.workers for r in cell.ranks), default=1)
    return Target(gpus_per_node=int(ranks), cores_per_node=float(CORES_PER_ACCELERATOR * ranks),
                  accelerator=accelerator, workers_per_rank=workers, batch_size=cell.batch_size or 32,
                  name=f"(a stated host: {CORES_PER_ACCELERATOR} cores per accelerator; [target] sets yours)")


def predicted(cell: CellSummary, visits: list[CellResult], target: Target) -> Predicted | None:
    """Each visit's costs on the target with the configuration recommended for that visit."""
    accelerator = get_accelerator(target.accelerator)
    shots = [recommend(costs, target, accelerator) for v in visits
             if (costs := target_costs(v, target)) is not None]
    merged = target_costs(cell, target)
    if not shots or merged is None:
        return None
    return Predicted(cell, [r.samples_per_s for r in shots], [r.au_pct for r in shots],
                     recommend(merged, target, accelerator))


def _band(values: list[float], unit: str, most: float = math.inf) -> str:
    """The visits' median and its LEVEL prediction interval (predictioninterval.target_interval),
    at most `most`."""
    band = target_interval(values)
    return f"{min(band.middle, most):.0f}{unit} [{min(band.low, most):.0f}, {min(band.high, most):.0f}]"


def _interval_note(values: list[float]) -> str:
    """What the interval holds: the visits' spread and the model's measured error."""
    visits = f"{len(values)} visits' spread" if len(values) > 1 else "one visit (no spread measured)"
    return (f"{LEVEL:.0%} prediction interval: {visits} and the model's own error, sd {MODEL_ERROR_SD:.0%} as "
            "check-predictions measured it")


def _rest(p: Predicted) -> str:
    """What binds, and where the device binds, what takes the rest of its time (the step's path
    beside the device, the wait for the slowest rank)."""
    a = p.advice
    if a.next_limit != "device":
        why = "; more workers do not help" if a.workers_capped else ""
        return f"then {a.next_limit} binds{why}"
    if a.au_pct >= 99.5:
        return "then device binds"
    return (f"then device binds (the rest of its time: {a.path_pct:.0f}% the step's path beside it, "
            f"{a.imbalance_pct:.0f}% waiting for the slowest rank)")


def _tied_there(best: Predicted, other: Predicted, min_effect: float) -> bool:
    """Tied on the target: the visits' ranges overlap, or the middles are within the minimum
    effect."""
    overlap = min(other.samples_per_s) <= max(best.samples_per_s) and min(best.samples_per_s) <= max(
        other.samples_per_s)
    return overlap or best.middle <= other.middle * (1 + min_effect)


def _names(cells: list[CellSummary], shown: list[Predicted], axes: list[str]) -> str:
    names = ", ".join(stack_label(cells, p.cell, axes) for p in shown[:SHOWN])
    return names + (f" and {len(shown) - SHOWN} more" if len(shown) > SHOWN else "")


def rollout_lines(cells: list[CellSummary], results: list[CellResult], tied_here: list[CellSummary],
                  target: Target | None, min_effect: float, tolerance: float = TOLERANCE) -> list[str]:
    """The ROLL OUT line and what becomes of the cells tied here; `tied_here`: the leader and its
    ties. The fastest cell there whose order is within `tolerance` of a shuffle's
    (harness.report.ordercost); a faster one passed over for its order is named."""
    measured = [c for c in cells if c.measured]
    target = target or (stated_host(measured[0]) if measured else None)
    if target is None:
        return ["ROLL OUT: no prediction (no cell measured its costs, or its accelerator is unknown)"]
    found = [p for c in measured if (p := predicted(c, [r for r in results if r.cell == c.cell and r.measured],
                                                    target)) is not None]
    if not found:
        return [f"ROLL OUT on {_where(target)}: no prediction (no cell recorded the costs the model needs)"]
    axes = shown_axes(measured)
    fastest = max(found, key=lambda p: p.middle)
    random_enough = [p for p in found if not order_costs(p.cell, tolerance)]
    best = max(random_enough, key=lambda p: p.middle) if random_enough else fastest
    lines = [f"ROLL OUT on {_where(target)}: {stack_label(measured, best.cell, axes)} with {best.settings()}: "
             f"{_band(best.samples_per_s, ' samples/s')}, AU {_band(best.au_pct, '%', 100.0)}, {_rest(best)} "
             f"(modelled from this run's CPU and bytes per sample; {_interval_note(best.samples_per_s)})"]
    if costs := order_costs(best.cell, tolerance):  # every cell's order costs something
        lines.append(f"  its order: {cost_text(costs, tolerance)}; no cell's order is within it")
    elif fastest is not best:
        lines.append(f"  passed over: {stack_label(measured, fastest.cell, axes)}, about "
                     f"{fastest.middle / best.middle:.2f}x faster there, for its order: "
                     f"{cost_text(order_costs(fastest.cell, tolerance), tolerance)}")
    here = [p for p in found if any(p.cell.cell == t.cell for t in tied_here) and p is not best]
    stay = [p for p in here if _tied_there(best, p, min_effect)]
    apart = [p for p in here if p not in stay]
    if here:
        lines.append(f"  of the {len(here)} other cells in the fastest set here: {len(stay)} stay tied with it "
                     f"there{': ' + _names(measured, stay, axes) if stay else ''}; {len(apart)} fall more than "
                     f"{min_effect:.0%} behind it"
                     f"{': ' + _names(measured, apart, axes) if apart else ''}")
    return lines


def _where(target: Target) -> str:
    return (f"{target.nodes} node(s) x {target.gpus_per_node} {target.accelerator}, {target.cores_per_node:g} "
            f"cores per node {target.name}".rstrip())

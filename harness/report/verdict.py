"""The answer first: the first lines of a run's output and of report.md.

- the fastest configurations: the leader and every cell whose throughput interval overlaps the leader's (the
  set the data cannot tell apart at the intervals' level), then the configuration to roll out on the target;
- each choice's effect on throughput with its interval (harness.report.effecttables), decided or not;
- what binds: the device (AU high), the host's CPU (the loader and the rank need more cores than the host
  has), the data (a stall with the CPU to spare), with the cores needed when the host cannot feed the
  emulated devices.
"""
from __future__ import annotations

import math
import statistics

from harness.analysis.effects import HIGHER, IDENTICAL, LOWER, MIN_EFFECT, NO_EFFECT, OPEN, Effect
from harness.analysis.intervals import leader_and_tied
from harness.analysis.loaddependence import LoadDependence
from harness.report.effecttables import verdict_word
from harness.report.ordercost import TOLERANCE, cost_text, order_costs
from harness.report.tables import interval, shown_axes, stack_label
from harness.results.repeats import CellSummary

DEVICE_BOUND_AU_PCT = 80.0  # a median AU at least this high: the device is what limits the run
SHOWN_TIED = 4  # tied cells named in the verdict (the rest are counted)


def fastest_lines(cells: list[CellSummary], tolerance: float = TOLERANCE) -> list[str]:
    """FASTEST and its ties; the leader's order cost where it is less random than a shuffle beyond `tolerance`
    (harness.report.ordercost)."""
    leader, tied = leader_and_tied(cells)
    if leader is None:
        return ["FASTEST: no cell was measured"]
    measured = [c for c in cells if c.measured]
    axes = shown_axes(cells)

    def name(c: CellSummary) -> str:
        return stack_label(cells, c, axes)

    lead = interval(leader)
    shown = ", ".join(name(c) for c in tied[:SHOWN_TIED]) + (
        f" and {len(tied) - SHOWN_TIED} more" if len(tied) > SHOWN_TIED else "")
    band = f" [{lead.low:.0f}, {lead.high:.0f}] ({lead.label})" if lead else ""
    lines = [f"FASTEST: {name(leader)} at {leader.figures.throughput:.0f} samples/s{band}"]
    if costs := order_costs(leader, tolerance):
        lines.append(f"  its order: {cost_text(costs, tolerance)}")
    lines.append(f"  tied with it (intervals overlap): {len(tied)} of {len(measured) - 1} other cells"
                 + (f": {shown}" if tied else ""))
    return lines


Z_95, Z_POWER = 1.96, 0.8416  # two-sided 95% and one-sided 80% (the power of the projection) normal quantiles


def passes_to_decide(e: Effect, passes: int, min_effect: float = MIN_EFFECT) -> int | None:
    """About how many whole passes in all would decide the effect with 80% power, assuming the true effect is
    today's estimate and the interval narrows as one over the square root of the passes: towards higher /
    lower when the estimate is at least half the minimum effect away from x1, else towards "no effect larger
    than m". None when there is nothing to project (a zero-width interval, or no pass yet)."""
    half = (math.log(e.high) - math.log(e.low)) / 2
    if half <= 0 or passes < 1:
        return None
    se = half / Z_95
    distance, margin = abs(math.log(e.ratio)), math.log(1 + min_effect)
    room = distance if distance >= margin / 2 else margin - distance
    return max(passes + 1, math.ceil(passes * ((Z_95 + Z_POWER) * se / room) ** 2))


def effect_lines(effects: list[Effect], passes: int = 1, min_effect: float = MIN_EFFECT) -> list[str]:
    """The effects on samples/s and their decisions; `passes`: the whole passes over the cells so far."""
    shown = [e for e in effects if e.figure == "throughput" and e.kind == "main" and e.level != e.reference]
    if not shown:
        return ["EFFECTS: too few visits to fit the effect of each choice (run with --repeats 3 or more)"]
    lines = ["EFFECTS on samples/s (ratio against the axis's first level, 95% interval, all cells and visits):"]
    words = [e.decision(min_effect, passes) for e in shown]
    for e, word in zip(shown, words):
        more = ""
        if word == OPEN and e.decision(min_effect) != OPEN:  # decided, were it not one pass
            more = (f" (decided {verdict_word(e, min_effect)} on {passes} pass, but one pass's interval misses "
                    f"what changes from run to run: a decision waits for a second pass, --repeats 2 or --budget)")
        elif word == OPEN:
            need = passes_to_decide(e, passes, min_effect)
            more = (f" (about {need} whole passes in all would decide it with 80% power if the true effect is "
                    f"x{e.ratio:.2f}; {passes} so far)" if need is not None else "")
        lines.append(f"  {e.axis}={e.level} vs {e.reference}: x{e.ratio:.2f} [{e.low:.2f}, {e.high:.2f}] "
                     f"{verdict_word(e, min_effect, passes)}{more}")
    decided = sum(w in (HIGHER, LOWER, NO_EFFECT) for w in words)
    same = sum(w == IDENTICAL for w in words)
    lines.append(f"  decided: {decided} of {len(shown) - same} (higher, lower, or no effect larger than "
                 f"{min_effect:.0%}; open: more visits narrow it)"
                 + (f"; {same} identical in every cell" if same else ""))
    return lines


def binds_line(cells: list[CellSummary], cpu_count: float | None) -> str:
    """What limits the run; `cpu_count`: the CPUs the run had (its allowance: affinity and cgroup quota)."""
    measured = [c for c in cells if c.measured]
    if not measured:
        return "BINDS: nothing measured"
    au = statistics.median(c.figures.au_pct or 0.0 for c in measured)
    stall = statistics.median(c.figures.stall_mean_pct or 0.0 for c in measured)
    feed = [c.figures.cores_to_feed for c in measured if c.figures.cores_to_feed is not None]
    ranks = measured[0].world_size or 1
    if au >= DEVICE_BOUND_AU_PCT:
        return f"BINDS: the device (median AU {au:.0f}%)"
    if feed and cpu_count and statistics.median(feed) * ranks > cpu_count:
        need = statistics.median(feed)
        return (f"BINDS: the host's CPU: feeding the device needs {need:.1f} cores per rank (median over cells), "
                f"{need * ranks:.0f} for {ranks} ranks, and this run has {cpu_count:g} (median AU {au:.0f}%, "
                f"stall {stall:.0f}%)")
    return f"BINDS: the data path (median stall {stall:.0f}% with cores to spare; AU {au:.0f}%)"


def verdict_lines(cells: list[CellSummary], effects: list[Effect], cpu_count: int | None,
                  passes: int = 1, min_effect: float = MIN_EFFECT, rollout: list[str] | None = None,
                  load: list[LoadDependence] | None = None, tolerance: float = TOLERANCE) -> list[str]:
    """FASTEST, then `rollout` (harness.report.rollout: the configuration to use on the target), EFFECTS with
    each effect that depends on the outside load (`load`, harness.analysis.loaddependence), BINDS."""
    return (fastest_lines(cells, tolerance) + (rollout or []) + effect_lines(effects, passes, min_effect)
            + [d.line() for d in load or []] + [binds_line(cells, cpu_count)])

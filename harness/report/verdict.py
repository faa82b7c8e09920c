"""The answer first: the first lines of a run's output and of report.md.

- the fastest configurations: the leader (the highest cell median: biased upward) and every cell
  whose range over its visits overlaps the leader's (a description, not a test), then the
  configuration to roll out;
- each choice's decision by the budget's stopping rule (harness.analysis.sequential), on the
  response that decided (the host rate where the host's CPU binds, else samples/s), with samples/s
  beside it;
- what binds: the device (AU high), the host's CPU (the loader and the rank need more cores than
  the host has), the data (a stall with the CPU to spare), with the cores needed when the host
  cannot feed the emulated devices.
"""
from __future__ import annotations

import math
import statistics

from harness.analysis.effects import (
    HIGHER,
    HOST_RATE,
    IDENTICAL,
    LOWER,
    MIN_EFFECT,
    NO_EFFECT,
    OPEN,
    THROUGHPUT,
    Effect,
)
from harness.analysis.loaddependence import LoadDependence
from harness.analysis.sequential import ALPHA, DEVICE_BOUND_AU_PCT, Decision, Decisions, Rule, cpu_binds
from harness.analysis.ties import leader_and_tied
from harness.report.effecttables import verdict_word
from harness.report.ordercost import TOLERANCE, cost_text, order_costs
from harness.report.tables import interval, shown_axes, stack_label
from harness.results.repeats import CellSummary

SHOWN_TIED = 4  # tied cells named in the verdict (the rest are counted)


def fastest_lines(cells: list[CellSummary], tolerance: float = TOLERANCE) -> list[str]:
    """FASTEST and the cells whose range overlaps it; the leader's order cost where it is less
    random than a shuffle beyond `tolerance` (harness.report.ordercost). The leader is the highest
    of the cells' medians: its figure is biased upward (the maximum of noisy medians), and the line
    says so."""
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
    biased = f", the highest of {len(measured)} cell medians: biased upward" if len(measured) > 1 else ""
    lines = [f"FASTEST: {name(leader)} at {leader.figures.throughput:.0f} samples/s{biased}{band}"]
    if costs := order_costs(leader, tolerance):
        lines.append(f"  its order: {cost_text(costs, tolerance)}")
    what = ("each cell's range over its visits" if lead and lead.label.startswith("min-max")
            else "each cell's interval within its visit")
    lines.append(f"  overlapping it: {len(tied)} of {len(measured) - 1} other cells ({what}; a spread, not a "
                 "test: EFFECTS decides the axes)" + (f": {shown}" if tied else ""))
    return lines


Z_95, Z_POWER = 1.96, 0.8416  # two-sided 95% and one-sided 80% (the power of the projection) normal quantiles
RESPONSE_WORDS = {HOST_RATE: "host rate", THROUGHPUT: "samples/s"}


def passes_to_decide(e: Effect, passes: int, min_effect: float = MIN_EFFECT, z: float = Z_95) -> int | None:
    """About how many whole passes in all would decide the effect with 80% power in a run of one
    look at 95% (--repeats N), assuming the true effect is today's estimate and the interval (at
    boundary `z`) narrows as one over the square root of the passes: towards higher / lower when
    the estimate is at least half the minimum effect away from x1, else towards "no effect larger
    than m". None when there is nothing to project (a zero-width or unbounded interval, or no pass
    yet)."""
    if not (0 < e.low <= e.high < math.inf):
        return None
    half = (math.log(e.high) - math.log(e.low)) / 2
    if half <= 0 or passes < 1:
        return None
    se = half / z
    distance, margin = abs(math.log(e.ratio)), math.log(1 + min_effect)
    room = distance if distance >= margin / 2 else margin - distance
    return max(passes + 1, math.ceil(passes * ((Z_95 + Z_POWER) * se / room) ** 2))


def _figure(e: Effect | None, name: str) -> str:
    if e is None or not (0 < e.low <= e.high < math.inf):
        return f"{name} not estimable yet"
    return f"{name} x{e.ratio:.2f} [{e.low:.2f}, {e.high:.2f}]"


def decision_line(d: Decision, response: str, min_effect: float) -> str:
    """One level: its decision first (the part that survives truncation), then both responses."""
    e = d.effect
    both = _figure(e, RESPONSE_WORDS[response]) + (f", {_figure(d.beside, 'samples/s')}" if d.beside else "")
    head = f"  {e.axis}={e.level} vs {e.reference}: "
    if d.decided:
        return f"{head}{verdict_word(e, min_effect)} (pass {d.passes}): {both}"
    if d.word == IDENTICAL:
        return f"{head}{d.word}"
    need = passes_to_decide(e, d.passes or 0, min_effect, d.z)
    if need is None:
        return f"{head}open: {both}"
    return (f"{head}open; if x{e.ratio:.2f} (the estimate) were the true effect, about {need} whole passes "
            f"(--repeats {need}) would decide it with 80% power: {both}")


def guarantee(rule: Rule, effects: int) -> str:
    """What the decisions promise, in words (harness.analysis.sequential)."""
    if rule.family_alpha:
        return f"a wrong decision among all {effects} in at most {rule.family_alpha:.0%} of runs"
    return f"each decision wrong in at most {ALPHA:.0%} of runs"


def decision_lines(decisions: Decisions) -> list[str]:
    """EFFECTS from the budget's stopping rule: the response that decided and why, each level, the
    levels whose two responses disagree, and the count."""
    d = decisions
    if not d.levels:
        return ["EFFECTS: too few visits to fit the effect of each choice (run with --repeats 3 or more)"]
    m = d.rule.min_effect
    why = ("cores / CPU s per sample: the host's CPU binds" if d.response == HOST_RATE
           else "the host's CPU does not bind")
    lines = [f"EFFECTS decided on the {RESPONSE_WORDS[d.response]} ({why}), adjusted for outside load and "
             f"the host's speed (reference work timed in each visit); ratio against the axis's first level, "
             f"repeated intervals over {d.looks} of {d.looks_planned} looks "
             f"({guarantee(d.rule, len(d.levels))}):"]
    lines += [decision_line(x, d.response, m) for x in d.levels]
    apart = [x for x in d.levels if x.disagrees]
    if apart:
        lines.append("  the two responses' intervals do not overlap for: "
                     + ", ".join(f"{x.effect.axis}={x.effect.level}" for x in apart)
                     + " (the CPU per sample and the run's share of the CPU moved apart)")
    decided = sum(x.decided for x in d.levels)
    same = sum(x.word == IDENTICAL for x in d.levels)
    last = max((x.passes or 0 for x in d.levels if x.decided), default=0)
    lines.append(f"  decided: {decided} of {len(d.levels) - same}" + (f" by pass {last}" if decided else "")
                 + f" after {d.passes} whole pass(es)" + ("" if d.looks else ": the first look is after pass 2")
                 + f" (higher, lower, or no effect larger than {m:.0%}; each kept once decided)"
                 + (f"; {same} identical in every cell" if same else ""))
    return lines


def effect_lines(effects: list[Effect], passes: int = 1, min_effect: float = MIN_EFFECT) -> list[str]:
    """The effects on samples/s at one look (a run read without its visits, e.g. from a history
    store); `passes`: the whole passes over the cells so far."""
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
            more = (f" (if x{e.ratio:.2f}, the estimate, were the true effect: about {need} whole passes in all "
                    f"would decide it with 80% power; {passes} so far)" if need is not None else "")
        lines.append(f"  {e.axis}={e.level} vs {e.reference}: {verdict_word(e, min_effect, passes)}{more}: "
                     f"x{e.ratio:.2f} [{e.low:.2f}, {e.high:.2f}]")
    decided = sum(w in (HIGHER, LOWER, NO_EFFECT) for w in words)
    same = sum(w == IDENTICAL for w in words)
    lines.append(f"  decided: {decided} of {len(shown) - same} (higher, lower, or no effect larger than "
                 f"{min_effect:.0%}; open: more visits narrow it)"
                 + (f"; {same} identical in every cell" if same else ""))
    return lines


def binds_line(cells: list[CellSummary], cpu_count: float | None) -> str:
    """What limits the run; `cpu_count`: the CPUs the run had (its allowance: affinity and cgroup
    quota)."""
    measured = [c for c in cells if c.measured]
    if not measured:
        return "BINDS: nothing measured"
    au = statistics.median(c.figures.au_pct or 0.0 for c in measured)
    stall = statistics.median(c.figures.stall_mean_pct or 0.0 for c in measured)
    feed = [c.figures.cores_to_feed for c in measured if c.figures.cores_to_feed is not None]
    ranks = measured[0].world_size or 1
    if au >= DEVICE_BOUND_AU_PCT:
        return f"BINDS: the device (median AU {au:.0f}%)"
    if cpu_binds(measured, cpu_count):
        need = statistics.median(feed)
        return (f"BINDS: the host's CPU: feeding the device needs {need:.1f} cores per rank (median over cells), "
                f"{need * ranks:.0f} for {ranks} ranks, and this run has {cpu_count:g} (median AU {au:.0f}%, "
                f"stall {stall:.0f}%)")
    return f"BINDS: the data path (median stall {stall:.0f}% with cores to spare; AU {au:.0f}%)"


def verdict_lines(cells: list[CellSummary], effects: list[Effect], cpu_count: int | None,
                  passes: int = 1, min_effect: float = MIN_EFFECT, rollout: list[str] | None = None,
                  load: list[LoadDependence] | None = None, tolerance: float = TOLERANCE,
                  decisions: Decisions | None = None) -> list[str]:
    """FASTEST, then `rollout` (harness.report.rollout: the configuration to use on the target),
    EFFECTS with each effect that depends on the outside load (`load`,
    harness.analysis.loaddependence), BINDS. EFFECTS are the stopping rule's `decisions`
    (harness.analysis.sequential) when given, else one look at `effects`."""
    said = decision_lines(decisions) if decisions is not None else effect_lines(effects, passes, min_effect)
    return (fastest_lines(cells, tolerance) + (rollout or []) + said
            + [d.line() for d in load or []] + [binds_line(cells, cpu_count)])

"""Pure: each effect decided at repeated looks with its error rate kept (the budget's stopping
rule).

- **Response.** On a host whose CPU binds (`cpu_binds`: the median AU under DEVICE_BOUND_AU_PCT and
  the cores that feeding the devices needs above the run's cores) the decision's response is the
  host rate, cores / CPU s per sample (the loader's and the rank's, as each visit records them): it
  does not move with the share of the CPU the run got. Elsewhere (the device binds, or the data
  path) samples/s is the response. The response is chosen once, at the first look, and kept. Both
  are fitted (harness.analysis.effects, with the visit's `log(1 - other_cpu_pct / 100)` and its
  ranks' reference timings as covariates) and shown side by side.
- **Looks.** At most MAX_LOOKS looks, after whole passes. A budgeted run plans them once its
  first whole pass is timed (`planned_passes`: the passes its budget fits at that pass's cost)
  and spreads them evenly from pass FIRST_LOOK to the last pass that fits, so a small matrix
  whose budget fits 11 passes looks after passes 2, 5, 8 and 11 and its last look holds all the
  budget's information (with looks after passes 2 to 5 only, a 4-cell matrix on the 2-core host
  stopped after 5 passes, 101-134 s of a 300 s budget); where FIRST_LOOK + MAX_LOOKS - 1 passes
  or fewer fit, one look per pass. The plan rests on the pass's time, never on its effects, so
  the boundaries' error rate holds; a run that stops before its plan's last look (the passes took
  longer) has only lost power, and when the budget ends with a look left (`Rule.ended`) its
  last look is taken at the run's end. Without a budget (--repeats N): after passes FIRST_LOOK,
  FIRST_LOOK + 1, ..., the last at the run's end when it ran longer. A budget stops at its last
  look.
- **Boundaries.** Repeated confidence intervals (Jennison and Turnbull): at look k the interval is
  the fit's at the two-sided level of the boundary z_k, with P(some |Z_k| > z_k) = alpha over the
  planned looks (Wang-Tsiatis shape: POCOCK 0.5, a constant z; OBRIEN_FLEMING 0, wide early). Each
  interval is the fit's t-interval at z_k's level. An effect is decided at the first look whose
  interval excludes x1 (higher / lower) or lies inside [1 / (1 + m), 1 + m] (no effect larger than
  m), and kept: the intervals cover the true effect at every look at once with probability 1 -
  alpha, so a decision is wrong with at most alpha. A look whose fit keeps fewer than
  MIN_LOOK_DF residual degrees of freedom decides nothing (its look still counts): there the
  noise is estimated from one residual, and the t-interval's validity rests wholly on its being
  normal (a planted x1.03 slowdown of 4 cells was called "higher" at pass 2 with 1 df).
- **Family.** Default: alpha = 0.05 for each effect (each effect's decision is wrong in at most 5%
  of runs, whatever the looks). `family_alpha`: Bonferroni over the effects, so that any wrong
  decision among all of them happens in at most family_alpha of runs.
- **Extreme load.** Visits above EXTREME_LOAD_PCT outside load or EXTREME_STEAL_PCT steal leave the
  fit (harness.analysis.effects.observations): beyond that the run's share of the CPU is more the
  neighbour's schedule than the covariate's straight line, and steal is not in the covariate at
  all.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from harness.analysis.effects import (
    HIGHER,
    HOST_RATE,
    IDENTICAL,
    LOWER,
    MIN_EFFECT,
    MIN_PASSES,
    NO_EFFECT,
    OPEN,
    THROUGHPUT,
    Effect,
    fit_effects,
    level_order,
    observations,
    pass_sizes,
    residual_fit,
)

FIRST_LOOK = MIN_PASSES  # whole passes at the first look
MAX_LOOKS = 4  # without a budget's plan at passes 2, 3, 4, 5; a budget run stops at its plan's last
ALPHA = 0.05  # each effect's error rate over all its looks, when no family_alpha is asked
POCOCK, OBRIEN_FLEMING = 0.5, 0.0  # Wang-Tsiatis shapes: z_k proportional to (I_k / I_K) ** (shape - 1/2)
SHAPE = POCOCK  # decides earlier than O'Brien-Fleming; the last look's interval is wider
DEVICE_BOUND_AU_PCT = 80.0  # a median AU at least this high: the device is what limits the run
DECIDED = (HIGHER, LOWER, NO_EFFECT)
MIN_LOOK_DF = 2  # a look's fit needs at least this many residual df to decide (see the docstring)


@dataclass(frozen=True)
class Rule:
    """What the decisions take: the smallest effect that matters, the family's alpha (None: ALPHA
    per effect), the run's cores (None: unknown, so samples/s is the response) and its budget
    (None: a run of planned passes, its looks after passes FIRST_LOOK, FIRST_LOOK + 1, ...)."""

    min_effect: float = MIN_EFFECT
    family_alpha: float | None = None
    cores: float | None = None
    budget_s: float | None = None  # a budgeted run's seconds: its looks are spread over the passes that fit
    ended: bool = False  # the budget has ended: a look its plan had left is taken at the run's end

    def alpha_each(self, effects: int) -> float:
        return self.family_alpha / max(effects, 1) if self.family_alpha else ALPHA


def normal_cdf(x):
    """Phi(x) for numbers or arrays (math.erf, elementwise)."""
    return 0.5 * (1.0 + np.vectorize(math.erf)(np.asarray(x, dtype=float) / math.sqrt(2.0)))


def crossing_probability(bounds: tuple[float, ...], info: tuple[float, ...], points: int = 241) -> float:
    """P(|Z_k| >= bounds[k] for some k) for Z_k = S_k / sqrt(I_k), S a Gaussian random walk with
    variance info[k] at look k (numerical integration over the continuation region, look by
    look)."""
    first = bounds[0]
    crossed = 2.0 * (1.0 - float(normal_cdf(first)))
    edge = first * math.sqrt(info[0])
    x = np.linspace(-edge, edge, points)
    step = x[1] - x[0]
    density = np.exp(-x * x / (2 * info[0])) / math.sqrt(2 * math.pi * info[0])
    for k in range(1, len(bounds)):
        sd = math.sqrt(info[k] - info[k - 1])
        edge = bounds[k] * math.sqrt(info[k])
        weights = density * step
        weights[[0, -1]] /= 2  # trapezoid rule
        out = normal_cdf((-edge - x) / sd) + 1.0 - normal_cdf((edge - x) / sd)
        crossed += float(weights @ out)
        y = np.linspace(-edge, edge, points)
        kernel = np.exp(-((y[:, None] - x[None, :]) ** 2) / (2 * sd * sd)) / (sd * math.sqrt(2 * math.pi))
        density, x, step = kernel @ weights, y, y[1] - y[0]
    return crossed


@lru_cache(maxsize=64)
def boundaries(info: tuple[float, ...], alpha: float, shape: float = SHAPE) -> tuple[float, ...]:
    """The two-sided z boundary at each look: z_k = c * (I_k / I_K) ** (shape - 1/2), c such that
    the crossing probability under no effect is alpha (bisection)."""
    scale = [(i / info[-1]) ** (shape - 0.5) for i in info]
    low, high = 0.5, 8.0
    for _ in range(40):
        c = (low + high) / 2
        if crossing_probability(tuple(c * s for s in scale), info) > alpha:
            low = c
        else:
            high = c
    return tuple(high * s for s in scale)


def planned_passes(results: list, ends: list[int], budget_s: float | None) -> int | None:
    """The whole passes a budget fits, planned once from its first whole pass: that pass as it
    went (with the run's start-up in its first visit), then as many more as the rest of the budget
    fits at a pass's steady cost (its visits' median elapsed_s times their count); at least
    FIRST_LOOK. None without a budget or before the first whole pass."""
    first = [r.elapsed_s for r in results if ends and r.repeat <= ends[0] and r.elapsed_s]
    if not budget_s or not first:
        return None
    steady = statistics.median(first) * len(first)
    return max(FIRST_LOOK, 1 + int(max(0.0, budget_s - sum(first)) // steady))


def schedule(plan: int | None = None) -> list[int]:
    """The planned looks' whole passes: without a plan FIRST_LOOK, FIRST_LOOK + 1, ... (MAX_LOOKS
    of them); with one (a budget's passes), MAX_LOOKS at most, spread evenly from FIRST_LOOK to the
    plan's last pass (one a pass where that many do not fit)."""
    if plan is None:
        return list(range(FIRST_LOOK, FIRST_LOOK + MAX_LOOKS))
    last = max(plan, FIRST_LOOK)
    if last - FIRST_LOOK < MAX_LOOKS:
        return list(range(FIRST_LOOK, last + 1))
    step = (last - FIRST_LOOK) / (MAX_LOOKS - 1)
    return sorted({FIRST_LOOK + round(k * step) for k in range(MAX_LOOKS)})


def look_passes(passes: int, plan: int | None = None, ended: bool = False) -> list[int]:
    """The whole-pass counts at which looks are taken in a run of `passes` whole passes; `ended`:
    the budget ended before its plan's last look (its passes took longer than planned), so the
    last look is at the run's end, at the last planned look's boundary (the rule's error rate
    holds: that look has less information than planned, never more)."""
    planned = schedule(plan)
    taken = [p for p in planned if p <= passes]
    if passes > planned[-1]:  # more passes than planned looks (--repeats N): the last look at its end
        taken[-1] = passes
    elif ended and passes >= FIRST_LOOK and taken[-1:] != [passes]:  # fewer than planned[-1]: a look left
        taken.append(passes)
    return taken


def planned_info(passes: int, plan: int | None = None) -> tuple[float, ...]:
    """Every planned look's information (whole passes), the last at the run's end when it ran
    longer."""
    planned = schedule(plan)
    planned[-1] = max(planned[-1], passes)
    return tuple(float(p) for p in planned)


def looks_left(passes: int, plan: int | None = None) -> int:
    return sum(p > passes for p in schedule(plan))


def cpu_binds(cells: list, cores: float | None) -> bool:
    """The host's CPU limits the run: median AU under DEVICE_BOUND_AU_PCT and the median cores to
    feed one rank's device, times the ranks, above `cores` (the run's allowance). False when any is
    unknown."""
    measured = [c for c in cells if c.measured]
    feed = [c.figures.cores_to_feed for c in measured if c.figures.cores_to_feed is not None]
    if not measured or not feed or not cores:
        return False
    au = statistics.median(c.figures.au_pct or 0.0 for c in measured)
    return au < DEVICE_BOUND_AU_PCT and statistics.median(feed) * (measured[0].world_size or 1) > cores


def response_of(results: list, cores: float | None) -> str:
    """HOST_RATE where the host's CPU binds and every visit records its CPU per sample, else
    THROUGHPUT."""
    measured = [r for r in results if r.measured]
    has_cpu = measured and all(r.figures.loader_cpu_s_per_sample is not None
                               and r.figures.rank_cpu_s_per_sample is not None for r in measured)
    return HOST_RATE if has_cpu and cpu_binds(measured, cores) else THROUGHPUT


@dataclass(frozen=True)
class Decision:
    """One level's decision: `word` at `passes` whole passes (the look that decided it, else the
    last), its `effect` on the response there (the repeated interval), and samples/s's at the same
    level."""

    effect: Effect
    word: str
    passes: int | None  # the whole passes of the deciding (or last) look; None before the first look
    beside: Effect | None = None  # the other response's effect at the same look and level, when fitted
    z: float = 1.959964  # the look's boundary: the interval is the fit's at this z's two-sided level

    @property
    def decided(self) -> bool:
        return self.word in DECIDED

    @property
    def disagrees(self) -> bool:
        """The two responses' intervals do not overlap."""
        b = self.beside
        return b is not None and (b.low > self.effect.high or self.effect.low > b.high)


@dataclass(frozen=True)
class Decisions:
    response: str
    levels: list[Decision]
    passes: int  # whole passes so far
    looks: int  # looks taken
    rule: Rule
    plan: int | None = None  # the whole passes the budget fits (planned_passes); None: no budget's plan

    @property
    def looks_planned(self) -> int:
        return len(schedule(self.plan))

    @property
    def looks_left(self) -> int:
        return looks_left(self.passes, self.plan)

    @property
    def open(self) -> list[Decision]:
        return [d for d in self.levels if d.word == OPEN]


def whole_pass_ends(results: list) -> list[int]:
    """The repeat number that completes each whole pass (a pass that visited every cell), in
    order."""
    sizes = pass_sizes(results)
    most = max(sizes.values(), default=0)
    return sorted(p for p, n in sizes.items() if n == most)


def fit_at(results: list, order: dict, upto: int, response: str,
           confidence: float) -> tuple[list[Effect], int]:
    """The main effects of `response` over the visits up to repeat `upto`, adjusted for outside
    load and references, and the fit's residual df (one set of observations for both)."""
    obs = observations([r for r in results if r.repeat <= upto], response, adjust=True)
    fitted = fit_effects(obs, order, response, confidence, interactions=False)
    return [e for e in fitted if e.level != e.reference], residual_fit(obs, order)[1]


def decide(results: list, cell_ids: list[str] | None, rule: Rule = Rule()) -> Decisions:
    """Replay the looks over the run's visits: each level decided at its first deciding look and
    kept."""
    measured = [r for r in results if r.measured]
    order = level_order(measured, cell_ids)
    ends = whole_pass_ends(measured)
    plan = planned_passes(measured, ends, rule.budget_s)
    looks = look_passes(len(ends), plan, rule.ended)
    first = [r for r in measured if ends and r.repeat <= ends[min(FIRST_LOOK, len(ends)) - 1]]
    response = response_of(first, rule.cores)
    other = THROUGHPUT if response == HOST_RATE else None
    levels = [(a, lv) for a, lvs in order.items() for lv in lvs[1:]]
    info = planned_info(len(ends), plan)
    z = boundaries(info, rule.alpha_each(len(levels)))
    kept: dict[tuple, Decision] = {}
    last: dict[tuple, Decision] = {}
    for k, passes in enumerate(looks):
        zk = z[-1] if k == len(looks) - 1 and rule.ended else z[k]  # an ended budget's last look: the last's
        confidence = 1 - 2 * (1 - float(normal_cdf(zk)))
        upto = ends[passes - 1]
        effects, df = fit_at(measured, order, upto, response, confidence)
        fitted = {(e.axis, e.level): e for e in effects}
        beside = ({(e.axis, e.level): e for e in fit_at(measured, order, upto, other, confidence)[0]}
                  if other else {})
        enough = df >= MIN_LOOK_DF
        for key, e in fitted.items():
            word = e.decision(rule.min_effect)
            word = word if enough or word == IDENTICAL else OPEN
            d = Decision(e, word, passes, beside.get(key), zk)
            last[key] = d
            if key not in kept and word in DECIDED + (IDENTICAL,):
                kept[key] = d
    if not looks and ends:  # before the first look: the one-pass fit at 95%, shown, deciding nothing
        beside = ({(e.axis, e.level): e for e in fit_at(measured, order, ends[-1], other, 0.95)[0]}
                  if other else {})
        for e in fit_at(measured, order, ends[-1], response, 0.95)[0]:
            last[(e.axis, e.level)] = Decision(e, OPEN, len(ends), beside.get((e.axis, e.level)))
    out = []
    for axis, level in levels:
        d = kept.get((axis, level)) or last.get((axis, level))
        if d is None:  # not estimable yet: open, with nothing to show
            ref = order[axis][0]
            d = Decision(Effect(response, axis, level, ref, 1.0, 0.0, math.inf, 0), OPEN, None)
        out.append(d)
    return Decisions(response, out, len(ends), len(looks), rule, plan)

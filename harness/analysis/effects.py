"""Pure: the effect of each choice, estimated from every cell and visit of a factorial matrix at
once.

The model is least squares on the log of a figure (throughput, AU, memory), one term per axis level
against the axis's first level (treatment coding), plus one term per pass over the cells (a visit's
pass absorbs the machine's drift between passes). exp(coefficient) is the level's effect as a ratio
against the reference level; its 95% interval is exp(coefficient +- t * standard error), t from the
residual degrees of freedom. In a full factorial design the main-effects fit gives each level's
effect averaged over the other axes; what an interaction adds to the residual variance widens the
intervals (conservative).

Two-axis interactions are fitted in a second model (main effects, passes and every two-axis term)
where the data leave at least MIN_RESIDUAL_DF residual degrees of freedom; an interaction ratio is
the factor by which the pair of levels together differs from the product of their main effects.
Their intervals are simultaneous (Bonferroni over the m interaction terms: each at 1 - 0.05 / m),
so that "an interval excludes 1" is a 5% false alarm for the whole set, not for each of a dozen
terms.

The order figures (ORDER_FIGURES: harness.results.cellorder's ratios, 1 for an ideal shuffle) are
fitted the same way, main effects only (`order_effects`), so that a level's cost in randomness
reads beside its speed. A cell's order is a pure function of its seeds, so its repeats give the
same figure and the fit's residuals miss that the order is one random draw: each interval is
widened by that draw's noise, the ideal shuffle's sd of the figure (`with_noise_floor`). Whether
one cell is as random as a shuffle is decided against the ideal shuffle's own spread
(harness.results.orderquality.decision). A figure of 0 (a fully sequential order's position mixing)
has no log and leaves its visit out of that figure's fit.

Throughput and HOST_RATE (1 / the loader's and rank's CPU s per sample: cores / CPU s per sample,
up to the constant cores) are fitted with covariates (`observations(..., adjust=True)`; what they
are and what they bought: harness.analysis.covariates). A visit under extreme load leaves the fit.

An Effect is one line of effects.jsonl, version EFFECTS_VERSION (results.fileformat: EFFECTS)."""
from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass, fields

import numpy as np

from harness.analysis.covariates import extreme, load_covariate, reference_covariates
from harness.results import stats
from harness.results.cellresult import CellResult
from harness.results.fileformat import FileFormat
from strategies.registry import AXES

# effects.jsonl's format version (written under "schema" in each line), and what each version is:
EFFECTS_VERSION = 1
EFFECTS_HISTORY = {
    1: "every effects.jsonl so far: per figure, axis and level `ratio`, `low`, `high` against `reference`, `n` "
       "visits, `kind` (main or interaction); the `schema` key added within version 1 (a line without it is "
       "version 1)",
}
# effects.jsonl's order figures -> (the Figures attribute, the label in tables)
ORDER_FIGURES = {"order_units": ("order_units_ratio", "units/batch vs shuffle"),
                 "order_position": ("order_position_mixing", "position mixing (1 - abs rho)"),
                 "order_labels": ("order_label_ratio", "label mixing vs shuffle"),
                 # the held-out loss after the window's steps over the shuffle's: 1 for a shuffle, higher is worse
                 "order_training": ("order_train_ratio", "training loss vs shuffle")}
THROUGHPUT, HOST_RATE = "throughput", "host_rate"  # the two responses a decision may rest on
MIN_RESIDUAL_DF = 10  # interactions are fitted only when this many degrees of freedom remain
CONFIDENCE = 0.95
MIN_EFFECT = 0.05  # the smallest effect that matters, when a run records none (--min-effect sets it)
MIN_PASSES = 2  # whole passes before a level is decided: one pass's interval misses what changes between runs
IDENTICAL_SPREAD = 1e-9  # log figures spread less than this over every visit: identical in every cell
# the decisions a level's effect gets (Effect.decision):
REFERENCE, IDENTICAL, HIGHER, LOWER, NO_EFFECT, OPEN = (
    "reference", "identical in every cell", "higher", "lower", "no effect", "open")


@dataclass(frozen=True)
class Observation:
    levels: dict  # axis -> the level (strategy label) of the cell
    value: float  # the figure, > 0
    block: int = 0  # the pass over the cells this visit belongs to
    covariates: tuple[float, ...] = ()  # log(1 - outside load), log references: when the fit adjusts for them


@dataclass(frozen=True)
class Effect:
    """One line of effects.jsonl: `level` of `axis` against `reference`, as a ratio of the
    figure."""

    figure: str
    axis: str
    level: str
    reference: str
    ratio: float
    low: float
    high: float
    n: int  # observations the fit used
    kind: str = "main"  # "main", or "interaction" (axis "a x b", level "x x y", reference "additive")

    @property
    def decided(self) -> bool:
        """True when the interval excludes 1 (the level changes the figure, at the fit's
        confidence)."""
        return self.low > 1 or self.high < 1

    @property
    def identical(self) -> bool:
        """The figure was the same in every visit (fit_effects then gives exactly x1 [1, 1]):
        nothing to decide."""
        return self.level != self.reference and self.ratio == self.low == self.high == 1.0

    def decision(self, min_effect: float = MIN_EFFECT, passes: int | None = None) -> str:
        """Both ways: HIGHER / LOWER when the interval excludes 1; NO_EFFECT (no effect larger than
        `min_effect`) when the interval lies inside [1 / (1 + m), 1 + m], an equivalence test at
        the same confidence; OPEN otherwise. A figure identical in every cell is IDENTICAL, never
        decided. With `passes` (the run's whole passes) below MIN_PASSES, nothing is decided yet:
        with one visit per cell the interval rests on one run's residuals and misses what changes
        from run to run (two same-code runs decided mmap against raw in opposite directions)."""
        if self.level == self.reference:
            return REFERENCE
        if self.identical:
            return IDENTICAL
        if passes is not None and passes < MIN_PASSES:
            return OPEN
        if self.decided:
            return HIGHER if self.low > 1 else LOWER
        if self.low >= 1 / (1 + min_effect) and self.high <= 1 + min_effect:
            return NO_EFFECT
        return OPEN

    def to_json(self) -> dict:
        return EFFECTS.stamped(asdict(self))

    @classmethod
    def from_json(cls, obj: dict) -> Effect:
        """A line of effects.jsonl (its version is the file's: the key is not a field); a line
        without a field the record needs is a TypeError."""
        return cls(**{f.name: obj[f.name] for f in fields(cls) if f.name in obj})


EFFECTS = FileFormat("effects.jsonl", EFFECTS_VERSION, EFFECTS_HISTORY)


def design_matrix(obs: list[Observation], order: dict[str, list[str]], pairs: list[tuple[str, str]]):
    """The design matrix and the name of each column (None for the intercept)."""
    columns: list[tuple] = [("intercept",)]
    columns += [("level", axis, level) for axis, levels in order.items() for level in levels[1:]]
    blocks = sorted({o.block for o in obs})
    columns += [("block", b) for b in blocks[1:]]
    width = max((len(o.covariates) for o in obs), default=0)
    columns += [("covariate", k) for k in range(width)
                if np.ptp([_covariate(o, k) for o in obs]) > IDENTICAL_SPREAD]
    columns += [("pair", a, x, b, y) for a, b in pairs for x in order[a][1:] for y in order[b][1:]]
    x = np.zeros((len(obs), len(columns)))
    for i, o in enumerate(obs):
        for j, col in enumerate(columns):
            kind = col[0]
            if kind == "intercept":
                x[i, j] = 1.0
            elif kind == "level":
                x[i, j] = o.levels.get(col[1]) == col[2]
            elif kind == "block":
                x[i, j] = o.block == col[1]
            elif kind == "covariate":
                x[i, j] = _covariate(o, col[1])
            else:
                x[i, j] = o.levels.get(col[1]) == col[2] and o.levels.get(col[3]) == col[4]
    return x, columns


def _covariate(o: Observation, k: int) -> float:
    return o.covariates[k] if k < len(o.covariates) else 0.0


def least_squares(x: np.ndarray, y: np.ndarray):
    """Coefficients, their standard errors (nan where a column is aliased) and the residual df."""
    coef, _, rank, _ = np.linalg.lstsq(x, y, rcond=None)
    df = len(y) - rank
    if df <= 0:
        return coef, np.full(len(coef), np.nan), df
    resid = y - x @ coef
    s2 = float(resid @ resid) / df
    cov = s2 * np.linalg.pinv(x.T @ x)
    se = np.sqrt(np.clip(np.diag(cov), 0, None))
    estimable = _estimable(x)
    se[~estimable] = np.nan
    return coef, se, df


def residual_sd(obs: list[Observation], order: dict[str, list[str]]) -> float | None:
    """The sd per visit of the log figure after the main-effects fit; None with no residual df."""
    resid, df = residual_fit(obs, order)
    return math.sqrt(float(resid @ resid) / df) if df > 0 else None


def residual_fit(obs: list[Observation], order: dict[str, list[str]]) -> tuple[np.ndarray, int]:
    """The main-effects fit's residuals (log figure) and its residual degrees of freedom."""
    obs = [o for o in obs if o.value is not None and math.isfinite(o.value) and o.value > 0]
    order = observed_order(obs, order)
    if not obs or not order:
        return np.zeros(0), 0
    coef, _, df = least_squares(x := design_matrix(obs, order, [])[0], y := np.log([o.value for o in obs]))
    return y - x @ coef, df


def _estimable(x: np.ndarray) -> np.ndarray:
    """Columns whose coefficient the data determine (not aliased with others): e_j lies in the row
    space."""
    pinv = np.linalg.pinv(x)
    projection = pinv @ x  # projector onto the row space
    eye = np.eye(x.shape[1])
    return np.all(np.abs(projection - eye) < 1e-8, axis=0)


def _effect(figure, axis, level, reference, beta, se, df, n, kind, confidence) -> Effect | None:
    if not math.isfinite(se):
        return None
    t = stats.t_quantile(confidence, df)
    return Effect(figure, axis, level, reference, float(math.exp(beta)), float(math.exp(beta - t * se)),
                  float(math.exp(beta + t * se)), n, kind)


def fit_effects(obs: list[Observation], order: dict[str, list[str]], figure: str = "throughput",
                confidence: float = CONFIDENCE, interactions: bool = True) -> list[Effect]:
    """Each axis level's effect (and, where the data allow, each two-axis interaction) on `figure`.

    `order`: axis -> its levels, the first being the reference. Axes with one level are left out.
    Observations with a value that is not a positive number are left out. The reference level of
    each axis is listed too, with ratio 1 and a zero-width interval."""
    obs = [o for o in obs if o.value is not None and math.isfinite(o.value) and o.value > 0]
    order = observed_order(obs, order)
    if not obs or not order:
        return []
    y = np.log([o.value for o in obs])
    if float(np.ptp(y)) <= IDENTICAL_SPREAD:  # the same figure in every visit: x1 exactly, never decided
        return [Effect(figure, a, lv, levels[0], 1.0, 1.0, 1.0, len(obs)) for a, levels in order.items()
                for lv in levels]
    x, columns = design_matrix(obs, order, [])
    coef, se, df = least_squares(x, y)
    if df <= 0:
        return []
    out = []
    for axis, levels in order.items():
        out.append(Effect(figure, axis, levels[0], levels[0], 1.0, 1.0, 1.0, len(obs)))
        for level in levels[1:]:
            j = columns.index(("level", axis, level))
            e = _effect(figure, axis, level, levels[0], coef[j], se[j], df, len(obs), "main", confidence)
            if e is not None:
                out.append(e)
    if interactions:
        out += fit_interactions(obs, order, figure, confidence)
    return out


def observed_order(obs: list[Observation], order: dict[str, list[str]]) -> dict[str, list[str]]:
    """The axes' levels that have an observation, in the matrix's order (axes left with one level
    dropped): a reference level with no measured visit gives way to the first measured level of its
    axis."""
    seen = {(a, o.levels.get(a)) for o in obs for a in order}
    kept = {a: [lv for lv in levels if (a, lv) in seen] for a, levels in order.items()}
    return {a: levels for a, levels in kept.items() if len(levels) > 1}


def fit_interactions(obs: list[Observation], order: dict[str, list[str]], figure: str,
                     confidence: float = CONFIDENCE) -> list[Effect]:
    """Every estimable two-axis interaction, from the model with all of them; [] when too few df
    remain."""
    pairs = list(itertools.combinations(order, 2))
    x, columns = design_matrix(obs, order, pairs)
    y = np.log([o.value for o in obs])
    coef, se, df = least_squares(x, y)
    if df < MIN_RESIDUAL_DF:
        return []
    m = sum(col[0] == "pair" and math.isfinite(se[j]) for j, col in enumerate(columns))
    simultaneous = 1 - (1 - confidence) / max(m, 1)
    out = []
    for j, col in enumerate(columns):
        if col[0] != "pair":
            continue
        _, a, lx, b, ly = col
        e = _effect(figure, f"{a} x {b}", f"{lx} x {ly}", "additive", coef[j], se[j], df, len(obs),
                    "interaction", simultaneous)
        if e is not None:
            out.append(e)
    return out


def level_order(results: list[CellResult], cell_ids: list[str] | None = None) -> dict[str, list[str]]:
    """Each axis's levels (strategy labels) in the order the matrix lists them (`cell_ids`, the
    matrix's cells in order, as env.json's settings record them; else the order of the results):
    the first level of each axis is its reference."""
    rank = {cid: i for i, cid in enumerate(cell_ids or [])}
    order: dict[str, list[str]] = {}
    for r in sorted(results, key=lambda r: rank.get(r.cell, len(rank))):
        for axis, label in r.strategies.items():
            order.setdefault(axis, [])
            if label not in order[axis]:
                order[axis].append(label)
    return {a: order[a] for a in sorted(order, key=lambda a: AXES.index(a) if a in AXES else len(AXES))}


def figure_value(figures, attribute: str) -> float | None:
    """A Figures attribute, or HOST_RATE: 1 / (loader + rank CPU s per sample), None when either is
    missing."""
    if attribute != HOST_RATE:
        return getattr(figures, attribute)
    loader, rank = figures.loader_cpu_s_per_sample, figures.rank_cpu_s_per_sample
    return 1.0 / (loader + rank) if loader is not None and rank is not None and loader + rank > 0 else None


def observations(results: list[CellResult], attribute: str, adjust: bool = False) -> list[Observation]:
    """One observation per measured visit that has the figure (a Figures attribute, or HOST_RATE),
    its pass the block; with `adjust`, its covariates (outside load, references). A visit under
    extreme load (`extreme`) is replaced by its redo: the cell's next usable visit in a pass that
    did not visit every cell takes its place and pass in the fit, so the design stays balanced.
    Without a redo it is left out when its cell has another usable visit, and kept when it has
    none, so that every cell of the design stays in the fit."""
    usable = sorted((r for r in results if r.measured and figure_value(r.figures, attribute) is not None),
                    key=lambda r: r.repeat)
    sizes = pass_sizes(usable)
    whole = max(sizes.values(), default=0)
    block = {id(r): r.repeat for r in usable}
    dropped: set[int] = set()
    for cell in dict.fromkeys(r.cell for r in usable):
        visits = [r for r in usable if r.cell == cell]
        redos = [r for r in visits if not extreme(r) and sizes[r.repeat] < whole]
        for bad in (r for r in visits if extreme(r)):
            redo = next((r for r in redos if r.repeat > bad.repeat), None)
            if redo is not None:
                redos.remove(redo)
                block[id(redo)] = bad.repeat
                dropped.add(id(bad))
        if any(not extreme(r) for r in visits):
            dropped.update(id(r) for r in visits if extreme(r))
    kept = [r for r in usable if id(r) not in dropped]
    references = reference_covariates(kept) if adjust else {}
    return [Observation(dict(r.strategies), figure_value(r.figures, attribute), block[id(r)],
                        (load_covariate(r), *references.get(id(r), ())) if adjust else ())
            for r in kept]


def pass_sizes(results: list[CellResult]) -> dict[int, int]:
    """pass (repeat) -> how many cells it visited."""
    cells: dict[int, set] = {}
    for r in results:
        cells.setdefault(r.repeat, set()).add(r.cell)
    return {p: len(c) for p, c in cells.items()}


def whole_passes(results: list[CellResult]) -> int:
    """The passes that visited every cell the run visited (a budget's redo pass of a few cells is
    not one)."""
    sizes = pass_sizes(results)
    most = max(sizes.values(), default=0)
    return sum(n == most for n in sizes.values())


def order_effects(results: list[CellResult], order: dict[str, list[str]]) -> list[Effect]:
    """Each axis level's main effect on each order figure of ORDER_FIGURES (none for lines without
    them), its interval widened by the order's own sampling noise (`with_noise_floor`)."""
    out = []
    for figure, (attribute, _) in ORDER_FIGURES.items():
        fitted = fit_effects(observations(results, attribute), order, figure, interactions=False)
        out += [with_noise_floor(e, results, attribute) for e in fitted]
    return out


def _log_sd(f, attribute: str) -> float | None:
    """The sd of the log of an order figure that one draw of the order carries: the ideal shuffle's
    sd of the figure's mean over the window (harness.results.orderquality) relative to the figure's
    value."""
    if attribute == "order_train_ratio":  # its 95% interval over the seeds (harness.results.ordertraining)
        low, high, value = f.order_train_ratio_low, f.order_train_ratio_high, f.order_train_ratio
        return (high - low) / (2 * 1.959964) / value if None not in (low, high) and value else None
    sd, value = {"order_units_ratio": (f.order_units_ideal_sd, f.order_units_per_batch),
                 "order_position_mixing": (f.order_position_ideal_sd, f.order_position_mixing),
                 "order_label_ratio": (f.order_label_tv_ideal_sd, f.order_label_tv)}[attribute]
    return sd / value if sd is not None and value else None


def _floor_var(results: list[CellResult], attribute: str, axis: str, level: str) -> float | None:
    """The mean over the level's cells of the log figure's noise variance, over their number: the
    variance the draw of the order adds to the level's mean log figure (a cell's repeats share one
    draw: one cell, once)."""
    per_cell: dict[str, float] = {}
    for r in results:
        sd = _log_sd(r.figures, attribute) if r.measured and r.strategies.get(axis) == level else None
        if sd is not None:
            per_cell[r.cell] = sd * sd
    return sum(per_cell.values()) / len(per_cell) ** 2 if per_cell else None


def with_noise_floor(e: Effect, results: list[CellResult], attribute: str, z: float = 1.959964) -> Effect:
    """An order effect whose interval also holds the noise of the order's draw. A cell's order is a
    pure function of its seeds, so its repeats do not vary and the fit's residuals miss that one
    permutation is one draw: the level's and the reference's noise variances (_floor_var) are added
    in quadrature to the fit's half-width, at z (95%)."""
    if e.level == e.reference:
        return e
    floors = [_floor_var(results, attribute, e.axis, lv) for lv in (e.level, e.reference)]
    if any(v is None for v in floors):
        return e
    fit = math.log(e.high / e.ratio)
    half = math.sqrt(fit * fit + z * z * sum(floors))
    return Effect(e.figure, e.axis, e.level, e.reference, e.ratio, e.ratio * math.exp(-half),
                  e.ratio * math.exp(half), e.n, e.kind)

"""Pure: how random the order a cell fed its ranks was, computed exactly from the recorded order,
each figure beside the ideal shuffle's own distribution of it, so that "as random as a shuffle" is
a decision.

The recorded order (RankOrder, `window_order`): per rank, the sample indices in the order its
batches delivered them during the measured window, the batch boundaries, and each sample's epoch
and position in the rank's epoch. The dataset's layout (Layout): each sample's storage position
(every storage here writes samples in index order, so by default the position is the index), the
storage unit it lies in (tar shard, litdata chunk, parquet row group; fixed blocks of consecutive
positions for a storage without units) and, optionally, its class.

The ideal shuffle is a uniform random permutation of the dataset cut into each rank's batches:
under it a rank's batch of b samples is a uniform b-subset of the N samples (torch's
DistributedSampler strides a uniform permutation; its padding repeats aside), and the order of a
rank's samples within an epoch is uniform.

The three figures, and why each:

- units met per batch (`units_per_batch`): the distinct shards (chunks, row groups, blocks) a
  batch's samples come from. It is what a shard or chunk reader saves on, and what it costs in
  randomness: a batch from 2 shards holds neighbours on storage. Ideal: exactly E = sum over units
  of 1 - C(N - n_s, b) / C(N, b) (`expected_units_met`), and its exact per-batch variance
  (`units_met_variance`, from the pairwise misses C(N - n_s - n_t, b) / C(N, b)); the mean over a
  window's J batches has the sd sqrt(sum Var_j) / J, the batches taken as independent (a shuffle
  draws them without replacement from one permutation, which lowers that sd by a factor about
  sqrt(1 - J b / N)).
- position mixing (`position_rho`): Spearman's rank correlation between a sample's storage position
  and its position in the rank's epoch, over each (rank, epoch) segment of the window, combined as
  the mean weighted by n - 1. It detects any monotone trend (a sequential read has rho = 1) and,
  through its spread, order in blocks; it does not see order within blocks that are themselves
  shuffled (the units figure does). Ideal: exactly mean 0 and variance 1 / (n - 1) for a segment of
  n distinct samples (a uniform pairing of the two rankings), so the weighted mean has sd 1 /
  sqrt(sum (n - 1)). `position_mixing` = 1 - |rho| is the positive form fitted as an effect (1: no
  trend, 0: sequential).
- label mixing (`label_tv`): per batch, the total-variation distance between its class mix and the
  dataset's, 1/2 sum_c |k_c / b - p_c| (0: the dataset's mix, 1 at most), on data whose classes are
  clustered in storage order as real downloads are. Chosen over an entropy because it is a distance
  in the units of the class shares, bounded, exactly computable per batch and with an exact ideal
  mean; the entropy of a batch of b samples is biased by b and undefined against the dataset's mix.
  Ideal: the mean exactly, from each class's hypergeometric count (`expected_tv`); its spread by a
  seeded Monte-Carlo of the ideal shuffle's batches (`ideal_tv_draws`: a batch's class counts drawn
  from the multivariate hypergeometric of a uniform b-subset, MC_REPEATS draws per batch size, seed
  MC_SEED), the window's mean's sd sqrt(sum v_j) / J with the batches independent as above
  (`ideal_tv_sd_of_mean`); LABEL_SPREAD says so where the figure is written.

`decision` compares an observed figure with the ideal's mean and sd: "as a shuffle" inside mean +-
Z95 sd, "less mixed" beyond it on the side of order (fewer units, a larger |rho|, a larger
distance), "more even" on the other side (more units or a smaller distance than chance gives: a
stratified order).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_BLOCK = 64  # positions per unit for a storage without units of its own (the shards sampler's default)
MC_REPEATS = 2000  # Monte-Carlo draws of the ideal shuffle's TV distance per batch size (sd within about 2%)
MC_SEED = 0
Z95 = 1.959964  # two-sided 95% of the normal
LABEL_SPREAD = (f"Monte-Carlo, {MC_REPEATS} draws per batch size (seed {MC_SEED}), batches independent; "
                f"the mean exact")
AS_SHUFFLE, LESS_MIXED, MORE_EVEN = "as a shuffle", "less mixed", "more even"


# --- the recorded order and the layout --------------------------------------------------------------------

@dataclass(frozen=True)
class RankOrder:
    """One rank's recorded order: `indices` in delivered order, each one's `epochs` and `positions`
    (its offset in the rank's epoch), and `batch_sizes` (the batch boundaries; they sum to
    len(indices))."""

    indices: np.ndarray
    epochs: np.ndarray
    positions: np.ndarray
    batch_sizes: tuple[int, ...]

    def batches(self) -> list[np.ndarray]:
        cuts = np.cumsum(self.batch_sizes)[:-1]
        return np.split(self.indices, cuts) if self.batch_sizes else []

    def segments(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """(indices, positions in the epoch) of each epoch the order spans."""
        return [(self.indices[self.epochs == e], self.positions[self.epochs == e]) for e in np.unique(self.epochs)]


def rank_order(batches: Sequence[Sequence[int]], epoch: int = 0, start: int = 0) -> RankOrder:
    """A RankOrder of batches delivered one after another within one epoch, the first at offset
    `start`."""
    indices = np.asarray([i for b in batches for i in b], dtype=np.int64)
    return RankOrder(indices, np.full(len(indices), epoch, dtype=np.int64),
                     np.arange(start, start + len(indices), dtype=np.int64), tuple(len(b) for b in batches))


def window_order(consumed: dict, batch_sizes: Sequence[int]) -> RankOrder | None:
    """A rank's order over its measured window, from the indices it consumed per epoch (warm-up
    included: a rank record's `consumed`) and the window's batch sizes (0 on a shadow step, which
    took no batch): the window's batches are the last ones consumed. None when the window took no
    batch or the two disagree."""
    sizes = tuple(int(n) for n in batch_sizes if n > 0)
    total = sum(sizes)
    epochs = sorted(consumed, key=int)
    if not total or not epochs:
        return None
    idx = np.concatenate([np.asarray(consumed[e], dtype=np.int64) for e in epochs])
    ep = np.concatenate([np.full(len(consumed[e]), int(e), dtype=np.int64) for e in epochs])
    pos = np.concatenate([np.arange(len(consumed[e]), dtype=np.int64) for e in epochs])
    if total > len(idx):
        return None
    return RankOrder(idx[-total:], ep[-total:], pos[-total:], sizes)


@dataclass(frozen=True)
class Layout:
    """Where each sample lies: `units` (int64[N], the storage unit of each index), `unit_name`
    (what a unit is), `positions` (int64[N], each index's storage position) and `classes` (int64[N]
    or None)."""

    units: np.ndarray
    unit_name: str
    positions: np.ndarray
    classes: np.ndarray | None = None

    @property
    def size(self) -> int:
        return len(self.units)

    def unit_sizes(self) -> np.ndarray:
        return np.bincount(self.units)

    def class_sizes(self) -> np.ndarray | None:
        return None if self.classes is None else np.bincount(self.classes)


def layout(size: int, unit_ranges: Sequence[range] | None = None, block: int = DEFAULT_BLOCK,
           classes: np.ndarray | None = None, unit_name: str = "shards") -> Layout:
    """The layout of `size` samples in index order: units from `unit_ranges` (contiguous ranges in
    order, covering every index: a storage's shards), else fixed blocks of `block` positions."""
    if unit_ranges is None:
        units = np.arange(size, dtype=np.int64) // block
        unit_name = f"blocks of {block}"
    else:
        lengths = [len(r) for r in unit_ranges]
        if sum(lengths) != size:
            raise ValueError(f"the units cover {sum(lengths)} samples, the dataset has {size}")
        units = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    labels = None if classes is None else np.asarray(classes, dtype=np.int64)
    if labels is not None and labels.shape != (size,):
        raise ValueError(f"classes has shape {labels.shape}, expected ({size},)")
    return Layout(units, unit_name, np.arange(size, dtype=np.int64), labels)


# --- units met per batch ----------------------------------------------------------------------------------

def _log_choose(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def miss_probability(total: int, missed: int, b: int) -> float:
    """P(a uniform b-subset of `total` items avoids `missed` given ones) = C(total - missed, b) /
    C(total, b)."""
    if total - missed < b:
        return 0.0
    return math.exp(_log_choose(total - missed, b) - _log_choose(total, b))


def _size_groups(sizes: np.ndarray) -> list[tuple[int, int]]:
    values, counts = np.unique(np.asarray(sizes, dtype=np.int64), return_counts=True)
    return [(int(v), int(c)) for v, c in zip(values, counts) if v > 0]


def expected_units_met(unit_sizes: np.ndarray, b: int) -> float:
    """The ideal shuffle's expected distinct units in a batch of b: sum_s 1 - C(N - n_s, b) / C(N,
    b)."""
    n = int(np.sum(unit_sizes))
    return sum(count * (1.0 - miss_probability(n, size, b)) for size, count in _size_groups(unit_sizes))


def units_met_variance(unit_sizes: np.ndarray, b: int) -> float:
    """The exact variance of the distinct units in a uniform b-subset: sum_s q_s (1 - q_s) + sum_{s
    != t} (q_st - q_s q_t), q_s = P(unit s missed), q_st = P(both missed) = C(N - n_s - n_t, b) /
    C(N, b)."""
    n = int(np.sum(unit_sizes))
    groups = _size_groups(unit_sizes)
    q = {size: miss_probability(n, size, b) for size, _ in groups}
    var = sum(count * q[size] * (1 - q[size]) for size, count in groups)
    for s, cs in groups:
        for t, ct in groups:
            pairs = cs * (ct - 1) if s == t else cs * ct
            var += pairs * (miss_probability(n, s + t, b) - q[s] * q[t])
    return max(var, 0.0)


def units_met(batch: np.ndarray, lay: Layout) -> int:
    return int(np.unique(lay.units[batch]).size)


# --- position mixing --------------------------------------------------------------------------------------

def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, ties given their mean rank."""
    values = np.asarray(values)
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values), dtype=np.float64)
    ranks[order] = np.arange(1, len(values) + 1, dtype=np.float64)
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    if np.any(counts > 1):
        sums = np.bincount(inverse, weights=ranks)
        ranks = sums[inverse] / counts[inverse]
    return ranks


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation (Pearson's on average ranks); 0 where either side is
    constant."""
    rx, ry = average_ranks(x), average_ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denom = math.sqrt(float(rx @ rx) * float(ry @ ry))
    return float(rx @ ry) / denom if denom > 0 else 0.0


def position_rho(orders: Sequence[RankOrder], lay: Layout) -> tuple[float | None, float | None]:
    """(rho, the ideal's sd): the (n - 1)-weighted mean of Spearman's rho over every (rank, epoch)
    segment of n >= 3 samples, and 1 / sqrt(sum (n - 1)); (None, None) without such a segment."""
    weighted = weights = 0.0
    for order in orders:
        for idx, pos in order.segments():
            if len(idx) < 3:
                continue
            weighted += (len(idx) - 1) * spearman(lay.positions[idx], pos)
            weights += len(idx) - 1
    if not weights:
        return None, None
    return weighted / weights, 1.0 / math.sqrt(weights)


# --- label mixing -----------------------------------------------------------------------------------------

def tv_distance(labels: np.ndarray, shares: np.ndarray) -> float:
    """1/2 sum_c |k_c / b - p_c| of a batch's labels against the class shares p."""
    counts = np.bincount(labels, minlength=len(shares)).astype(np.float64)
    return 0.5 * float(np.abs(counts / len(labels) - shares).sum())


def _hypergeom_pmf(total: int, good: int, b: int) -> np.ndarray:
    """P(K = k), k = 0..b, K the members of a `good`-sized class in a uniform b-subset of
    `total`."""
    out = np.zeros(b + 1)
    base = _log_choose(total, b)
    for k in range(max(0, b - (total - good)), min(b, good) + 1):
        out[k] = math.exp(_log_choose(good, k) + _log_choose(total - good, b - k) - base)
    return out


def expected_tv(class_sizes: np.ndarray, b: int) -> float:
    """The ideal shuffle's exact mean TV distance of a batch of b: 1/2 sum_c E|K_c / b - p_c|, K_c
    hypergeometric (the marginal of each class's count in a uniform b-subset)."""
    total = int(np.sum(class_sizes))
    k = np.arange(b + 1) / b
    return 0.5 * sum(float(_hypergeom_pmf(total, int(g), b) @ np.abs(k - g / total))
                     for g in class_sizes if g > 0)


def ideal_tv_draws(class_sizes: np.ndarray, b: int, repeats: int = MC_REPEATS, seed: int = MC_SEED) -> np.ndarray:
    """float[repeats]: the TV distance of a batch of b under the ideal shuffle, a seeded
    Monte-Carlo: the class counts drawn from the multivariate hypergeometric of a uniform
    b-subset."""
    sizes = np.asarray(class_sizes, dtype=np.int64)
    counts = np.random.default_rng([seed, b]).multivariate_hypergeometric(sizes, b, size=repeats)
    return 0.5 * np.abs(counts / b - sizes / sizes.sum()).sum(axis=1)


def ideal_tv_sd_of_mean(class_sizes: np.ndarray, batch_sizes: Sequence[int], repeats: int = MC_REPEATS,
                        seed: int = MC_SEED) -> float:
    """The sd of the mean TV distance over batches of these sizes under the ideal shuffle:
    sqrt(sum_j v_j) / J, v_j the Monte-Carlo variance of one batch of its size (ideal_tv_draws),
    the batches taken as independent."""
    var = {b: float(np.var(ideal_tv_draws(class_sizes, b, repeats, seed), ddof=1)) for b in set(batch_sizes)}
    return math.sqrt(sum(var[b] for b in batch_sizes)) / len(batch_sizes)


# --- the figures of a cell --------------------------------------------------------------------------------

def decision(observed: float | None, mean: float | None, sd: float | None, ordered_above: bool) -> str | None:
    """AS_SHUFFLE inside mean +- Z95 sd; LESS_MIXED beyond it on the side of order
    (`ordered_above`: a larger value is more ordered, as |rho| and the TV distance), MORE_EVEN on
    the other; None without the figures."""
    if observed is None or mean is None or sd is None:
        return None
    if abs(observed - mean) <= Z95 * sd:
        return AS_SHUFFLE
    return LESS_MIXED if (observed > mean) == ordered_above else MORE_EVEN


@dataclass(frozen=True)
class OrderFigures:
    """A set of rank orders' figures (one rank's, or the cell's over all its ranks); None where not
    computable."""

    batches: int
    samples: int
    units_per_batch: float | None = None
    units_ideal: float | None = None
    units_ideal_sd: float | None = None  # of the mean over the batches
    position_rho: float | None = None
    position_ideal_sd: float | None = None
    label_tv: float | None = None
    label_tv_ideal: float | None = None  # exact
    label_tv_ideal_sd: float | None = None  # Monte-Carlo, of the mean over the batches

    def decisions(self) -> dict[str, str | None]:
        rho = None if self.position_rho is None else abs(self.position_rho)
        sd = self.position_ideal_sd
        return {"units": decision(self.units_per_batch, self.units_ideal, self.units_ideal_sd, False),
                # |rho| against 0: the two-sided band of rho folded
                "position": decision(rho, 0.0 if sd is not None else None, sd, True),
                "labels": decision(self.label_tv, self.label_tv_ideal, self.label_tv_ideal_sd, True)}


def _units(batches: list[np.ndarray], lay: Layout) -> tuple[float, float, float]:
    unit_sizes = lay.unit_sizes()
    met = [units_met(b, lay) for b in batches]
    ideal = {n: (expected_units_met(unit_sizes, n), units_met_variance(unit_sizes, n))
             for n in {len(b) for b in batches}}
    mean_ideal = sum(ideal[len(b)][0] for b in batches) / len(batches)
    sd = math.sqrt(sum(ideal[len(b)][1] for b in batches)) / len(batches)
    return float(np.mean(met)), mean_ideal, sd


def _labels(batches: list[np.ndarray], lay: Layout, repeats: int, seed: int) -> tuple[float, float, float]:
    sizes = lay.class_sizes()
    shares = sizes / sizes.sum()
    observed = float(np.mean([tv_distance(lay.classes[b], shares) for b in batches]))
    exact = {n: expected_tv(sizes, n) for n in {len(b) for b in batches}}
    mean_ideal = sum(exact[len(b)] for b in batches) / len(batches)
    return observed, mean_ideal, ideal_tv_sd_of_mean(sizes, [len(b) for b in batches], repeats, seed)


def order_figures(orders: Sequence[RankOrder], lay: Layout, repeats: int = MC_REPEATS,
                  seed: int = MC_SEED) -> OrderFigures | None:
    """The figures over these rank orders (all their batches and segments), against the ideal
    shuffle of `lay`'s dataset; None when they hold no batch. Label figures only where `lay` has
    classes (two or more)."""
    batches = [b for o in orders for b in o.batches() if len(b)]
    if not batches or lay.size == 0:
        return None
    units = _units(batches, lay)
    rho, rho_sd = position_rho(orders, lay)
    labels = (None, None, None)
    if lay.classes is not None and np.count_nonzero(lay.class_sizes()) > 1:
        labels = _labels(batches, lay, repeats, seed)
    return OrderFigures(len(batches), int(sum(len(b) for b in batches)), *units, rho, rho_sd, *labels)

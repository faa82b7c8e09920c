"""Pure: what an order does to training. A small learnable task on the clustered data, trained for
a fixed number of steps with a cell's recorded order and with the ideal shuffle's, its held-out
loss beside the shuffle's with an interval from the seeds, so that "trains as a shuffle" is a
decision.

The task: classify a sample's class ([dataset] classes, clustered in storage order) from its image
embedding (which leans towards its class's centroid: harness.data.generator), with a linear softmax
classifier (a weight matrix and a bias, float64, numpy) trained by plain SGD, learning rate LR,
from weights drawn N(0, INIT_SD) by the seed. Everything is regenerated from the DatasetSpec: the
features of every sample (the same draws the storages hold) and a held-out set of HELD_OUT fresh
samples of the same law (a class drawn uniformly from the dataset's mix, an embedding leaning
towards its centroid; a stream of its own, seeded by the dataset's seed and HELD_OUT_TAG), so no
trained sample is evaluated.

A step is data parallel, as DistributedDataParallel steps: step j averages each rank's mean
gradient over its j-th batch of the window (ranks' batches taken in their delivered order; the
window's steps are the fewest batches any rank delivered). The ideal shuffle's steps have the same
batch sizes per rank and step, dealt from uniform permutations of the N samples (a fresh one when
one is used up), seeded.

Seeds s = 0..S-1: the model's initial weights are drawn by seed s for both trainings, the shuffle's
order by (SHUFFLE_TAG, s); a pair is (the order's held-out loss, the shuffle's) under the same
initial weights. The figure is the ratio of the mean losses (order / shuffle). Its interval: the
paired differences d_s = L_order,s - L_shuffle,s have the mean dbar and the sd s_d; the half-width
is t(0.975, S - 1) * s_d * sqrt(1 + 1/S), the t-interval of the mean difference widened by the
order's own one draw (a cell's order is one draw of its sampler, fixed across the seeds: under "it
is a shuffle" its loss varies as one shuffle's, s_d estimating that sd), then divided by the
shuffle's mean loss: ratio = 1 + dbar / mean(L_shuffle), interval 1 + (dbar -+ half) /
mean(L_shuffle). `decision`: "as a shuffle" when the interval holds 1, "trains worse" above it,
"trains better" below it.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from harness.data.generator import CLASS_SIGNAL, DatasetSpec, class_centroid, class_labels, generate_sample
from harness.results.orderquality import RankOrder
from harness.results.stats import t_quantile

SEEDS = 8  # model initialisations (and ideal shuffles), one pair each
LR = 4.0  # SGD learning rate (a shuffle reaches a held-out loss about half the initial log C in 16 steps here)
INIT_SD = 0.01
HELD_OUT = 1024
HELD_OUT_TAG = 7  # the held-out stream: default_rng([dataset seed, HELD_OUT_TAG])
SHUFFLE_TAG = 2  # the ideal shuffle of seed s: default_rng([SHUFFLE_TAG, s])
CONFIDENCE = 0.95
AS_SHUFFLE, WORSE, BETTER = "as a shuffle", "trains worse", "trains better"


@dataclass(frozen=True)
class Task:
    """The features (float64[N, D]) and classes (int64[N]) of the dataset, and the held-out
    set's."""

    features: np.ndarray
    labels: np.ndarray
    held_features: np.ndarray
    held_labels: np.ndarray

    @property
    def classes(self) -> int:
        return int(max(self.labels.max(), self.held_labels.max())) + 1


def held_out(spec: DatasetSpec, n: int = HELD_OUT) -> tuple[np.ndarray, np.ndarray]:
    """n fresh samples of the dataset's law: a class drawn from its mix, an embedding leaning
    towards the class's centroid as the generator's do (float64[n, D], int64[n])."""
    rng = np.random.default_rng([int(spec.seed), HELD_OUT_TAG])
    labels = class_labels(spec)
    drawn = labels[rng.integers(0, spec.samples, size=n)]
    centroids = np.stack([class_centroid(spec, k) for k in range(spec.classes)]).astype(np.float64)
    v = rng.standard_normal((n, centroids.shape[1]))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    v += CLASS_SIGNAL * centroids[drawn]
    return v / np.linalg.norm(v, axis=1, keepdims=True), drawn


@lru_cache(maxsize=2)
def task_of(spec) -> Task | None:
    """The task of a generated dataset with classes (None otherwise: nothing to learn)."""
    labels = class_labels(spec)
    if labels is None:
        return None
    features = np.stack([generate_sample(spec, i).image_emb for i in range(spec.samples)]).astype(np.float64)
    return Task(features, labels, *held_out(spec))


# --- the steps ------------------------------------------------------------------------------------------

Steps = list[list[np.ndarray]]  # per step, each rank's batch of sample indices


def order_steps(orders: Sequence[RankOrder]) -> Steps:
    """Step j: each rank's j-th batch of its window; as many steps as the fewest batches a rank
    delivered."""
    per_rank = [[b for b in o.batches() if len(b)] for o in orders]
    count = min((len(b) for b in per_rank), default=0)
    return [[batches[j] for batches in per_rank] for j in range(count)]


def shuffle_steps(size: int, like: Steps, seed: int) -> Steps:
    """The ideal shuffle's steps with `like`'s batch sizes: dealt in order from uniform
    permutations of `size` samples, a fresh permutation when one is used up (a batch never spans
    two)."""
    rng = np.random.default_rng([SHUFFLE_TAG, int(seed)])
    perm, at, out = rng.permutation(size), 0, []
    for step in like:
        batches = []
        for batch in step:
            if at + len(batch) > size:
                perm, at = rng.permutation(size), 0
            batches.append(perm[at:at + len(batch)])
            at += len(batch)
        out.append(batches)
    return out


# --- the model ------------------------------------------------------------------------------------------

def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def gradient(task: Task, w: np.ndarray, bias: np.ndarray, batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The mean cross-entropy's gradient over one batch."""
    x = task.features[batch]
    p = np.exp(_log_softmax(x @ w + bias))
    p[np.arange(len(batch)), task.labels[batch]] -= 1.0
    p /= len(batch)
    return x.T @ p, p.sum(axis=0)


def train(task: Task, steps: Steps, seed: int, lr: float = LR) -> tuple[np.ndarray, np.ndarray]:
    """(weights, bias) after SGD over the steps, each step the mean of the ranks' batch
    gradients."""
    w = np.random.default_rng([int(seed)]).normal(0.0, INIT_SD, (task.features.shape[1], task.classes))
    bias = np.zeros(task.classes)
    for step in steps:
        grads = [gradient(task, w, bias, b) for b in step]
        w = w - lr * sum(g for g, _ in grads) / len(grads)
        bias = bias - lr * sum(g for _, g in grads) / len(grads)
    return w, bias


def held_out_loss(task: Task, w: np.ndarray, bias: np.ndarray) -> tuple[float, float]:
    """(mean cross-entropy, accuracy) on the held-out set."""
    logp = _log_softmax(task.held_features @ w + bias)
    n = np.arange(len(task.held_labels))
    return float(-logp[n, task.held_labels].mean()), float(np.mean(logp.argmax(axis=1) == task.held_labels))


# --- the figure -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TrainingFigures:
    """Mean held-out loss and accuracy over the seeds of the order's trainings and the shuffle's,
    the loss ratio (order / shuffle) and its interval."""

    steps: int
    seeds: int
    loss: float
    loss_shuffle: float
    ratio: float
    ratio_low: float
    ratio_high: float
    accuracy: float
    accuracy_shuffle: float

    @property
    def decision(self) -> str:
        return decision(self.ratio_low, self.ratio_high)


def decision(low: float, high: float) -> str:
    if low <= 1.0 <= high:
        return AS_SHUFFLE
    return WORSE if low > 1.0 else BETTER


def ratio_interval(order_losses: Sequence[float], shuffle_losses: Sequence[float],
                   confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(ratio, low, high) of paired losses: 1 + dbar / mean(shuffle), 1 + (dbar -+ half) /
    mean(shuffle), half = t(confidence, S - 1) * sd(d) * sqrt(1 + 1/S) (the module's doc says
    why)."""
    a, b = np.asarray(order_losses, dtype=np.float64), np.asarray(shuffle_losses, dtype=np.float64)
    if a.shape != b.shape or a.size < 2:
        raise ValueError(f"need two or more paired losses, got {a.size} and {b.size}")
    d, base = a - b, float(b.mean())
    half = t_quantile(confidence, a.size - 1) * float(d.std(ddof=1)) * math.sqrt(1 + 1 / a.size)
    mean = float(d.mean())
    return 1 + mean / base, 1 + (mean - half) / base, 1 + (mean + half) / base


def training_figures(task: Task, steps: Steps, seeds: int = SEEDS, lr: float = LR) -> TrainingFigures | None:
    """The order's steps trained from seeds 0..seeds-1 against the ideal shuffle's; None without a
    step."""
    if not steps:
        return None
    ours = [held_out_loss(task, *train(task, steps, s, lr)) for s in range(seeds)]
    ideal = [held_out_loss(task, *train(task, shuffle_steps(len(task.labels), steps, s), s, lr))
             for s in range(seeds)]
    ratio, low, high = ratio_interval([x[0] for x in ours], [x[0] for x in ideal])
    return TrainingFigures(len(steps), seeds, float(np.mean([x[0] for x in ours])),
                           float(np.mean([x[0] for x in ideal])), ratio, low, high,
                           float(np.mean([x[1] for x in ours])), float(np.mean([x[1] for x in ideal])))

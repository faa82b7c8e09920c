"""The order-quality figures (harness.results.orderquality) against hand-computed orders: an ideal shuffle
(seeded), a sequential read, and a shard reader with a known shard size; the ideal shuffle's expectations
against brute-force enumeration of every batch a shuffle can deal."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from harness.results import orderquality as oq


def shuffled_batches(size: int, b: int, seed: int) -> list[list[int]]:
    perm = np.random.default_rng(seed).permutation(size).tolist()
    return [perm[i:i + b] for i in range(0, size, b)]


def clustered(size: int, classes: int) -> np.ndarray:
    return np.arange(size) * classes // size


# --- the ideal shuffle's exact expectations, by enumeration ---------------------------------------------

@pytest.mark.parametrize("unit_sizes, b", [([2, 2], 2), ([3, 2, 1], 2), ([4, 4, 1], 3), ([1, 1, 1, 5], 4)])
def test_units_met_expectation_and_variance_enumerated(unit_sizes, b):
    units = np.repeat(np.arange(len(unit_sizes)), unit_sizes)
    met = [len(set(units[list(c)])) for c in itertools.combinations(range(len(units)), b)]
    assert oq.expected_units_met(np.array(unit_sizes), b) == pytest.approx(np.mean(met), abs=1e-12)
    assert oq.units_met_variance(np.array(unit_sizes), b) == pytest.approx(np.var(met), abs=1e-12)


def test_units_met_by_hand():
    """Two units of 2, batches of 2: C(4, 2) = 6 batches, 2 of them in one unit: E = 2 (1 - 1/6) = 5/3,
    E[X^2] = (1 + 1 + 4 x 4) / 6 = 3, Var = 3 - 25/9 = 2/9."""
    assert oq.expected_units_met(np.array([2, 2]), 2) == pytest.approx(5 / 3, abs=1e-12)
    assert oq.units_met_variance(np.array([2, 2]), 2) == pytest.approx(2 / 9, abs=1e-12)


@pytest.mark.parametrize("class_sizes, b", [([3, 2, 1], 2), ([2, 2, 2], 3), ([5, 1], 4)])
def test_expected_tv_enumerated(class_sizes, b):
    labels = np.repeat(np.arange(len(class_sizes)), class_sizes)
    shares = np.array(class_sizes) / sum(class_sizes)
    tvs = [oq.tv_distance(labels[list(c)], shares) for c in itertools.combinations(range(len(labels)), b)]
    assert oq.expected_tv(np.array(class_sizes), b) == pytest.approx(np.mean(tvs), abs=1e-12)


def test_tv_by_hand():
    """Classes [3, 2, 1] of 6, a batch holding one of class 0 and one of class 2: 1/2 (|1/2 - 1/2| + |0 - 1/3|
    + |1/2 - 1/6|) = 1/3."""
    assert oq.tv_distance(np.array([0, 2]), np.array([3, 2, 1]) / 6) == pytest.approx(1 / 3)


def test_monte_carlo_spread_of_the_tv_matches_enumeration():
    """One batch of 2 from classes [3, 2, 1]: the seeded Monte-Carlo's mean and sd against the 15 batches'."""
    labels = np.repeat([0, 1, 2], [3, 2, 1])
    shares = np.array([3, 2, 1]) / 6
    tvs = [oq.tv_distance(labels[list(c)], shares) for c in itertools.combinations(range(6), 2)]
    draws = oq.ideal_tv_draws(np.array([3, 2, 1]), 2, repeats=20000, seed=1)
    assert draws.mean() == pytest.approx(np.mean(tvs), abs=0.005)
    assert draws.std() == pytest.approx(np.std(tvs), abs=0.005)
    assert np.array_equal(draws, oq.ideal_tv_draws(np.array([3, 2, 1]), 2, repeats=20000, seed=1))  # seeded
    sd = oq.ideal_tv_sd_of_mean(np.array([3, 2, 1]), [2] * 4, repeats=20000, seed=1)
    assert sd == pytest.approx(np.std(tvs) / 2, rel=0.02)  # four independent batches: sd / sqrt(4)


def test_spearman_by_hand():
    """Without ties, rho = 1 - 6 sum d^2 / (n (n^2 - 1)); with ties, average ranks."""
    x, y = np.array([3, 1, 4, 0, 2]), np.arange(5)
    d = x - y
    assert oq.spearman(x, y) == pytest.approx(1 - 6 * (d @ d) / (5 * 24))
    assert oq.spearman(np.arange(10), np.arange(10)) == pytest.approx(1.0)
    assert oq.spearman(np.arange(10)[::-1], np.arange(10)) == pytest.approx(-1.0)
    assert list(oq.average_ranks(np.array([5, 1, 5, 2]))) == [3.5, 1.0, 3.5, 2.0]


# --- three orders ------------------------------------------------------------------------------------

def test_ideal_shuffle_is_as_a_shuffle():
    size, b = 4096, 32
    lay = oq.layout(size, block=64, classes=clustered(size, 8))
    orders = [oq.rank_order(shuffled_batches(size, b, seed)) for seed in (3, 4)]
    f = oq.order_figures(orders, lay)
    assert f.batches == 2 * size // b and f.samples == 2 * size
    assert f.units_ideal == pytest.approx(64 * (1 - oq.miss_probability(size, 64, b)))
    assert f.units_ideal_sd == pytest.approx(math.sqrt(oq.units_met_variance(lay.unit_sizes(), b) / f.batches))
    assert abs(f.units_per_batch - f.units_ideal) < 3 * f.units_ideal_sd
    assert f.position_ideal_sd == pytest.approx(1 / math.sqrt(2 * (size - 1)))
    assert abs(f.position_rho) < 3 * f.position_ideal_sd
    assert abs(f.label_tv - f.label_tv_ideal) < 3 * f.label_tv_ideal_sd
    # the Monte-Carlo's spread of the window's mean against shuffles dealt here, 200 of them
    shares = np.full(8, 1 / 8)
    means = [np.mean([oq.tv_distance(lay.classes[x], shares) for x in shuffled_batches(size, b, 100 + r)])
             for r in range(200)]
    assert f.label_tv_ideal_sd == pytest.approx(np.std(means) / math.sqrt(2), rel=0.2)  # 2 ranks
    assert f.decisions() == {"units": oq.AS_SHUFFLE, "position": oq.AS_SHUFFLE, "labels": oq.AS_SHUFFLE}


def test_sequential_read():
    """Batches of 16 in index order over blocks of 64 and 4 clusters of 64: one unit and one class per batch
    (TV = 1 - 1/4), rho = 1."""
    size, b = 256, 16
    lay = oq.layout(size, block=64, classes=clustered(size, 4))
    f = oq.order_figures([oq.rank_order([list(range(i, i + b)) for i in range(0, size, b)])], lay)
    assert f.units_per_batch == 1.0
    assert f.position_rho == pytest.approx(1.0)
    assert f.label_tv == pytest.approx(0.75)
    assert f.units_ideal == pytest.approx(4 * (1 - oq.miss_probability(size, 64, b)))
    assert f.decisions() == {"units": oq.LESS_MIXED, "position": oq.LESS_MIXED, "labels": oq.LESS_MIXED}


def test_shard_reader_with_a_known_shard_size():
    """A reader of whole shards of 64 in the order 2, 0, 3, 1, batches of 48: the batches meet 1, 2, 2, 1, 1
    and 1 shards (the last batch holds 16); the classes are the shards."""
    size, shard = 256, 64
    stream = [i for k in (2, 0, 3, 1) for i in range(k * shard, (k + 1) * shard)]
    batches = [stream[i:i + 48] for i in range(0, size, 48)]
    lay = oq.layout(size, unit_ranges=[range(a, a + shard) for a in range(0, size, shard)],
                    classes=clustered(size, 4))
    f = oq.order_figures([oq.rank_order(batches)], lay)
    assert [oq.units_met(np.array(x), lay) for x in batches] == [1, 2, 2, 1, 1, 1]
    assert f.units_per_batch == pytest.approx(8 / 6)
    d = np.array(stream) - np.arange(size)  # no ties: the classic formula
    assert f.position_rho == pytest.approx(1 - 6 * float(d @ d) / (size * (size ** 2 - 1)))
    # batch 2 holds 16 of class 2 and 32 of class 0: TV = 1/2 (|1/3 - 1/4| + |2/3 - 1/4| + 2 x 1/4) = 1/2;
    # batch 3 likewise (32 of class 0, 16 of class 3); the other four hold one class: 1 - 1/4
    assert f.label_tv == pytest.approx((4 * 0.75 + 2 * 0.5) / 6)
    expected = {48: 4 * (1 - oq.miss_probability(size, 64, 48)), 16: 4 * (1 - oq.miss_probability(size, 64, 16))}
    assert f.units_ideal == pytest.approx((5 * expected[48] + expected[16]) / 6)
    sizes = np.array([64] * 4)
    assert f.label_tv_ideal == pytest.approx((5 * oq.expected_tv(sizes, 48) + oq.expected_tv(sizes, 16)) / 6)
    assert f.decisions()["units"] == oq.LESS_MIXED and f.decisions()["labels"] == oq.LESS_MIXED


def test_no_classes_no_label_figures():
    f = oq.order_figures([oq.rank_order([[0, 1], [2, 3]])], oq.layout(4, block=2))
    assert f.label_tv is None and f.decisions()["labels"] is None
    assert f.units_per_batch == 1.0


# --- the window of a rank's record -------------------------------------------------------------------

def test_window_order_takes_the_last_batches_across_epochs():
    consumed = {0: [5, 6, 7, 8, 9, 0, 1, 2, 3, 4], 1: [9, 8, 7, 6]}
    order = oq.window_order(consumed, [4, 0, 4])  # a shadow step between two batches
    assert order.indices.tolist() == [1, 2, 3, 4, 9, 8, 7, 6]
    assert order.epochs.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert order.positions.tolist() == [6, 7, 8, 9, 0, 1, 2, 3]
    assert [b.tolist() for b in order.batches()] == [[1, 2, 3, 4], [9, 8, 7, 6]]
    assert [len(i) for i, _ in order.segments()] == [4, 4]
    assert oq.window_order(consumed, [0, 0]) is None
    assert oq.window_order({0: [1, 2]}, [4]) is None


def test_layout_checks_its_units():
    with pytest.raises(ValueError, match="cover 3"):
        oq.layout(4, unit_ranges=[range(0, 3)])
    assert oq.layout(5, block=2).units.tolist() == [0, 0, 1, 1, 2]

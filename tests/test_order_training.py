"""What an order does to training (harness.results.ordertraining): a softmax classifier of the clustered classes,
trained with a cell's recorded order and with the ideal shuffle's over the same seeds, the loss ratio's interval
checked by hand, a sequential read of clustered data decided worse than a shuffle and a shuffle decided as one;
the figures in the cell's line and the report's table."""
from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from harness.config.choices import StrategyChoice
from harness.config.matrix import Cell
from harness.data import generator
from harness.report.trainingtable import training_table
from harness.results import orderquality as oq
from harness.results import ordertraining as ot
from harness.results.cellresult import CellResult, cell_line
from harness.results.repeats import merge_repeats
from strategies.sample import IMAGE_EMB_DIM
from tests.test_order_cells import rank_record

# the test's small setting: 512 samples in 4 classes (clusters of 128), 2 ranks x 8 steps of 16
SPEC = generator.DatasetSpec(samples=512, profile="tiny", classes=4, content="features")
T_975_2 = 4.302653  # Student's t, 0.975 quantile, 2 degrees of freedom (tables)


@pytest.fixture(scope="module")
def task() -> ot.Task:
    return ot.task_of(SPEC)


def sequential_orders(b: int = 16, steps: int = 8, warmup: int = 2) -> list[oq.RankOrder]:
    """Two ranks reading contiguous halves in index order (the window after `warmup` batches)."""
    half = SPEC.samples // 2
    return [oq.rank_order([range(r * half + j * b, r * half + (j + 1) * b) for j in range(warmup, warmup + steps)],
                          start=warmup * b) for r in range(2)]


def test_the_loss_ratios_interval_by_hand():
    # d = 0.1, 0.2, 0.3: mean 0.2, sd 0.1; half = t(0.975, 2) * 0.1 * sqrt(1 + 1/3); over the shuffle's mean 2
    half = T_975_2 * 0.1 * math.sqrt(4 / 3)
    ratio, low, high = ot.ratio_interval([2.1, 2.2, 2.3], [2.0, 2.0, 2.0])
    assert ratio == pytest.approx(1.1) and low == pytest.approx(1 + (0.2 - half) / 2, abs=1e-6)
    assert high == pytest.approx(1 + (0.2 + half) / 2, abs=1e-6) and low == pytest.approx(0.851586, abs=1e-6)
    assert ot.decision(low, high) == ot.AS_SHUFFLE
    ratio, low, high = ot.ratio_interval([3.0, 3.1, 3.2], [2.0, 2.0, 2.0])  # d = 1, 1.1, 1.2
    assert (ratio, low) == (pytest.approx(1.55), pytest.approx(1.301586, abs=1e-6))
    assert ot.decision(low, high) == ot.WORSE and ot.decision(0.7, 0.9) == ot.BETTER
    with pytest.raises(ValueError):
        ot.ratio_interval([1.0], [1.0])


def test_a_sequential_read_of_clustered_data_trains_worse_than_a_shuffle(task):
    f = ot.training_figures(task, ot.order_steps(sequential_orders()))
    assert f.steps == 8 and f.seeds == ot.SEEDS
    assert f.decision == ot.WORSE and f.ratio_low > 1.2  # decided: the interval is well above 1
    assert f.loss > f.loss_shuffle and f.accuracy < f.accuracy_shuffle
    assert f.loss_shuffle < math.log(4) * 0.8  # the shuffle learns: below the untrained loss of log 4


@pytest.mark.parametrize("seed", [100, 101, 102])
def test_an_ideal_shuffle_trains_as_a_shuffle_against_other_seeds(task, seed):
    steps = ot.shuffle_steps(SPEC.samples, ot.order_steps(sequential_orders()), seed)
    f = ot.training_figures(task, steps)
    assert f.decision == ot.AS_SHUFFLE and f.ratio_low < 1 < f.ratio_high
    assert f.ratio_high - f.ratio_low < 0.3  # and the interval says something


def test_the_steps_pair_the_ranks_batches_and_the_shuffle_deals_permutations():
    a = oq.rank_order([[0, 1], [2, 3], [4, 5]])
    b = oq.rank_order([[9, 8], [7, 6]])
    steps = ot.order_steps([a, b])
    assert [[x.tolist() for x in s] for s in steps] == [[[0, 1], [9, 8]], [[2, 3], [7, 6]]]  # the fewest: 2
    dealt = ot.shuffle_steps(6, [[np.zeros(2), np.zeros(1)], [np.zeros(2), np.zeros(1)], [np.zeros(3)]], seed=0)
    assert [[len(x) for x in s] for s in dealt] == [[2, 1], [2, 1], [3]]
    first = np.concatenate([x for s in dealt[:2] for x in s])
    assert sorted(first.tolist()) == list(range(6))  # one permutation, then a fresh one for the batch of 3
    assert len(set(dealt[2][0].tolist())) == 3
    assert ot.shuffle_steps(6, steps, 5)[0][0].tolist() == ot.shuffle_steps(6, steps, 5)[0][0].tolist()


def tiny_task() -> ot.Task:
    rng = np.random.default_rng(0)
    return ot.Task(rng.standard_normal((6, 3)), np.array([0, 1, 2, 0, 1, 2]), rng.standard_normal((4, 3)),
                   np.array([0, 1, 2, 0]))


def loss_at(task: ot.Task, w: np.ndarray, bias: np.ndarray, batch: np.ndarray) -> float:
    z = task.features[batch] @ w + bias
    z = z - z.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return float(-logp[np.arange(len(batch)), task.labels[batch]].mean())


def test_the_gradient_is_the_mean_cross_entropys():
    task, batch = tiny_task(), np.array([0, 2, 3, 5])
    rng = np.random.default_rng(1)
    w, bias = rng.standard_normal((3, 3)), rng.standard_normal(3)
    gw, gb = ot.gradient(task, w, bias, batch)
    eps = 1e-6
    for i, j in [(0, 0), (1, 2), (2, 1)]:
        step = np.zeros_like(w)
        step[i, j] = eps
        numeric = (loss_at(task, w + step, bias, batch) - loss_at(task, w - step, bias, batch)) / (2 * eps)
        assert gw[i, j] == pytest.approx(numeric, abs=1e-6)
    e = np.eye(3)[1] * eps
    assert gb[1] == pytest.approx((loss_at(task, w, bias + e, batch) - loss_at(task, w, bias - e, batch)) / (2 * eps),
                                  abs=1e-6)


def test_a_step_averages_the_ranks_gradients():
    """Equal batches on two ranks step as one batch of both (the mean of the two means), from the seed's weights."""
    task = tiny_task()
    two = ot.train(task, [[np.array([0, 1]), np.array([2, 3])]], seed=3, lr=0.5)
    one = ot.train(task, [[np.array([0, 1, 2, 3])]], seed=3, lr=0.5)
    start = np.random.default_rng([3]).normal(0.0, ot.INIT_SD, (3, 3))
    gw, _ = ot.gradient(task, start, np.zeros(3), np.array([0, 1, 2, 3]))
    assert np.allclose(two[0], one[0]) and np.allclose(one[0], start - 0.5 * gw)
    assert not np.allclose(ot.train(task, [[np.array([0, 1])]], seed=3)[0], one[0])


def test_the_held_out_set_is_fresh_and_drawn_from_the_mix(task):
    assert task.features.shape == (512, IMAGE_EMB_DIM)
    assert np.array_equal(task.features[5], generator.generate_sample(SPEC, 5).image_emb.astype(np.float64))
    counts = np.bincount(task.held_labels, minlength=4) / len(task.held_labels)
    assert np.all(np.abs(counts - 0.25) < 0.05) and len(task.held_labels) == ot.HELD_OUT
    assert np.allclose(np.linalg.norm(task.held_features, axis=1), 1.0)
    assert not np.any(np.isclose(task.held_features @ task.features.T, 1.0))  # no trained sample held out
    again = ot.held_out(SPEC)
    assert np.array_equal(again[0], task.held_features) and np.array_equal(again[1], task.held_labels)
    assert ot.task_of(generator.DatasetSpec(samples=64, profile="tiny")) is None  # no classes, no task


def test_the_training_figures_are_in_the_cells_line_and_the_report():
    cell = Cell((StrategyChoice("storage", "mmap"), StrategyChoice("sampler", "test_sequential")))
    records = [rank_record(r, {0: list(range(r * 256, r * 256 + 160))}, [16] * 8) for r in range(2)]
    sc = SimpleNamespace(name="t", dataset=SPEC, training=SimpleNamespace(workload="features", batch_size=16))
    line = cell_line(sc, cell, "V100 (emulated)", True, records, 1.0)
    f = line["figures"]
    expected = ot.training_figures(ot.task_of(SPEC), ot.order_steps(sequential_orders()))
    assert f["order_train_steps"] == 8 and f["order_train_seeds"] == ot.SEEDS
    assert f["order_train_ratio"] == pytest.approx(expected.ratio, abs=1e-6)  # the window's last 8 batches
    assert f["order_train_ratio_low"] > 1
    read = CellResult.from_json(json.loads(json.dumps(line)))
    assert read.to_json() == line and read.figures.order_train_ratio == f["order_train_ratio"]
    table = training_table(merge_repeats([read]))
    assert table.title == f"Training after 8 steps, {ot.SEEDS} seeds: held-out loss against the ideal shuffle's"
    row = table.rows[0]
    assert row[-1] == "no: trains worse" and row[-3].startswith(f"x{f['order_train_ratio']:.3f} [")
    assert row[-4] == f"{f['order_train_loss']:.3f} vs {f['order_train_loss_shuffle']:.3f}"
    plain = dict(line, figures={k: v for k, v in f.items() if not k.startswith("order_train")})
    assert training_table(merge_repeats([CellResult.from_json(plain)])).rows == []  # an older line: no row

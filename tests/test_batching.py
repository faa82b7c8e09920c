"""Budget-based (`dynamic`) and feedback-controlled (`adaptive`) batching."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, SequentialSampler

import strategies.batching.adaptive  # noqa: F401  (register before they are builtins)
import strategies.batching.dynamic  # noqa: F401
import strategies.sampler.balanced  # noqa: F401
from strategies import registry
from strategies.protocols import Batching

IMAGE_SIZE = 224


def cc3m_shapes(n: int, seed: int = 0) -> np.ndarray:
    """(h, w) after resizing the longer side to IMAGE_SIZE; log-normal sides and aspect ratios like CC3M."""
    rng = np.random.default_rng(seed)
    long = np.clip(rng.lognormal(np.log(500), 0.45, n), 64, 1600)
    aspect = np.clip(rng.lognormal(np.log(4 / 3), 0.35, n), 1 / 3, 3)  # width / height
    h, w = np.where(aspect >= 1, long / aspect, long), np.where(aspect >= 1, long, long * aspect)
    scale = IMAGE_SIZE / np.maximum(h, w)
    return np.maximum(1, np.round(np.stack([h, w], axis=1) * scale[:, None])).astype(np.int64)


class PaddedPixels:
    """The pixels workload's batch cost: len(batch) * max_h * max_w."""

    def __init__(self, shapes: np.ndarray) -> None:
        self.shapes = shapes

    def __call__(self, indices: list[int]) -> float:
        hw = self.shapes[indices]
        return float(len(indices) * hw[:, 0].max() * hw[:, 1].max())


def dynamic(sampler, shapes, budget, batch_size=16, **params):
    return registry.create("batching", "dynamic", **params).batch_sampler(
        sampler, batch_size, batch_cost=PaddedPixels(shapes), budget=budget,
        sort_key=shapes[:, 0] / shapes[:, 1])


def padding_waste(batches, shapes) -> float:
    cost = PaddedPixels(shapes)
    real = sum(float((shapes[b, 0] * shapes[b, 1]).sum()) for b in batches)
    return 1 - real / sum(cost(b) for b in batches)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 300), batch_size=st.integers(1, 32), budget_images=st.floats(0.5, 64),
       max_batch=st.integers(0, 64), bucket=st.booleans(), window=st.integers(0, 50),
       fraction=st.floats(0.1, 1.0), seed=st.integers(0, 1000))
def test_dynamic_budget_and_coverage(n, batch_size, budget_images, max_batch, bucket, window, fraction, seed):
    shapes = cc3m_shapes(n, seed)
    budget = budget_images * IMAGE_SIZE**2
    bs = dynamic(SequentialSampler(range(n)), shapes, budget, batch_size, max_batch=max_batch, bucket=bucket,
                 bucket_window=window, budget_fraction=fraction)
    batches = list(bs)
    assert sorted(i for b in batches for i in b) == list(range(n))  # every index exactly once
    limit = budget * fraction
    cost = PaddedPixels(shapes)
    for b in batches:
        assert 1 <= len(b) <= (max_batch or 4 * batch_size)
        if len(b) >= 2:
            assert cost(b) <= limit
    assert len(bs) == len(batches) and list(bs) == batches  # exact length, deterministic


def test_sample_over_budget_is_alone_and_min_batch_floor():
    shapes = np.array([[10, 10], [100, 100], [10, 10], [10, 10]])
    batches = list(dynamic(SequentialSampler(range(4)), shapes, budget=1000, bucket=False, budget_fraction=1.0))
    assert batches == [[0], [1], [2, 3]]
    forced = list(dynamic(SequentialSampler(range(4)), shapes, budget=1000, bucket=False, min_batch=2,
                          budget_fraction=1.0))
    assert forced == [[0, 1], [2, 3]]  # over budget, left to the harness's OOM safety net


def test_bucketing_cuts_padding_waste_and_steps():
    n = 4000
    shapes = cc3m_shapes(n, seed=1)
    sampler = registry.create("sampler", "default").sampler(n, 1, 0, 5)
    budget = 32 * IMAGE_SIZE**2
    plain = list(dynamic(sampler, shapes, budget, bucket=False))
    bucketed = list(dynamic(sampler, shapes, budget, bucket=True))  # window 8 x 16
    wide = list(dynamic(sampler, shapes, budget, bucket=True, bucket_window=512))
    fixed = list(registry.create("batching", "fixed").batch_sampler(sampler, 16))
    waste = {k: padding_waste(b, shapes) for k, b in
             {"plain": plain, "bucketed": bucketed, "wide": wide, "fixed": fixed}.items()}
    assert waste["bucketed"] < 0.8 * waste["plain"]
    assert waste["bucketed"] < 0.8 * waste["fixed"]
    assert waste["wide"] < 0.5 * waste["bucketed"]
    assert len(wide) < len(bucketed) < len(plain)  # less padding, more samples per budget


def test_dynamic_over_balanced_sampler_covers_each_rank():
    n, world = 301, 3
    shapes = cc3m_shapes(n, seed=2)
    costs = (shapes[:, 0] * shapes[:, 1]).astype(float)
    seen = []
    for rank in range(world):
        s = registry.create("sampler", "balanced").sampler(n, world, rank, 9, costs=costs, batch_size=8)
        s.set_epoch(2)
        bs = dynamic(s, shapes, 24 * IMAGE_SIZE**2, batch_size=8)
        batches = list(bs)
        assert sorted(i for b in batches for i in b) == sorted(s)
        assert len(bs) == len(batches)
        seen += list(s)
    assert set(seen) == set(range(n))


def test_dynamic_rejects_bad_params():
    with pytest.raises(ValueError):
        registry.create("batching", "dynamic", min_batch=0)
    with pytest.raises(ValueError):
        registry.create("batching", "dynamic", budget_fraction=1.5)
    with pytest.raises(ValueError):
        dynamic(SequentialSampler(range(3)), cc3m_shapes(3), 1e9, batch_size=2, min_batch=9)


def adaptive(n, batch_size=8, **params):
    return registry.create("batching", "adaptive", **params).batch_sampler(
        SequentialSampler(range(n)), batch_size, batch_cost=len, budget=1.0, sort_key=np.zeros(n))


def test_adaptive_follows_observe_on_the_strategy():
    strategy = registry.create("batching", "adaptive")
    strategy.observe(0.1)  # before any batch sampler exists: nothing to report to, no error
    bs = strategy.batch_sampler(SequentialSampler(range(1000)), 8)  # min 2, max 32
    it = iter(bs)
    sizes = [len(next(it))]
    for reading in [0.1, 0.1, 0.1, 0.7, 0.5, 0.9, 0.99, 0.99, 0.99, 0.99, 0.7]:
        strategy.observe(reading)  # what the training loop calls
        sizes.append(len(next(it)))
    assert sizes == [8, 16, 32, 32, 32, 32, 16, 8, 4, 2, 2, 2]
    sizes.append(len(next(it)))  # no new report: the size stays
    assert sizes[-1] == 2


def test_adaptive_only_latest_report_counts():
    bs = adaptive(100, batch_size=8)
    it = iter(bs)
    next(it)
    bs.observe(0.1)
    bs.observe(0.95)
    assert len(next(it)) == 4


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 300), batch_size=st.integers(1, 32),
       readings=st.lists(st.floats(0.0, 1.5), max_size=80))
def test_adaptive_covers_every_index_once(n, batch_size, readings):
    bs = adaptive(n, batch_size)
    assert len(bs) == -(-n // batch_size)
    out = []
    for k, b in enumerate(bs):
        out += b
        assert bs.min_batch <= len(b) <= bs.max_batch or len(out) == n  # only the last may be short
        if k < len(readings):
            bs.observe(readings[k])
    assert out == list(range(n))


def test_adaptive_in_a_dataloader_without_workers():
    bs = adaptive(200, batch_size=8)
    sizes = []
    for batch in DataLoader(range(200), batch_sampler=bs):
        sizes.append(len(batch))
        bs.observe(0.1 if len(batch) < 32 else 0.7)
    assert sizes[:4] == [8, 16, 32, 32] and sum(sizes) == 200


@pytest.mark.parametrize("name, splits", [("fixed", False), ("dynamic", True), ("adaptive", False)])
def test_protocol_members(name, splits):
    strategy = registry.create("batching", name)
    assert isinstance(strategy, Batching) and strategy.splits_on_oom is splits
    bs = strategy.batch_sampler(SequentialSampler(range(10)), 4, batch_cost=len, budget=100.0,
                                sort_key=np.zeros(10))
    strategy.observe(0.5)  # a no-op for fixed and dynamic
    assert sorted(i for b in bs for i in b) == list(range(10))


@pytest.mark.parametrize("params, message", [
    ({"bucket": "yes"}, "bucket must be true or false"), ({"max_batch": 2.5}, "max_batch must be an integer"),
    ({"min_batch": 8, "max_batch": 4}, "min_batch 8 exceeds max_batch 4"),
    ({"budget_fraction": 0}, r"budget_fraction must be a finite number in \(0, 1\]")])
def test_dynamic_checks_parameter_values(params, message):
    with pytest.raises(ValueError, match=message):
        registry.create("batching", "dynamic", **params)


def test_adaptive_rejects_bad_params():
    with pytest.raises(ValueError):
        registry.create("batching", "adaptive", low=0.9, high=0.5)
    with pytest.raises(ValueError, match="min_batch must be an integer"):
        registry.create("batching", "adaptive", min_batch="2")
    with pytest.raises(ValueError):
        adaptive(10, batch_size=8, max_batch=4)

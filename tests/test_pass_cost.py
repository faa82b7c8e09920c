"""What a visit costs outside its measured window (issue: cheaper passes): work that does not change between
the visits of a run is done once per rank."""
import numpy as np
import pytest

from harness.data.generator import DatasetSpec, image_sides
from harness.train import pipeline


def test_the_dataset_sides_are_drawn_once_per_process_and_shared_read_only(monkeypatch):
    calls = []

    def counted(spec):
        calls.append(spec)
        return image_sides(spec)

    pipeline.dataset_sides.cache_clear()
    monkeypatch.setattr(pipeline, "image_sides", counted)
    spec = DatasetSpec(samples=50, seed=3)
    first = pipeline.dataset_sides(spec)
    again = pipeline.dataset_sides(DatasetSpec(samples=50, seed=3))  # an equal spec: the next visit's
    assert calls == [spec] and again is first
    np.testing.assert_array_equal(first, image_sides(spec))  # the same figures as drawing them anew
    with pytest.raises(ValueError):  # shared by every visit: no visit may change them
        first[0, 0] = 1
    other = pipeline.dataset_sides(DatasetSpec(samples=50, seed=4))
    assert len(calls) == 2 and not np.array_equal(other, first)
    pipeline.dataset_sides.cache_clear()

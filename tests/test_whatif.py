"""harness.report.whatif: the modelled throughput at N loader cores per rank."""
from __future__ import annotations

import math

import pytest

from harness.report import whatif
from harness.results.cellresult import CellResult


def test_prediction_by_hand():
    # 0.01 CPU s per sample: 2 cores feed 200 samples/s per rank; the device takes 300: loader-bound
    assert whatif.predicted_samples_per_s(4, 300.0, 0.01, 2.0) == pytest.approx(4 * 200.0)
    assert whatif.limited_by(300.0, 0.01, 2.0) == "host"
    # 4 cores feed 400 > 300: device-bound
    assert whatif.predicted_samples_per_s(4, 300.0, 0.01, 4.0) == pytest.approx(4 * 300.0)
    assert whatif.limited_by(300.0, 0.01, 4.0) == "device"
    # fractional cores
    assert whatif.predicted_samples_per_s(1, 1000.0, 0.004, 0.5) == pytest.approx(125.0)
    # a loader that costs nothing: the device alone
    assert whatif.predicted_samples_per_s(2, 50.0, 0.0, 1.0) == 100.0


@pytest.mark.parametrize("args", [(0, 1.0, 0.1, 1.0), (1, 1.0, 0.1, 0.0), (1, 1.0, 0.1, -2.0),
                                  (1, -1.0, 0.1, 1.0), (1, 1.0, -0.1, 1.0), (1, 1.0, 0.1, math.nan)])
def test_bad_inputs(args):
    with pytest.raises(ValueError):
        whatif.predicted_samples_per_s(*args)


def test_predict_from_a_cell_and_old_lines():
    line = {"cell": "storage=raw", "world_size": 4,
            "figures": {"throughput": 100.0, "device_samples_per_s": 250.0, "loader_cpu_s_per_sample": 0.02}}
    assert whatif.predict(CellResult.from_json(line), 3.0) == pytest.approx(4 * 150.0)
    old = {"cell": "storage=raw", "world_size": 4, "figures": {"throughput": 100.0}}
    assert whatif.predict(CellResult.from_json(old), 3.0) is None
    errored = {**line, "error": "OOM"}
    assert whatif.predict(CellResult.from_json(errored), 3.0) is None
    assert whatif.column_header(2.5) == "predicted samples/s at 2.5 cores/rank* (modelled)"


def test_the_rank_shares_the_cores_and_a_worker_is_one_core():
    # loader 3 ms + rank 1 ms per sample on 2 cores: 500 samples/s per rank, below the device's 800
    assert whatif.predicted_samples_per_s(2, 800.0, 0.003, 2.0, rank_cpu_s_per_sample=0.001) == \
        pytest.approx(2 * 500.0)
    assert whatif.limited_by(800.0, 0.003, 2.0, 0.001) == "host"
    # one worker cannot use more than one core: 333 samples/s however many cores
    assert whatif.predicted_samples_per_s(1, 800.0, 0.003, 8.0, rank_cpu_s_per_sample=0.001, workers=1) == \
        pytest.approx(1 / 0.003)
    assert whatif.predicted_samples_per_s(1, 800.0, 0.003, 8.0, rank_cpu_s_per_sample=0.001) == 800.0

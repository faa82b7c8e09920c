"""The order figures in the report beside samples/s, decided against the ideal shuffle's spread, and fitted as
effects (effects.jsonl) like every other figure; lines without them change nothing."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from harness.analysis.effects import ORDER_FIGURES, order_effects
from harness.report import effecttables, report, tables
from harness.results import orderquality as oq
from harness.results.cellresult import CellResult
from harness.results.repeats import merge_repeats

SHUFFLE = {"order_units_per_batch": 7.55, "order_units_ideal": 7.6, "order_units_ideal_sd": 0.05,
           "order_position_rho": 0.01, "order_position_ideal_sd": 0.02, "order_label_tv": 0.30,
           "order_label_tv_ideal": 0.31, "order_label_tv_ideal_sd": 0.01,
           "order_train_ratio": 1.0, "order_train_ratio_low": 0.98, "order_train_ratio_high": 1.02,
           **{"order_train_steps": 16, "order_train_seeds": 8, "order_train_loss": 1.0, "order_train_loss_shuffle": 1.0,
              "order_train_accuracy": 0.7, "order_train_accuracy_shuffle": 0.7}}
STREAM = {"order_units_per_batch": 1.2, "order_units_ideal": 7.6, "order_units_ideal_sd": 0.05,
          "order_position_rho": 0.2, "order_position_ideal_sd": 0.02, "order_label_tv": 0.85,
          "order_label_tv_ideal": 0.31, "order_label_tv_ideal_sd": 0.01,
          "order_train_ratio": 1.7, "order_train_ratio_low": 1.68, "order_train_ratio_high": 1.72,
          **{"order_train_steps": 16, "order_train_seeds": 8, "order_train_loss": 1.7, "order_train_loss_shuffle": 1.0,
             "order_train_accuracy": 0.4, "order_train_accuracy_shuffle": 0.7}}


def ratios(f: dict) -> dict:
    return {"order_units_ratio": f["order_units_per_batch"] / f["order_units_ideal"],
            "order_position_mixing": 1 - abs(f["order_position_rho"]),
            "order_label_ratio": f["order_label_tv_ideal"] / f["order_label_tv"]}


def line(sampler: str, storage: str, repeat: int, rng: np.random.Generator, order: dict | None) -> CellResult:
    thr = 1000.0 * (1.4 if sampler == "shards" else 1.0) * (1.1 if storage == "webdataset" else 1.0)
    thr *= float(np.exp(rng.normal(0, 0.01)))
    f = {"throughput": thr, "throughput_ci": [thr * 0.95, thr * 1.05], "throughput_ci_label": "95% CI",
         "au_pct": 50.0, "device_peak_gb": 1.0, "host_pss_peak_mb": 500.0}
    if order is not None:
        jitter = 1 + 0.01 * rng.normal() if sampler == "shards" else 1.0  # the stream differs a little by storage
        o = dict(order, order_units_per_batch=order["order_units_per_batch"] * jitter)
        f.update(o, **ratios(o))
    return CellResult.from_json({"schema": 2, "cell": f"storage={storage},sampler={sampler}", "repeat": repeat,
                                 "strategies": {"storage": storage, "sampler": sampler},
                                 "device": "V100-16GB (emulated)", "emulated": True, "world_size": 2,
                                 "figures": f})


def run(with_order: bool = True) -> list[CellResult]:
    rng = np.random.default_rng(0)
    return [line(sampler, storage, repeat, rng, (STREAM if sampler == "shards" else SHUFFLE) if with_order else None)
            for repeat in range(2) for storage, sampler in itertools.product(("raw", "webdataset"),
                                                                             ("default", "shards"))]


def test_the_order_effects_are_fitted_and_written_to_effects_jsonl(tmp_path):
    results = run()
    fitted = effecttables.run_effects(results)
    main = {(e.figure, e.axis, e.level): e for e in fitted if e.kind == "main"}
    assert set(ORDER_FIGURES) <= {e.figure for e in fitted}
    units = main[("order_units", "sampler", "shards")]
    assert units.reference == "default" and units.ratio == pytest.approx(1.2 / 7.55, rel=0.02) and units.high < 1
    assert main[("throughput", "sampler", "shards")].low > 1.3  # faster ...
    assert main[("order_labels", "sampler", "shards")].ratio == pytest.approx(0.31 / 0.85 / (0.31 / 0.30), rel=0.02)
    training = main[("order_training", "sampler", "shards")]  # the held-out loss: x1.7 a shuffle's, decided
    assert training.ratio == pytest.approx(1.7, rel=0.01) and training.low > 1.5
    effecttables.write_effects(tmp_path, fitted)
    assert effecttables.read_effects(tmp_path) == fitted
    table = tables.order_effects_table(fitted, passes=2)
    row = next(r for r in table.rows if r[:2] == ["sampler", "shards"])
    assert row[3].startswith("x1.4") and "higher" in row[3] and row[4].startswith("x0.16") and "lower" in row[4]


def test_a_difference_within_the_draws_noise_is_not_decided():
    """Two samplers that are both shuffles differ by a draw's noise only; their repeats agree exactly (the order
    is a pure function of the seeds), so without the noise floor the fit would decide the difference."""
    rng = np.random.default_rng(1)
    other = dict(SHUFFLE, order_units_per_batch=7.62, order_label_tv=0.305)
    results = [line(sampler, storage, repeat, rng, SHUFFLE if sampler == "default" else other)
               for repeat in range(2) for storage, sampler in itertools.product(("raw", "webdataset"),
                                                                                ("default", "balanced"))]
    fitted = {(e.figure, e.level): e for e in order_effects(results, effecttables.level_order(results))}
    units = fitted[("order_units", "balanced")]
    assert units.ratio == pytest.approx(7.62 / 7.55) and not units.decided
    assert units.low < 1 < units.high and not fitted[("order_labels", "balanced")].decided


def test_lines_without_order_figures_fit_no_order_effect():
    results = run(with_order=False)
    assert order_effects(results, effecttables.level_order(results)) == []
    assert {e.figure for e in effecttables.run_effects(results)} == set(effecttables.FIGURES) - {"host_rate"}  # no CPU
    assert tables.order_effects_table(effecttables.run_effects(results)).rows == []
    assert tables.order_table(merge_repeats(results)).rows == []


def test_the_order_table_shows_each_figure_against_the_shuffle_beside_samples_per_s():
    cells = merge_repeats(run())
    table = tables.order_table(cells)
    by = {tuple(r[:2]): r for r in table.rows}
    shuffle, stream = by[("raw", "default")], by[("raw", "shards")]
    assert table.headers[2].startswith("samples/s")
    assert shuffle[3] == "7.55 vs 7.60 +- 0.05 as a shuffle" and shuffle[6] == "yes"
    assert stream[3].endswith("less mixed") and stream[4] == "0.200 vs 0.000 +- 0.020 less mixed"
    assert stream[6] == "no: units, position, labels"
    text = report.render(run(), fitted=effecttables.run_effects(run()))
    assert "Order: how random each cell's batches were" in text and "Effect of each choice on speed and" in text


def test_the_decisions_follow_the_ideal_spread():
    f = merge_repeats(run())[0].figures
    assert tables.order_decisions(f) == {"units": oq.AS_SHUFFLE, "position": oq.AS_SHUFFLE, "labels": oq.AS_SHUFFLE}
    assert oq.decision(7.9, 7.6, 0.05, ordered_above=False) == oq.MORE_EVEN
    assert oq.decision(0.2, 0.31, 0.01, ordered_above=True) == oq.MORE_EVEN
    assert oq.decision(7.6 - 1.95 * 0.05, 7.6, 0.05, ordered_above=False) == oq.AS_SHUFFLE
    assert oq.decision(7.6 - 1.97 * 0.05, 7.6, 0.05, ordered_above=False) == oq.LESS_MIXED

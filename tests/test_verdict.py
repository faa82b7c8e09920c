"""The answer first: harness.report.effecttables (the fits of a run, effects.jsonl, the table) and
harness.report.verdict (the fastest set, the effects, what binds), on synthetic cell lines."""
from __future__ import annotations

import itertools
import json

import numpy as np

from harness.report import effecttables, report, verdict
from harness.results.cellresult import CellResult
from harness.results.environment import Environment
from harness.results.repeats import merge_repeats

LEVELS = {"storage": ["raw", "mmap"], "cache": ["none", "lru"]}
TRUE = {"mmap": 1.3, "lru": 1.0}  # mmap 30% faster, the cache changes nothing


def line(storage, cache, repeat, thr, **figures) -> CellResult:
    f = {"throughput": thr, "throughput_ci": [thr * 0.97, thr * 1.03], "throughput_ci_label": "95% CI",
         "au_pct": 50.0 * thr / 1000, "stall_mean_pct": 30.0, "cores_to_feed": 1.5, "device_peak_gb": 4.0,
         "host_pss_peak_mb": 900.0, **figures}
    return CellResult.from_json({"schema": 2, "cell": f"storage={storage},cache={cache}", "repeat": repeat,
                                 "strategies": {"storage": storage, "cache": cache}, "emulated": True,
                                 "world_size": 2, "device": "V100-16GB (emulated)", "figures": f})


def run(passes=3, seed=0, **figures) -> list[CellResult]:
    rng = np.random.default_rng(seed)
    out = []
    for repeat in range(passes):
        for storage, cache in itertools.product(*LEVELS.values()):
            thr = 1000.0 * TRUE.get(storage, 1.0) * TRUE.get(cache, 1.0) * (1 + 0.1 * repeat)
            out.append(line(storage, cache, repeat, thr * float(np.exp(rng.normal(0, 0.01))), **figures))
    return out


def test_the_effects_of_a_run_find_the_planted_difference_and_write_effects_jsonl(tmp_path):
    ids = ["storage=raw,cache=none", "storage=raw,cache=lru", "storage=mmap,cache=none", "storage=mmap,cache=lru"]
    fitted = effecttables.run_effects(list(reversed(run())), ids)  # visited in another order than the matrix
    main = {(e.figure, e.axis, e.level): e for e in fitted if e.kind == "main"}
    assert main[("throughput", "storage", "mmap")].reference == "raw"  # the matrix's first level
    assert main[("throughput", "storage", "mmap")].low > 1.25 and main[("throughput", "cache", "lru")].low < 1
    assert {e.figure for e in fitted} == set(effecttables.FIGURES) - {"host_rate"}  # no CPU per sample here
    path = effecttables.write_effects(tmp_path, fitted)
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    assert {"figure", "axis", "level", "ratio", "low", "high"} <= set(rows[0]) and len(rows) == len(fitted)
    table = effecttables.effects_table(fitted, emulated=True)
    assert ["storage", "mmap", "vs raw"] == table.rows[1][:3] and "higher" in table.rows[1][3]
    assert "no effect larger than 5%" in table.rows[3][3]  # x1.00 [0.99, 1.01]: decided both ways


def test_the_verdict_names_the_fastest_set_the_effects_and_what_binds():
    results = run()
    lines = verdict.verdict_lines(merge_repeats(results), effecttables.run_effects(results), cpu_count=2,
                                  passes=3)
    assert lines[0].startswith("FASTEST: mmap/") and "the highest of 4 cell medians: biased upward" in lines[0]
    assert lines[1].startswith("  overlapping it: 1 of 3 other cells (each cell's range over its visits; a spread")
    one = verdict.fastest_lines(merge_repeats(run(passes=1)))
    assert "(each cell's interval within its visit;" in one[1]
    assert any(x.startswith("  storage=mmap vs raw: higher: x1.3") for x in lines)
    assert any("cache=lru vs none" in x and "no effect larger than 5%" in x for x in lines)  # x1.00, narrow
    assert lines[-1].startswith("BINDS: the host's CPU: feeding the device needs 1.5 cores per rank")
    device_bound = verdict.binds_line(merge_repeats(run(au_pct=95.0)), cpu_count=64)
    assert device_bound.startswith("BINDS: the device")
    assert verdict.effect_lines([])[0].startswith("EFFECTS: too few visits")


def test_the_report_opens_with_the_verdict_and_warns_of_outside_load():
    results = run()
    results[2].figures = results[2].figures.replace(other_cpu_pct=35.0)
    env = Environment(cpu_count=2, settings={"cells": [r.cell for r in results[:4]]})
    text = report.render(results, env, fitted=effecttables.run_effects(results))
    assert text.startswith("FASTEST: ")
    assert "WARNING: other processes used more than 10% of this host's CPU during 1 of 12 visit(s)" in text
    assert "Effect of each choice" in text.split("Throughput")[0]

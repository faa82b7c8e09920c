"""The loader's per-stage profile: each batch's account (harness.train.stagetimer) made by the real Dataset and
collate, the window's accounts in the rank record (rankrecord.window_stages), their JSON form, the per-cell
aggregate (harness.analysis.stages), the report's table and plot, and the target's parsing."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from harness.analysis import stages
from harness.config import target as target_mod
from harness.data.generator import DatasetSpec, generate_sample
from harness.errors import UsageError
from harness.measure.rankrecord import STAGES, RankRecord, window_stages
from harness.report import stagetable
from harness.results.cellresult import CellResult
from harness.train.batches import ConsumedIndices, StageLog
from harness.train.stagetimer import STAGE_KEY
from harness.train.torchdataset import Collate, SampleDataset
from strategies import registry

SPEC = DatasetSpec(samples=8, profile="tiny")


class Reader:
    def __len__(self) -> int:
        return SPEC.samples

    def read_batch(self, indices):
        return [generate_sample(SPEC, i) for i in indices]


@pytest.mark.parametrize("cache", ["none", "lru"])
def test_a_batch_carries_the_account_of_its_stages(cache):
    params = {"capacity_mb": 1, "scope": "worker", "level": "decoded"} if cache == "lru" else {}
    ds = SampleDataset(Reader(), "pixels", 32, cache=registry.create("cache", cache, **params),
                       preprocess=registry.create("preprocess", "host"), decoder="pil")
    batch = Collate(normalise=True)(ds.__getitems__([0, 1, 2, 3]))
    account = batch[STAGE_KEY]
    assert {"read", "decode", "transform", "collate"} <= set(account)
    assert all(account[s] >= 0 for s in STAGES if s in account)
    assert account["decode"] > 0  # four real JPEG decodes take more than a clock tick of CPU
    assert "send" not in account  # not in a DataLoader worker: nothing to hand over


def test_the_window_takes_the_last_batches_and_skips_shadow_steps():
    log = StageLog()
    for n in range(5):
        log.append({"pid": 1, "read": 1.0, "decode": float(n)}, 10)
    out = window_stages(log, [10, 10, 0])  # two real batches, one shadow step
    assert out["samples"] == 20 and out["batches"] == 2 and out["s"]["decode"] == 3 + 4
    assert out["s"]["read"] == 2.0 and out["processes"] == 1 and set(out["s"]) == set(STAGES)
    assert window_stages(log, [0, 0]) is None and window_stages(None, [10]) is None


def test_a_rank_record_takes_its_stages_from_the_consumed_log_and_keeps_them_in_json():
    consumed = ConsumedIndices()
    consumed[0] = [0, 1]
    consumed.stages.append({"pid": 7, "decode": 0.5, "collate": 0.1}, 2)
    r = RankRecord(batch_sizes=[2], samples=2, consumed=consumed)
    assert r.stages["s"]["decode"] == 0.5 and type(r.consumed) is dict and r.consumed == {0: [0, 1]}
    line = json.loads(json.dumps(r.to_json()))
    assert line["stages"]["samples"] == 2
    assert RankRecord.from_json(line).stages == r.stages
    old = {k: v for k, v in line.items() if k != "stages"}  # a line written before stages existed
    assert RankRecord.from_json(old).stages is None and "stages" not in RankRecord.from_json(old).to_json()


def record(rank: int, decode: float, loader_cpu: float, samples: int = 100, workers: int = 1) -> RankRecord:
    seconds = dict.fromkeys(STAGES, 0.0) | {"decode": decode, "read": 0.1, "receive": 0.05}
    return RankRecord(rank=rank, samples=samples, batch_sizes=[samples], h2d=[0.02], step=[1.0], steps=1,
                      workers=workers, loader="workers", loader_cpu_s=loader_cpu, rank_cpu_s=0.2,
                      nbytes=samples * 1000, padded_pixels=samples * 50,
                      stages={"s": seconds, "samples": samples, "batches": 1, "processes": 1})


def test_the_cell_profile_pools_its_ranks_and_checks_against_proc():
    # /proc saw 1.25 s of loader CPU per rank, the timed stages 1.0 s (read 0.1, decode 0.9): 0.25 s untimed
    prof = stages.profile([record(0, 0.9, 1.25), record(1, 0.9, 1.25)])
    assert prof.per_sample["decode"] == pytest.approx(0.009) and prof.per_sample["h2d"] == pytest.approx(0.0002)
    assert prof.loader_s == pytest.approx(0.010)  # decode + read; receive runs in the rank
    assert prof.proc_loader_s == pytest.approx(0.0125) and prof.untimed_s == pytest.approx(0.0025)
    assert prof.coverage == pytest.approx(0.8)  # the timed stages over /proc: below 1 by the untimed share
    assert prof.per_sample["queue"] == 0.0 and "untimed" not in prof.per_sample  # no stage absorbs it
    assert sum(prof.shares().values()) == pytest.approx(100)
    exact = stages.profile([record(0, 0.9, 1.0)])  # /proc equal to the stages: nothing untimed
    assert exact.coverage == pytest.approx(1.0) and exact.untimed_s == pytest.approx(0.0)
    mixed = stages.profile([record(0, 0.9, 1.0), record(1, 0.4, 2.0)])  # pooled: samples, then the ratio
    assert mixed.loader_s == pytest.approx(0.0075) and mixed.proc_loader_s == pytest.approx(0.015)
    assert mixed.coverage == pytest.approx(0.5) and mixed.untimed_s == pytest.approx(0.0075)
    assert stages.profile([RankRecord(samples=10)]) is None  # an older line: no stages
    inline = stages.profile([record(0, 0.9, 0.0, workers=0)])
    assert inline.proc_loader_s is None and inline.coverage is None and inline.untimed_s is None


def test_the_costs_of_a_cell_for_the_model():
    c = stages.costs([record(0, 0.9, 1.0)], {"rank_cpu_s_per_sample": 0.002, "step_imbalance": 1.1}, "pixels")
    assert c.loader_s == pytest.approx(0.010) and c.rank_s == 0.002 and c.step_imbalance == 1.1
    assert c.bytes_per_sample == 1000 and c.padded_pixels_per_sample == 50
    assert c.stages["decode"] == pytest.approx(0.009)
    # the loader's whole /proc CPU is the model's: the timed stages and the untimed share beside them
    u = stages.costs([record(0, 0.9, 1.25)], {"rank_cpu_s_per_sample": 0.002}, "pixels")
    assert u.loader_s == pytest.approx(0.0125) and u.stages["untimed"] == pytest.approx(0.0025)
    assert sum(u.stages.values()) == pytest.approx(u.loader_s) and u.stages["queue"] == 0.0
    inline = stages.costs([record(0, 0.9, 0.0, workers=0)], {"rank_cpu_s_per_sample": 0.002}, "pixels")
    assert inline.loader_s == pytest.approx(0.010) and "untimed" not in inline.stages  # no /proc figure


def test_the_decode_limit_ratio_is_the_loaders_cpu_over_its_decode_alone():
    """/proc saw 12.5 ms of loader CPU per sample where decode took 9: x1.39 of the decode limit; it reaches
    cells.jsonl through the cell's figures (the records' device time makes feeding() count them)."""
    from harness.results import metrics

    recs = [replace(record(0, 0.9, 1.25), device=[0.5]), replace(record(1, 0.9, 1.25), device=[0.5])]
    assert metrics.cell_figures(recs)["decode_limit_ratio"] == pytest.approx(12.5 / 9)
    nodecode = replace(record(0, 0.0, 1.25), device=[0.5])  # features: no decode stage, no ratio
    assert "decode_limit_ratio" not in metrics.cell_figures([nodecode])


def test_the_table_and_the_plot(tmp_path):
    cell = CellResult(cell="storage=raw", names={"storage": "raw"}, strategies={"storage": "raw"},
                      figures={"throughput": 10.0, "rank_cpu_s_per_sample": 0.002}, workload="pixels",
                      ranks=[record(0, 0.9, 1.25)], emulated=True, device="V100-16GB (emulated)")
    cell = CellResult.from_json(cell.to_json())
    table = stagetable.stage_table([cell])
    row = dict(zip(table.headers, table.rows[0]))
    assert row["decode"] == "9.000" and row["queue"] == "0.000" and row["untimed"] == "2.500"
    assert row["timed"] == "10.000" and row["/proc"] == "12.500" and row["of /proc %"] == "80"
    assert row["x decode"] == "-"  # a line without the figure (written before it existed)
    line = cell.to_json()
    shown = CellResult.from_json({**line, "figures": {**line["figures"], "decode_limit_ratio": 1.389}})
    assert dict(zip(table.headers, stagetable.stage_table([shown]).rows[0]))["x decode"] == "1.39"
    assert stagetable.stage_plot([cell], tmp_path / "stages.png").stat().st_size > 0
    t = target_mod.Target(gpus_per_node=4, cores_per_node=32.0, accelerator="V100-16GB")
    rows = stagetable.target_table([cell], t).rows
    assert len(rows) == 1 and rows[0][4] in ("device", "loader workers", "loader CPU")


def test_a_target_from_a_file_and_its_mistakes(tmp_path):
    f = tmp_path / "t.toml"
    f.write_text('[target]\nnodes = 2\ngpus_per_node = 4\ncores_per_node = 32\naccelerator = "V100-16GB"\n'
                 'storage_read_mb_s = 2000\npage_cache = "cold"\n')
    t = target_mod.load_file(f, {"workers_per_rank": 3, "batch_size": 16})
    assert t.ranks == 8 and t.workers_per_rank == 3 and t.page_cache == "cold" and "2 node(s)" in t.describe()
    for text, named in (("cores_per_node = 0", "cores_per_node"), ('page_cache = "hot"', "page_cache"),
                        ('accelerator = "TPU"', "accelerator"), ("gpus = 3", "gpus"),
                        ("nodes = 1.5", "nodes")):
        head = "" if text.startswith("accelerator") else 'accelerator = "V100-16GB"\n'
        f.write_text(f"[target]\n{head}{text}\n")
        with pytest.raises(UsageError, match=named):
            target_mod.load_file(f)
    with pytest.raises(UsageError, match="no such file"):
        target_mod.load_file(tmp_path / "missing.toml")


def test_the_target_table_costs_each_storage_its_requests_and_names_the_defaults_it_uses():
    """A raw sample is two files (two requests on a cold read), a packed storage's one: on a cold target
    bound by its IOPS, raw gets half the rate; the table's note names every cost a run does not measure."""
    from harness.report.stagetable import target_table

    def cell(storage: str) -> CellResult:
        line = CellResult(cell=f"storage={storage}", names={"storage": storage}, strategies={"storage": storage},
                          figures={"throughput": 10.0, "rank_cpu_s_per_sample": 1e-5}, workload="pixels",
                          ranks=[record(0, 0.9, 1.0)], emulated=True, device="V100-16GB (emulated)")
        return CellResult.from_json(line.to_json())

    target = target_mod.Target(gpus_per_node=1, cores_per_node=64, accelerator="V100-16GB", page_cache="cold",
                               storage_iops=100.0, workers_per_rank=8, batch_size=32)
    table = target_table([cell("raw"), cell("mmap")], target)
    rate = {row[0]: float(row[1]) for row in table.rows}
    assert rate["raw"] == pytest.approx(50, rel=0.02) and rate["mmap"] == pytest.approx(100, rel=0.02)
    assert all(row[4] == "storage ops/s" for row in table.rows)
    note = " ".join(table.notes)
    assert "contention 1" in note and "cold read" in note and "raw (2)" in note


def test_the_target_report_command_from_a_run_directory(tmp_path, capsys):
    """harness.commands.target_report's main, given its Request as harness.cli builds it: the target's line,
    the stage and target tables and plots/stages.png, from cells.jsonl alone (no env.json, no scenario file)."""
    from harness.commands import target_report

    cell = CellResult(cell="storage=raw", names={"storage": "raw"}, strategies={"storage": "raw"},
                      figures={"throughput": 10.0, "rank_cpu_s_per_sample": 0.002}, workload="pixels",
                      ranks=[record(0, 0.9, 1.0)], emulated=True, device="V100-16GB (emulated)",
                      scenario="no-such-scenario")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "cells.jsonl").write_text(json.dumps(cell.to_json()) + "\n")
    f = tmp_path / "t.toml"
    f.write_text('[target]\ngpus_per_node = 4\ncores_per_node = 32\naccelerator = "V100-16GB"\n')
    assert target_report.main(target_report.Request(run_dir=run_dir, target=f)) == 0
    out = capsys.readouterr().out
    assert out.startswith(target_mod.load_file(f).describe())
    assert "Loader stages" in out and "On the target (modelled)" in out and "plots/stages.png" in out
    assert (run_dir / "plots" / "stages.png").stat().st_size > 0
    with pytest.raises(UsageError, match="no cells.jsonl lines"):
        target_report.main(target_report.Request(run_dir=tmp_path / "empty"))

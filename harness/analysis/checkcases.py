"""Pure: a measured configuration on this host as the target model predicts it (`CheckCase`,
`predict_case`): the costs a case changes are scaled by what was measured beside the cells
(`Bench`: the read stage per storage, the decode stage per decoder and image size, the pixels per
image), and the case's target is this host with the CPUs the case's launch may use (its allowance,
or the one CPU a confined case runs on) and the disk's measured rate and latency for a cold page
cache. Nothing is fitted to a measured samples/s: the headline is this absolute model. Beside it,
labelled, a shared-host correction takes from the allowance the CPU that processes outside the run
used during the case's own visits (measured, not fitted). docs/prediction.md.

The side checks predict with it: check-predictions and check-capacity (harness.checks.predictions,
whose cases.py names the cases and scores them) and check-remote (harness.checks.remote). """
from __future__ import annotations

from dataclasses import dataclass, field, replace

from harness.analysis import rankwait
from harness.analysis.stages import requests_per_sample
from harness.analysis.targetmodel import Costs, Prediction, predict
from harness.config.accelerators import Accelerator
from harness.config.target import Target

PIXEL_STAGES = ("collate", "send")  # stages whose work scales with the pixels of an image


@dataclass(frozen=True)
class CheckCase:
    name: str
    world_size: int = 1
    workers: int = 1
    batch_size: int = 32
    image_size: int = 160
    storage: str = "raw"
    decoder: str = "pil"
    cache_state: str = "warm"
    cpus: int = 0  # the CPUs its launch is confined to (0: the run's whole allowance)

    @property
    def group(self) -> tuple:
        """Cases that differ only in storage run as cells of one launch."""
        return (self.world_size, self.workers, self.batch_size, self.image_size, self.decoder, self.cache_state,
                self.cpus)

    def config(self) -> dict:
        out = {"world_size": self.world_size, "workers": self.workers, "batch_size": self.batch_size,
               "image_size": self.image_size, "storage": self.storage, "decoder": self.decoder,
               "page_cache": self.cache_state}
        return {**out, "cpus": self.cpus} if self.cpus else out


@dataclass(frozen=True)
class Bench:
    """What a check measured beside the cells (harness.checks.predictions.sidebench; check-remote:
    its store)."""

    read_s: dict[str, float]  # storage -> read stage CPU s/sample (warm)
    decode_s: dict[tuple[int, str], float]  # (image size, decoder) -> decode CPU s/image
    area: dict[int, float]  # image size -> mean resized pixels per image
    disk_mb_s: float = 0.0
    disk_latency_ms: float = 0.0
    cold_cpu_s_per_byte: float = 0.0
    cold_cpu_s_per_request: float = 0.0  # measured on small files: used instead of the per-byte figure
    contention: float = 1.0
    storage_iops: float = 0.0  # the store's requests per second (0: unlimited; harness.checks.remote.model's)
    # per packed storage, measured by reading it cold: the device requests a cold sample makes (its extra wall
    # over one request's latency) and the extra CPU it costs; a storage without them: the model's defaults
    cold_requests: dict[str, float] = field(default_factory=dict)
    cold_cpu_s: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class RanksWait:
    """The ranks' wait a calibration at 2 or more ranks measured (harness.analysis.rankwait), and
    the dataset's samples per epoch (its epoch starts' law)."""

    wait: rankwait.RankWait
    samples: int


def waits(ranks: RanksWait | None, base: CheckCase, case: CheckCase) -> bool:
    """Whether the ranks' wait applies: measured, a case of 2 ranks or more, predicted from 1
    rank."""
    return ranks is not None and case.world_size >= 2 and base.world_size == 1


def case_costs(calib: Costs, base: CheckCase, case: CheckCase, bench: Bench, ranks: RanksWait | None = None) -> Costs:
    """The calibration's costs with what the case changes scaled by the bench's measured ratios (a
    cold read's requests and extra CPU per sample: the storage's measured ones, else its files per
    sample); with `ranks` (the calibration at 1 rank), the rank's CPU at the case's ranks (the
    collectives' CPU by the ring's messages)."""
    stages = dict(calib.stages)
    if case.storage != base.storage and base.storage in bench.read_s and case.storage in bench.read_s:
        stages["read"] = stages.get("read", 0.0) * bench.read_s[case.storage] / max(bench.read_s[base.storage], 1e-9)
    old, new = (base.image_size, base.decoder), (case.image_size, case.decoder)
    if old != new and old in bench.decode_s and new in bench.decode_s:
        stages["decode"] = stages.get("decode", 0.0) * bench.decode_s[new] / max(bench.decode_s[old], 1e-12)
    pixels = 1.0
    if case.image_size != base.image_size and base.image_size in bench.area and case.image_size in bench.area:
        pixels = bench.area[case.image_size] / bench.area[base.image_size]
        for stage in PIXEL_STAGES:
            stages[stage] = stages.get(stage, 0.0) * pixels
    loader = sum(stages.values()) if stages else calib.loader_s
    requests = calib.requests_per_sample
    if case.storage in bench.cold_requests:
        requests = bench.cold_requests[case.storage]
    elif case.storage != base.storage:
        requests = requests_per_sample(case.storage, calib.workload)
    cold = bench.cold_cpu_s.get(case.storage, bench.cold_cpu_s_per_request * requests if bench.cold_cpu_s_per_request
                                else bench.cold_cpu_s_per_byte * calib.bytes_per_sample)
    rank = rankwait.rank_cpu_s(calib.rank_s, ranks.wait, case.world_size) if waits(ranks, base, case) \
        else calib.rank_s
    return replace(calib, loader_s=loader, rank_s=rank, stages=stages, copy_s=calib.copy_s * pixels,
                   requests_per_sample=requests,
                   padded_pixels_per_sample=calib.padded_pixels_per_sample * pixels, cold_read_extra_s=cold)


def case_target(case: CheckCase, accelerator: Accelerator, cores: float, bench: Bench) -> Target:
    """This host as the case ran on it."""
    return Target(nodes=1, gpus_per_node=case.world_size, cores_per_node=max(0.05, cores),
                  accelerator=accelerator.name, storage_read_mb_s=bench.disk_mb_s,
                  storage_latency_ms=bench.disk_latency_ms, storage_iops=bench.storage_iops,
                  page_cache=case.cache_state, workers_per_rank=case.workers, batch_size=case.batch_size,
                  name="this host")


def predict_case(calib: Costs, base: CheckCase, case: CheckCase, bench: Bench, accelerator: Accelerator,
                 cores: float, outside_pct: float | None = None, ranks: RanksWait | None = None) -> Prediction:
    """The case's prediction on this host with `cores` CPUs (the absolute model: each process may
    use a whole core); with `outside_pct` (the CPU that processes outside the run used during the
    case's visits, % of those CPUs: the shared-host correction), the run gets the rest, and none of
    its processes more than that. With `ranks` (from a calibration at 2 ranks or more; the
    calibration `calib` at 1 rank), a case at 2 ranks or more has the rank's CPU at its size and a
    step no shorter than the ranks' wait makes it (the AU the smaller of the two)."""
    got = cores if outside_pct is None else max(0.05, cores * (1.0 - min(95.0, max(0.0, outside_pct)) / 100.0))
    p = predict(case_costs(calib, base, case, bench, ranks), case_target(case, accelerator, got, bench),
                accelerator, advise=False, share=min(1.0, got))
    if not waits(ranks, base, case):
        return p
    au = rankwait.au_pct(ranks.wait, case.world_size, case.batch_size, ranks.samples)
    if au >= p.au_pct:
        return p
    scale = au / max(p.au_pct, 1e-9)
    return replace(p, au_pct=au, samples_per_s=p.samples_per_s * scale, per_rank=p.per_rank * scale,
                   binds="ranks' wait")

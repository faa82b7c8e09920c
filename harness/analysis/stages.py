"""Pure: a cell's per-stage profile of the loader from its ranks' records (the `stages` of each
rank, harness.measure.rankrecord.window_stages), and the measured costs the target model starts
from (harness.analysis.targetmodel.Costs).

A profile is CPU seconds per sample of each stage (harness.measure.rankrecord.STAGES), all ranks
pooled: the stages' seconds summed over the ranks' window batches over those batches' samples.
`h2d` (the host-to-device copy) is the rank's wall time in that part
(harness.measure.rankrecord.PARTS), per sample. Every stage is timed where it runs
(harness.train.stagetimer); none is a remainder. What no timer covers is `untimed`: the loader's
CPU per sample measured from /proc over the same window, less the loader's timed stages (all but
`receive`, which runs in the rank). `coverage` is the timed stages over the /proc figure: below 1
by the untimed share (and off 1 by the window's edges and /proc's clock tick either way). """
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from harness.analysis.targetmodel import Costs
from harness.data.fields import FIELDS_FOR
from harness.measure.rankrecord import LOADER_STAGES, STAGES, RankRecord
from harness.results.metrics import loads_inline, per_step_ratio


@dataclass(frozen=True)
class StageProfile:
    per_sample: dict[str, float]  # stage -> CPU seconds per sample (and "h2d": wall seconds per sample)
    samples: int  # samples of the timed batches, all ranks
    loader_s: float  # the loader's timed stages per sample (all but receive)
    proc_loader_s: float | None  # the loader's CPU per sample measured from /proc (None: not measured)

    @property
    def untimed_s(self) -> float | None:
        """The loader's CPU per sample that no stage's timer covers: the /proc figure less the
        timed stages (None without a /proc figure; below 0 where the window's edges and /proc's
        tick outweigh it)."""
        if not self.proc_loader_s:
            return None
        return self.proc_loader_s - self.loader_s

    @property
    def coverage(self) -> float | None:
        """The loader's timed stages over the /proc figure (1.0: the timers cover all of it)."""
        if not self.proc_loader_s:
            return None
        return self.loader_s / self.proc_loader_s

    def shares(self) -> dict[str, float]:
        """Each stage's % of the stages' total (h2d excluded: it is wall time, not CPU)."""
        total = sum(v for k, v in self.per_sample.items() if k in STAGES)
        return {k: (100.0 * v / total if total else 0.0) for k, v in self.per_sample.items() if k in STAGES}


def profile(records: list[RankRecord]) -> StageProfile | None:
    """The cell's profile; None when no rank carries stages (older lines, a synthetic pipeline)."""
    timed = [r for r in records if r.stages and r.stages.get("samples")]
    if not timed:
        return None
    samples = sum(int(r.stages["samples"]) for r in timed)
    per_sample = {s: sum(float(r.stages["s"].get(s, 0.0)) for r in timed) / samples for s in STAGES}
    all_samples = sum(r.samples for r in timed)
    per_sample["h2d"] = float(sum(np.sum(r.h2d) for r in timed)) / all_samples if all_samples else 0.0
    loader = sum(per_sample[s] for s in LOADER_STAGES)
    proc = _proc_loader_s(timed)
    return StageProfile(per_sample, samples, loader, proc)


def _proc_loader_s(records: list[RankRecord]) -> float | None:
    """The loader's CPU per sample from /proc (worker processes) or the thread loader's own clock;
    None with workers = 0 (the rank loads inline: no separate figure)."""
    if any(r.workers == 0 and r.loader != "threads" for r in records):
        return None
    samples = sum(r.samples for r in records)
    return sum(float(r.loader_cpu_s) for r in records) / samples if samples else None


# what a run does not measure and the target model needs (harness.checks.predictions measures the
# first two on its host, bench.json): the defaults the report's target table uses, each said in its note
RUN_DEFAULTS = ("contention 1 (a sample's CPU cost taken not to rise when every core is busy)",
                "no extra kernel CPU for a cold read",
                "read requests per sample: one file per field for raw (2), one for the packed storages")


def requests_per_sample(storage: str, workload: str) -> float:
    """Read requests of a sample on a cold read: raw keeps one file per field, the packed storages
    read a sample's fields from one place (a default: not measured per run)."""
    return float(len(FIELDS_FOR.get(workload, ("",)))) if storage == "raw" else 1.0


def step_path(records: list[RankRecord]) -> tuple[float, float]:
    """What a step waits for beside the device, from the ranks' step parts
    (targetmodel.path_seconds): the host-to-device copy per sample, and per step the rank's
    overhead plus the ranks' agreement, its least peer wait among the ranks (the last to arrive
    waits only for the collective itself; the rest of a peer wait is the others' imbalance)."""
    samples = sum(r.samples for r in records)
    n = min((len(r.step) for r in records), default=0)
    if not samples or not n:
        return 0.0, 0.0
    copy_s = sum(sum(r.h2d) for r in records) / samples
    overhead = sum(sum(r.overhead[:n]) for r in records) / (n * len(records))
    agreement = sum(min(r.peer_wait[i] if i < len(r.peer_wait) else 0.0 for r in records) for i in range(n)) / n
    return copy_s, overhead + agreement


def agreement_floor(records: list[RankRecord]) -> float:
    """The ranks' agreement per step where each rank has cores of its own: the least over the
    window's steps of the least peer wait among the ranks. On a host with fewer cores than
    processes the typical step's agreement also waits for a core; its quickest step does not (on
    the 4xV100 run beside other work its 10th percentile rose with the outside load, r 0.2-0.3, the
    least far less)."""
    n = min((len(r.peer_wait) for r in records), default=0)
    if len(records) < 2 or not n:
        return 0.0
    return float(np.array([r.peer_wait[:n] for r in records], dtype=np.float64).min())


def main_thread_s(records: list[RankRecord]) -> float | None:
    """The ranks' main threads' CPU seconds per sample, where every rank recorded it and loaded
    beside its main thread (workers or a thread loader); else None."""
    samples = sum(r.samples for r in records)
    if not samples or any(r.rank_main_cpu_s is None or loads_inline(r) for r in records):
        return None
    return sum(float(r.rank_main_cpu_s) for r in records) / samples


def device_imbalance(records: list[RankRecord]) -> float:
    """The mean over steps of the slowest rank's device time over the ranks' mean: what the ranks
    wait for each other on a host that feeds them, from the device's own step times (modelled from
    each batch on an emulated device, measured on a GPU), which this host's load does not move; 1
    for one rank."""
    n = min((len(r.device) for r in records), default=0)
    if len(records) < 2 or not n:
        return 1.0
    ratio = per_step_ratio(np.array([r.device[:n] for r in records], dtype=np.float64))
    return ratio if ratio is not None else 1.0


def for_target(measured: Costs, records: list[RankRecord]) -> Costs:
    """The costs carried to another host (a [target]): the step's path beside the device without
    this host's oversubscription, which wall-clock parts measured here carry and a target with
    cores to spare does not: the copy as measured, the agreement at its floor (agreement_floor);
    the rank's own per-step overhead is CPU work, which the rank-host bound holds as its main
    thread's CPU per sample (main_thread_s: the process's other threads, whose CPU rose with this
    host's load, count where the cores bind); and the ranks' imbalance from the device's step times
    (device_imbalance). What is left is CPU seconds, bytes and device time."""
    return replace(measured, serial_step_s=agreement_floor(records), step_imbalance=device_imbalance(records),
                   rank_main_s=main_thread_s(records))


def costs(records: list[RankRecord], figures, workload: str, contention: float = 1.0,
          busy_share: float = 0.0, rate: str = "amp", requests_per_sample: float = 1.0,
          cold_read_extra_s: float = 0.0, measured_device: bool = False, in_flight: int = 1) -> Costs | None:
    """The target model's costs from a cell's records and figures
    (harness.results.cellresult.Figures): the loader's stages when measured, with `untimed` (the
    /proc figure less them) where /proc measured the loader, so that they sum to its whole CPU
    (else the /proc figure alone), the rank's CPU per sample, what a sample weighs on the device
    and the storage, the step imbalance. `measured_device`: a real GPU's device time per sample is
    used as measured (else the catalogue's model, from the padded pixels). `in_flight`: the read
    requests a worker keeps in flight (a remote storage's setting; 1 for local files)."""
    samples = sum(r.samples for r in records)
    if not samples or figures.get("rank_cpu_s_per_sample") is None:
        return None
    prof = profile(records)
    loader = prof.loader_s if prof is not None else float(figures.get("loader_cpu_s_per_sample") or 0.0)
    stages = {k: v for k, v in prof.per_sample.items() if k in LOADER_STAGES} if prof else {}
    if prof is not None and prof.untimed_s is not None:  # the loader's whole CPU: its stages and the rest
        stages["untimed"] = prof.untimed_s
        loader = prof.proc_loader_s
    rank = float(figures.get("rank_cpu_s_per_sample"))
    device_rate = figures.get("device_samples_per_s")
    # with DataLoader workers a thread receives the batches beside the rank's main thread (harness.train.batches
    # ReceiveAhead on an emulated device, the pin-memory thread on a GPU): not on the rank's critical path
    ahead = prof.per_sample.get("receive", 0.0) if prof and all(
        r.loader == "workers" and r.workers > 0 for r in records) else 0.0
    copy_s, serial_s = step_path(records)
    return Costs(workload=workload, loader_s=loader, rank_s=rank, receive_ahead_s=min(ahead, rank),
                 copy_s=copy_s, serial_step_s=serial_s,
                 padded_pixels_per_sample=sum(r.padded_pixels for r in records) / samples,
                 bytes_per_sample=sum(r.nbytes for r in records) / samples,
                 requests_per_sample=requests_per_sample, stages=stages,
                 step_imbalance=float(figures.get("step_imbalance") or 1.0), contention=contention,
                 busy_share=busy_share, cold_read_extra_s=cold_read_extra_s, rate=rate, in_flight=in_flight,
                 device_s=(1.0 / device_rate) if measured_device and device_rate else None)

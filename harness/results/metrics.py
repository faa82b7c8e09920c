"""Pure functions: the per-rank records of one cell (harness.measure.rankrecord.RankRecord) -> its
figures, coverage, cache and decomposition. Nothing here builds a strategy or reads a file.

The figures are a JSON-ready dict (harness.results.cellresult.Figures.from_json wraps it); the
other parts are the records of harness.results.cellparts (docs/results-format.md)."""
from __future__ import annotations

import numpy as np

from harness.measure.rankrecord import LOADER_STAGES, PARTS, STAGES, RankRecord
from harness.results import stats
from harness.results.cellparts import CacheFigures, Coverage, Decomposition, EpochCoverage


def _mean_or_none(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def per_step_ratio(matrix: np.ndarray) -> float | None:
    """Mean over steps (columns) of max / mean across ranks (rows), skipping steps whose mean is
    0."""
    mean = matrix.mean(axis=0)
    ok = mean > 0
    return float((matrix[:, ok].max(axis=0) / mean[ok]).mean()) if ok.any() else None


def _cpu_s(record: RankRecord) -> tuple[float, float]:
    """(loader, rank) CPU seconds over the window. The loader is the rank's worker processes; the
    rank is its own process (the step's host work, receiving batches, the agreement, telemetry).
    With no workers the rank loads inline: its time blocked on the loader (wait) is loader CPU, the
    rest is its own. A thread loader (loader = threads) measures its threads' CPU: the loader's,
    taken out of the rank's."""
    rank = float(record.rank_cpu_s)
    if record.loader == "threads":  # the loader's threads run in the rank: their CPU is the loader's
        threads = float(record.loader_thread_cpu_s)
        return float(record.loader_cpu_s), max(0.0, rank - threads)
    if loads_inline(record):
        wait = float(np.sum(record.wait))
        return wait, max(0.0, rank - wait)
    return float(record.loader_cpu_s), rank


def loads_inline(record: RankRecord) -> bool:
    """Whether the rank's main thread loads its batches itself (no workers, no thread loader): its
    wait for a batch is then the loader's CPU, not the rank's."""
    return record.workers == 0 and record.loader != "threads"


def accounting(records: list[RankRecord]) -> dict:
    """Each rank's window split into its five parts (harness.measure.rankrecord.PARTS), as % of
    that rank's window; mean over ranks. The parts of one rank sum to its window, so the five means
    sum to 100."""
    shares = {part.figure: [] for part in PARTS}
    for r in records:
        total = float(np.sum(r.step))
        for part in PARTS:
            shares[part.figure].append(float(np.sum(getattr(r, part.name))) / total * 100 if total else 0.0)
    out = {figure: float(np.mean(v)) for figure, v in shares.items()}
    out["stall_max_pct"] = float(np.max(shares["stall_mean_pct"]))
    return out


def balance(records: list[RankRecord]) -> dict:
    """Stragglers per step, beside the whole-window figure, and the balance of the sampler's
    cost."""
    n = min(len(r.step) for r in records)
    busy = np.array([np.asarray(r.step[:n]) - np.asarray(r.peer_wait[:n]) for r in records])
    cost = np.array([np.asarray(r.cost[:n], dtype=np.float64) for r in records])
    totals = busy.sum(axis=1)
    return {"step_imbalance": per_step_ratio(busy),
            "window_imbalance": float(totals.max() / totals.mean()) if totals.mean() > 0 else 1.0,
            "cost_imbalance": per_step_ratio(cost)}


def feeding(records: list[RankRecord]) -> dict:
    """What it costs the host to feed the accelerator: loader and rank CPU seconds per sample, the
    accelerator's rate when never starved (samples / device seconds, per rank), and the cores per
    rank that rate needs (both CPU costs: the rank's own work runs on the same cores as its
    loader)."""
    samples = sum(r.samples for r in records)
    device_s = [float(np.sum(r.device)) for r in records]
    rates = [r.samples / d for r, d in zip(records, device_s) if d > 0]
    if not samples or not rates:
        return {}
    cpu = [_cpu_s(r) for r in records]
    loader = sum(c[0] for c in cpu) / samples
    rank = sum(c[1] for c in cpu) / samples
    rate = float(np.mean(rates))
    return {"loader_cpu_s_per_sample": loader, "rank_cpu_s_per_sample": rank, "device_samples_per_s": rate,
            "cores_to_feed": (loader + rank) * rate, **decode_limit(records, loader)}


def against_reference(records: list[RankRecord]) -> dict:
    """The gates' figures: CPU costs over work timed in the same visit, so that what the machine's
    load does to every instruction cancels in the ratio (docs/ci-gate.md, "The gate's figures"),
    each pooled over the ranks:

    - `loader_vs_decode`: the loader's timed stages (all but receive) per sample over its decode
      stage's: the loader's own code against the decode library's work in the same batches;
    - `decode_vs_reference`: the decode stage per sample over the reference decode
      (harness.measure.reference, the rank's reading): the harness's decode code against the
      library's fixed work;
    - `rank_vs_reference`: the rank's main thread's CPU per sample over the reference step (the
      main thread alone: the process's other threads move its CPU by about 20% between same-code
      runs, harness.train.measuredloop; with workers = 0 less the wait, in which that thread loads
      the batches).

    A figure is left out where its parts were not measured: no timed decode stage (the features
    workload), no rank with a reference reading (older lines)."""
    out = {}
    stage = {s: v for s, v in stage_per_sample(records).items() if s in LOADER_STAGES}
    refs = [r.reference for r in records if r.reference]
    ref = {k: float(np.mean([x[k] for x in refs])) for k in ("decode_s", "rank_s")} if len(refs) == len(records) \
        else {}
    if stage["decode"] > 0:
        out["loader_vs_decode"] = sum(stage.values()) / stage["decode"]
        if ref.get("decode_s"):
            out["decode_vs_reference"] = stage["decode"] / ref["decode_s"]
    all_samples = sum(r.samples for r in records)
    if ref.get("rank_s") and all_samples and all(r.rank_main_cpu_s is not None for r in records):
        out["rank_vs_reference"] = sum(_main_cpu_s(r) for r in records) / all_samples / ref["rank_s"]
    return out


def _main_cpu_s(record: RankRecord) -> float:
    """The rank's main thread's own CPU over the window: less its wait where it loads the batches
    itself."""
    main = float(record.rank_main_cpu_s)
    if loads_inline(record):
        return max(0.0, main - float(np.sum(record.wait)))
    return main


def kernel_au(records: list[RankRecord]) -> dict:
    """Kernel-busy AU: the share of the profiled steps' span in which some GPU kernel ran, all
    ranks pooled (beside the event AU, which counts launch gaps and host syncs inside the step as
    busy); {} unprofiled."""
    timed = [r for r in records if r.kernel_busy_s is not None and r.kernel_span_s]
    span = sum(r.kernel_span_s for r in timed)
    return {"kernel_au_pct": 100.0 * sum(r.kernel_busy_s for r in timed) / span} if span > 0 else {}


def launch_time(records: list[RankRecord]) -> dict:
    """The median over every rank's steps of the host's own time from the agreement to the step's
    last launch (ms); {} where no rank recorded it."""
    steps = [t for r in records if r.launch for t in r.launch]
    return {"launch_ms_p50": float(np.median(steps)) * 1e3} if steps else {}


def decode_limit(records: list[RankRecord], loader_s: float) -> dict:
    """The decode limit ratio: the loader's whole CPU per sample over its decode stage's alone
    (1.0: the loader costs what decoding costs; the rest is read, cache, transform, collate, send,
    queue, untimed); {} without a timed decode stage (the features workload decodes nothing)."""
    decode = stage_per_sample(records)["decode"]
    return {"decode_limit_ratio": loader_s / decode} if decode > 0 and loader_s > 0 else {}


def stage_per_sample(records: list[RankRecord]) -> dict[str, float]:
    """Each loader stage's CPU seconds per sample over the ranks' timed batches, pooled (0.0 for
    every stage where no rank carries stages)."""
    timed = [r for r in records if r.stages and r.stages.get("samples")]
    samples = sum(int(r.stages["samples"]) for r in timed)
    return {s: sum(float(r.stages["s"].get(s, 0.0)) for r in timed) / samples if samples else 0.0 for s in STAGES}


def throughput_interval(records: list[RankRecord]) -> dict:
    """The within-run interval of throughput: batch means over the window's steps. Per step, the
    samples of all ranks and the step time of the slowest rank: the one whose window is the
    longest, the window the throughput divides by, so the interval is centred on the throughput
    shown (the maximum over ranks per step would add up the ranks' jitter and sit below it). {}
    without the per-step lists of every rank or with too few steps."""
    if not records or any(not r.step or not r.batch_sizes for r in records):
        return {}
    n = min(min(len(r.step), len(r.batch_sizes)) for r in records)
    samples = np.sum([np.asarray(r.batch_sizes[:n], dtype=np.float64) for r in records], axis=0)
    seconds = np.asarray(max(records, key=lambda r: r.window_s).step[:n], dtype=np.float64)
    try:
        ci = stats.batch_means_interval(samples, seconds)
    except ValueError:  # steps that sum to no time, or a non-finite one: no interval
        return {}
    if not ci:
        return {}
    return {"throughput_ci": [ci["low"], ci["high"]], "throughput_ci_label": stats.interval_label(ci)}


def cell_figures(records: list[RankRecord]) -> dict:
    """Figures of one cell from the records of all its ranks (warm-up already excluded)."""
    records = sorted(records, key=lambda r: r.rank)
    steps = sum(r.steps for r in records)
    out: dict = {"ranks": len(records), "window_steps": min(r.steps for r in records)}
    if steps == 0:
        return out
    window_s = max(r.window_s for r in records)
    all_steps = np.concatenate([np.asarray(r.step, dtype=np.float64) for r in records])
    samples = sum(r.samples for r in records)
    nbytes = sum(r.nbytes for r in records)
    padded = sum(r.padded_pixels for r in records)
    real = sum(r.real_pixels for r in records)
    disk_read = sum(r.disk_read_bytes for r in records)
    shadow = sum(r.shadow_steps for r in records)
    overruns = sum(r.overruns for r in records)
    out.update(
        window_s=window_s,
        samples=samples,
        throughput=samples / window_s if window_s else 0.0,
        **throughput_interval(records),
        step_p50_ms=float(np.percentile(all_steps, 50) * 1e3),
        step_p95_ms=float(np.percentile(all_steps, 95) * 1e3),
        step_p99_ms=float(np.percentile(all_steps, 99) * 1e3),
        **accounting(records),
        **balance(records),
        **feeding(records),
        **against_reference(records),
        **kernel_au(records),
        **launch_time(records),
        host_pss_peak_mb=max(r.host_pss_peak for r in records) / 1e6,
        host_pss_total_mb=sum(r.host_pss_peak for r in records) / 1e6,
        host_rss_peak_mb=max(r.host_rss_peak for r in records) / 1e6,
        device_peak_gb=max(r.device_peak_bytes for r in records) / 1e9,
        read_mb_s=nbytes / window_s / 1e6 if window_s else 0.0,
        logical_read_mb=nbytes / 1e6,
        disk_read_mb=disk_read / 1e6,
        disk_read_mb_s=disk_read / window_s / 1e6 if window_s else 0.0,
        **read_amplification(disk_read, nbytes),
        padding_waste_pct=(1 - real / padded) * 100 if padded else 0.0,
        mean_batch=samples / max(1, steps - shadow),
        max_batch=max((max(r.batch_sizes, default=0) for r in records), default=0),
        oom_events=sum(r.oom_events for r in records),
        shadow_steps=shadow,
        nvml_util_pct=_mean_or_none([r.nvml.nvml_util_mean_pct if r.nvml else None for r in records]),
        overrun_steps=overruns,
        overrun_pct=overruns / steps * 100,
    )
    return out


def read_amplification(device_bytes: float | None, delivered_bytes: float | None) -> dict:
    """{"read_amplification": bytes read from the device / bytes the readers delivered}, or {} when
    either is unknown or nothing was delivered. Below 1: part of what was delivered came from the
    page cache."""
    if device_bytes is None or not delivered_bytes or delivered_bytes <= 0:
        return {}
    return {"read_amplification": float(device_bytes) / float(delivered_bytes)}


def cache_figures(records: list[RankRecord]) -> CacheFigures | None:
    """Hits, misses and evictions summed over all workers of all ranks, over the window."""
    caches = [r.cache for r in records if r.cache is not None]
    if not caches:
        return None
    hits = sum(c.hits for c in caches)
    misses = sum(c.misses for c in caches)
    return CacheFigures(hits=hits, misses=misses, evictions=sum(c.evictions for c in caches),
                        hit_pct=hits / (hits + misses) * 100 if hits + misses else 0.0,
                        resident_mb=sum(c.resident_bytes for c in caches) / 1e6,
                        caches=sum(c.processes for c in caches), scope=caches[0].scope)


def coverage(records: list[RankRecord], dataset_size: int) -> Coverage:
    """DistributedSampler's contract, checked on the indices every rank consumed (warm-up
    included).

    Per epoch: every index exactly once across ranks, apart from the padding torch adds to make the
    epoch divisible by the world size. Missing indices are only judged for epochs every rank
    finished.
    """
    world = len(records)
    padding = -(-dataset_size // world) * world - dataset_size
    completed = min(r.completed_epochs for r in records)
    epochs = sorted({int(e) for r in records for e in r.consumed})
    per_epoch, ok = [], True
    for epoch in epochs:
        idx = np.concatenate([np.asarray(r.consumed.get(epoch, r.consumed.get(str(epoch), [])), dtype=np.int64)
                              for r in records])
        out_of_range = int(((idx < 0) | (idx >= dataset_size)).sum())
        counts = np.bincount(idx[(idx >= 0) & (idx < dataset_size)], minlength=dataset_size)
        unique = int((counts > 0).sum())
        duplicates = int((counts[counts > 1] - 1).sum())
        complete = epoch < completed
        missing = dataset_size - unique if complete else None
        broken = out_of_range > 0 or duplicates > padding or bool(missing)
        ok = ok and not broken
        per_epoch.append(EpochCoverage(epoch=epoch, complete=complete, consumed=int(idx.size), unique=unique,
                                       duplicates=duplicates, missing=missing, out_of_range=out_of_range,
                                       broken=broken))
    full = [e for e in per_epoch if e.complete]
    return Coverage(ok=ok, padding_allowed=padding, epochs=per_epoch,
                    coverage_pct=min(e.unique for e in full) / dataset_size * 100 if full else None,
                    duplicates=sum(e.duplicates for e in per_epoch),
                    missing=sum(e.missing or 0 for e in per_epoch))


def decomposition(records: list[RankRecord]) -> Decomposition | None:
    """Stall decomposition from the three phases of a --decompose cell (seconds per step and %).

    Per phase, the time per step is the slowest rank's window / its steps. compute = compute alone
    on batches in memory; prep stall = warm - compute (decoding, collation, workers); fetch stall =
    cold - warm (reading from the device). Percentages are of the cold step time.
    """
    if not all(r.phases for r in records):
        return None
    per_step, rate = {}, {}
    for name in ("compute", "warm", "cold"):
        phases = [r.phases[name] for r in records]
        if any(p.error or not p.steps for p in phases):
            return Decomposition(error=next((p.error for p in phases if p.error), "no steps"))
        per_step[name] = max(p.window_s / p.steps for p in phases)
        rate[name] = sum(p.samples for p in phases) / max(p.window_s for p in phases)
    cold = per_step["cold"]
    prep = per_step["warm"] - per_step["compute"]
    fetch = per_step["cold"] - per_step["warm"]
    return Decomposition(compute_s=per_step["compute"], warm_s=per_step["warm"], cold_s=cold,
                         prep_stall_s=prep, fetch_stall_s=fetch,
                         compute_pct=per_step["compute"] / cold * 100, prep_stall_pct=prep / cold * 100,
                         fetch_stall_pct=fetch / cold * 100, compute_bound_samples_s=rate["compute"],
                         warm_samples_s=rate["warm"], cold_samples_s=rate["cold"])

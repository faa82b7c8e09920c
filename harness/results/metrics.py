"""Pure functions: the per-rank records of one cell -> its figures, coverage, cache and decomposition.

Each returns a JSON-ready dict; harness.results.cellresult wraps them in the result model (docs/results-format.md)."""
from __future__ import annotations

import numpy as np

from harness.results import stats

# the five parts of a rank's step (per-step lists in each rank's record) and the figure of each
PARTS = ("wait", "h2d", "peer_wait", "device", "overhead")
PART_FIGURES = {"wait": "stall_mean_pct", "h2d": "h2d_pct", "peer_wait": "peer_wait_pct", "device": "au_pct",
                "overhead": "overhead_pct"}


def _arr(records: list[dict], key: str) -> list[np.ndarray]:
    return [np.asarray(r[key], dtype=np.float64) for r in records]


def _mean_or_none(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def _per_step_ratio(matrix: np.ndarray) -> float | None:
    """Mean over steps (columns) of max / mean across ranks (rows), skipping steps whose mean is 0."""
    mean = matrix.mean(axis=0)
    ok = mean > 0
    return float((matrix[:, ok].max(axis=0) / mean[ok]).mean()) if ok.any() else None


def _cpu_s(record: dict) -> tuple[float, float]:
    """(loader, rank) CPU seconds over the window. The loader is the rank's worker processes; the rank is
    its own process (the step's host work, receiving batches, the agreement, telemetry). With no workers
    the rank loads inline: its time blocked on the loader (wait) is loader CPU, the rest is its own. A thread
    loader (loader = threads) measures its threads' CPU: the loader's, taken out of the rank's."""
    rank = float(record.get("rank_cpu_s", 0.0))
    if record.get("loader") == "threads":  # the loader's threads run in the rank: their CPU is the loader's
        threads = float(record.get("loader_thread_cpu_s", 0.0))
        return float(record.get("loader_cpu_s", 0.0)), max(0.0, rank - threads)
    if record.get("workers", 1) == 0:
        wait = float(np.sum(record["wait"]))
        return wait, max(0.0, rank - wait)
    return float(record.get("loader_cpu_s", 0.0)), rank


def accounting(records: list[dict]) -> dict:
    """Each rank's window split into its five parts, as % of that rank's window; mean over ranks.
    The parts of one rank sum to its window, so the five means sum to 100."""
    shares = {part: [] for part in PARTS}
    for r in records:
        total = float(np.sum(r["step"]))
        for part in PARTS:
            shares[part].append(float(np.sum(r[part])) / total * 100 if total else 0.0)
    out = {PART_FIGURES[p]: float(np.mean(v)) for p, v in shares.items()}
    out["stall_max_pct"] = float(np.max(shares["wait"]))
    return out


def balance(records: list[dict]) -> dict:
    """Stragglers per step, beside the whole-window figure, and the balance of the sampler's cost."""
    n = min(len(r["step"]) for r in records)
    busy = np.array([np.asarray(r["step"][:n]) - np.asarray(r["peer_wait"][:n]) for r in records])
    cost = np.array([np.asarray(r["cost"][:n], dtype=np.float64) for r in records])
    totals = busy.sum(axis=1)
    return {"step_imbalance": _per_step_ratio(busy),
            "window_imbalance": float(totals.max() / totals.mean()) if totals.mean() > 0 else 1.0,
            "cost_imbalance": _per_step_ratio(cost)}


def feeding(records: list[dict]) -> dict:
    """What it costs the host to feed the accelerator: loader and rank CPU seconds per sample, the
    accelerator's rate when never starved (samples / device seconds, per rank), and the cores per rank
    that rate needs (both CPU costs: the rank's own work runs on the same cores as its loader)."""
    samples = sum(r["samples"] for r in records)
    device_s = [float(np.sum(r["device"])) for r in records]
    rates = [r["samples"] / d for r, d in zip(records, device_s) if d > 0]
    if not samples or not rates:
        return {}
    cpu = [_cpu_s(r) for r in records]
    loader = sum(c[0] for c in cpu) / samples
    rank = sum(c[1] for c in cpu) / samples
    rate = float(np.mean(rates))
    return {"loader_cpu_s_per_sample": loader, "rank_cpu_s_per_sample": rank, "device_samples_per_s": rate,
            "cores_to_feed": (loader + rank) * rate}


def throughput_interval(records: list[dict]) -> dict:
    """The within-run interval of throughput: batch means over the window's steps (samples of all ranks
    per step; the step times of the rank whose window is the longest, the one throughput divides by, so
    the interval is centred on the throughput shown)."""
    n = min(len(r["step"]) for r in records)
    samples = np.sum([np.asarray(r["batch_sizes"][:n], dtype=np.float64) for r in records], axis=0)
    seconds = np.asarray(max(records, key=lambda r: r["window_s"])["step"][:n], dtype=np.float64)
    ci = stats.batch_means_interval(samples, seconds)
    if not ci:
        return {}
    return {"throughput_ci": [ci["low"], ci["high"]], "throughput_ci_label": stats.interval_label(ci)}


def cell_figures(records: list[dict]) -> dict:
    """Figures of one cell from the records of all its ranks (warm-up already excluded)."""
    records = sorted(records, key=lambda r: r["rank"])
    steps = sum(r["steps"] for r in records)
    out: dict = {"ranks": len(records), "window_steps": min(r["steps"] for r in records)}
    if steps == 0:
        return out
    window_s = max(r["window_s"] for r in records)
    all_steps = np.concatenate(_arr(records, "step"))
    samples = sum(r["samples"] for r in records)
    nbytes = sum(r["nbytes"] for r in records)
    padded = sum(r["padded_pixels"] for r in records)
    real = sum(r["real_pixels"] for r in records)
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
        host_pss_peak_mb=max(r["host_pss_peak"] for r in records) / 1e6,
        host_pss_total_mb=sum(r["host_pss_peak"] for r in records) / 1e6,
        host_rss_peak_mb=max(r["host_rss_peak"] for r in records) / 1e6,
        device_peak_gb=max(r["device_peak_bytes"] for r in records) / 1e9,
        read_mb_s=nbytes / window_s / 1e6 if window_s else 0.0,
        logical_read_mb=nbytes / 1e6,
        disk_read_mb=sum(r.get("disk_read_bytes", 0) for r in records) / 1e6,
        disk_read_mb_s=sum(r.get("disk_read_bytes", 0) for r in records) / window_s / 1e6 if window_s else 0.0,
        padding_waste_pct=(1 - real / padded) * 100 if padded else 0.0,
        mean_batch=samples / max(1, steps - sum(r.get("shadow_steps", 0) for r in records)),
        max_batch=max((max(r["batch_sizes"], default=0) for r in records), default=0),
        oom_events=sum(r.get("oom_events", 0) for r in records),
        shadow_steps=sum(r.get("shadow_steps", 0) for r in records),
        nvml_util_pct=_mean_or_none([(r.get("nvml") or {}).get("nvml_util_mean_pct") for r in records]),
        overrun_steps=sum(r["overruns"] for r in records),
        overrun_pct=sum(r["overruns"] for r in records) / steps * 100,
    )
    return out


def cache_figures(records: list[dict]) -> dict | None:
    """Hits, misses and evictions summed over all workers of all ranks, over the window."""
    caches = [r["cache"] for r in records if r.get("cache")]
    if not caches:
        return None
    hits = sum(c["hits"] for c in caches)
    misses = sum(c["misses"] for c in caches)
    return {"hits": hits, "misses": misses, "evictions": sum(c["evictions"] for c in caches),
            "hit_pct": hits / (hits + misses) * 100 if hits + misses else 0.0,
            "resident_mb": sum(c["resident_bytes"] for c in caches) / 1e6,
            "caches": sum(c["processes"] for c in caches), "scope": caches[0]["scope"]}


def coverage(records: list[dict], dataset_size: int) -> dict:
    """DistributedSampler's contract, checked on the indices every rank consumed (warm-up included).

    Per epoch: every index exactly once across ranks, apart from the padding torch adds to make the
    epoch divisible by the world size. Missing indices are only judged for epochs every rank finished.
    """
    world = len(records)
    padding = -(-dataset_size // world) * world - dataset_size
    completed = min(r.get("completed_epochs", 0) for r in records)
    epochs = sorted({int(e) for r in records for e in r.get("consumed", {})})
    per_epoch, ok = [], True
    for epoch in epochs:
        idx = np.concatenate([np.asarray(r.get("consumed", {}).get(epoch, r.get("consumed", {}).get(
            str(epoch), [])), dtype=np.int64) for r in records])
        out_of_range = int(((idx < 0) | (idx >= dataset_size)).sum())
        counts = np.bincount(idx[(idx >= 0) & (idx < dataset_size)], minlength=dataset_size)
        unique = int((counts > 0).sum())
        duplicates = int((counts[counts > 1] - 1).sum())
        complete = epoch < completed
        missing = dataset_size - unique if complete else None
        broken = out_of_range > 0 or duplicates > padding or bool(missing)
        ok = ok and not broken
        per_epoch.append({"epoch": epoch, "complete": complete, "consumed": int(idx.size), "unique": unique,
                          "duplicates": duplicates, "missing": missing, "out_of_range": out_of_range,
                          "broken": broken})
    full = [e for e in per_epoch if e["complete"]]
    return {"ok": ok, "padding_allowed": padding, "epochs": per_epoch,
            "coverage_pct": min(e["unique"] for e in full) / dataset_size * 100 if full else None,
            "duplicates": sum(e["duplicates"] for e in per_epoch),
            "missing": sum(e["missing"] or 0 for e in per_epoch)}


def decomposition(records: list[dict]) -> dict | None:
    """Stall decomposition from the three phases of a --decompose cell (seconds per step and %).

    Per phase, the time per step is the slowest rank's window / its steps. compute = compute alone on
    batches in memory; prep stall = warm - compute (decoding, collation, workers); fetch stall = cold - warm
    (reading from the device). Percentages are of the cold step time.
    """
    if not all(r.get("phases") for r in records):
        return None
    per_step, rate = {}, {}
    for name in ("compute", "warm", "cold"):
        phases = [r["phases"][name] for r in records]
        if any(p["error"] or not p["steps"] for p in phases):
            return {"error": next((p["error"] for p in phases if p["error"]), "no steps")}
        per_step[name] = max(p["window_s"] / p["steps"] for p in phases)
        rate[name] = sum(p["samples"] for p in phases) / max(p["window_s"] for p in phases)
    cold = per_step["cold"]
    prep = per_step["warm"] - per_step["compute"]
    fetch = per_step["cold"] - per_step["warm"]
    return {"compute_s": per_step["compute"], "warm_s": per_step["warm"], "cold_s": cold,
            "prep_stall_s": prep, "fetch_stall_s": fetch,
            "compute_pct": per_step["compute"] / cold * 100, "prep_stall_pct": prep / cold * 100,
            "fetch_stall_pct": fetch / cold * 100, "compute_bound_samples_s": rate["compute"],
            "warm_samples_s": rate["warm"], "cold_samples_s": rate["cold"]}

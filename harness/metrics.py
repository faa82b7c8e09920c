"""Pure functions: per-rank records of one cell -> the figures of DESIGN.md section 6."""
from __future__ import annotations

import numpy as np


def _arr(records: list[dict], key: str) -> list[np.ndarray]:
    return [np.asarray(r[key], dtype=np.float64) for r in records]


def cell_figures(records: list[dict]) -> dict:
    """Figures of one cell from the records of all its ranks (warm-up already excluded)."""
    records = sorted(records, key=lambda r: r["rank"])
    steps = sum(r["steps"] for r in records)
    out: dict = {"ranks": len(records), "window_steps": min(r["steps"] for r in records)}
    if steps == 0:
        return out
    window_s = max(r["window_s"] for r in records)
    wait, compute, step, sync = (_arr(records, k) for k in ("wait", "compute", "step", "sync"))
    all_steps = np.concatenate(step)
    stall = [w.sum() / s.sum() * 100 if s.sum() else 0.0 for w, s in zip(wait, step)]
    au = [c.sum() / r["window_s"] * 100 if r["window_s"] else 0.0 for c, r in zip(compute, records)]
    busy = np.array([s.sum() - y.sum() for s, y in zip(step, sync)])
    samples = sum(r["samples"] for r in records)
    nbytes = sum(r["nbytes"] for r in records)
    padded = sum(r["padded_pixels"] for r in records)
    real = sum(r["real_pixels"] for r in records)
    out.update(
        window_s=window_s,
        samples=samples,
        throughput=samples / window_s if window_s else 0.0,
        step_p50_ms=float(np.percentile(all_steps, 50) * 1e3),
        step_p95_ms=float(np.percentile(all_steps, 95) * 1e3),
        step_p99_ms=float(np.percentile(all_steps, 99) * 1e3),
        stall_mean_pct=float(np.mean(stall)),
        stall_max_pct=float(np.max(stall)),
        au_pct=float(np.mean(au)),
        imbalance=float(busy.max() / busy.mean()) if busy.mean() > 0 else 1.0,
        host_pss_peak_mb=max(r["host_pss_peak"] for r in records) / 1e6,
        host_pss_total_mb=sum(r["host_pss_peak"] for r in records) / 1e6,
        host_rss_peak_mb=max(r["host_rss_peak"] for r in records) / 1e6,
        device_peak_gb=max(r["device_peak_bytes"] for r in records) / 1e9,
        read_mb_s=nbytes / window_s / 1e6 if window_s else 0.0,
        padding_waste_pct=(1 - real / padded) * 100 if padded else 0.0,
        mean_batch=samples / steps,
        overrun_steps=sum(r["overruns"] for r in records),
        overrun_pct=sum(r["overruns"] for r in records) / steps * 100,
    )
    return out

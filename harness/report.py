"""The report of a run, from cells.jsonl alone: terminal text, report.md, summary.csv (pandas) and plots/.

Table builders are pure: results in (harness.records.CellResult), a harness.tables.Table out. One renderer
(harness.tables.render_tables) writes them as text or markdown; the header (scenario, emulation banner,
overrun warning, page cache, repeats, probe, parameters, host) is written once, above every table.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from harness import articles, plots, results as run_files
from harness.records import CellResult, CellSummary, merge_repeats, relative_to_probe
from harness.tables import (Table, display_name, emulation_lines, fmt, mark, render_lines, render_tables,
                            short_error, shown_axes, strategy_notes)

REPORT_TITLE = "Data-loading benchmark report"
ARTICLES_TITLE = "The articles' tables, measured"


def _throughput(c: CellSummary) -> str:
    s = c.throughput_summary
    if not s:
        return fmt(c.figures.throughput, ".0f")
    return f"{s['median']:.0f} ± {s['half_ci']:.0f} (CV {s['cv'] * 100:.0f}%)"


def header_lines(cells: list[CellSummary], env: dict | None = None, probe: dict | None = None,
                 others: list[CellSummary] | None = None) -> list[str]:
    """What the tables need said once: scenario, emulation banner and overrun warning, page cache, repeats
    (and failed repeats), machine probe, parameters, host. `others`: results of another run shown too
    (the one-rank run of the scaling table)."""
    if not cells:
        return ["no cells were measured"]
    c0, every = cells[0], cells + (others or [])
    lines = [f"Scenario {c0.scenario}: {c0.world_size} ranks x {c0.device}, workload {c0.workload}, "
             f"batch {c0.batch_size} per rank, {c0.figures.get('window_steps', 0)} measured steps per rank"]
    lines += emulation_lines(every)
    lines += page_cache_lines(cells, env)
    repeats = max(c.total_repeats for c in cells)
    if repeats > 1:
        lines.append(f"{repeats} repeats per cell, interleaved across cells; figures are medians over repeats")
    lines += failed_repeat_lines(cells)
    if probe and probe.get("ideal_samples_per_s"):
        lines.append(probe_line(probe))
    notes = strategy_notes(every)
    if notes:
        lines.append("Parameters: " + "; ".join(notes))
    if env:
        lines.append(f"Host: {env.get('cpu_count')} CPUs ({env.get('cpu_model')}), "
                     f"{env.get('memory_gb') or 0:.0f} GB RAM, torch {(env.get('versions') or {}).get('torch')}")
    return lines


def failed_repeat_lines(cells: list[CellSummary]) -> list[str]:
    """One warning naming the cells some of whose repeats failed (figures are over the measured ones)."""
    partial = [c for c in cells if c.failed_repeats and c.repeats]
    if not partial:
        return []
    shown = "; ".join(f"{c.cell} ({c.failed_repeats} of {c.total_repeats}: {c.repeat_errors[0][:60]})"
                      for c in partial)
    return [f"WARNING: repeats failed in {len(partial)} cell(s), whose figures are over the other repeats: "
            f"{shown}"]


def page_cache_lines(cells: list[CellResult], env: dict | None) -> list[str]:
    states = sorted({(c.page_cache or {}).get("state", "as-is") for c in cells})
    decomposed = any(c.decomposition for c in cells)
    lines = [f"Page cache before each cell: {', '.join(states)}"
             + (" (decomposition cells ran compute-only, warm and cold phases)" if decomposed else "")]
    unverified = [c.cell for c in cells if (c.page_cache or {}).get("verified") is False]
    if unverified:
        lines.append(f"WARNING: the cold drop could not be verified for {len(unverified)} cell(s)")
    data_gb, ram_gb = (env or {}).get("dataset_gb"), (env or {}).get("memory_gb")
    if data_gb and ram_gb and data_gb < ram_gb and "cold" not in states:
        lines.append(f"NOTE: the dataset ({data_gb * 1000:.0f} MB) fits in this host's RAM ({ram_gb:.0f} GB): "
                     f"without --cache-state cold the figures may reflect the page cache, not the storage device")
    return lines


def probe_line(probe: dict) -> str:
    ideal, memcpy = probe["ideal_samples_per_s"], probe.get("memcpy_gb_s") or [0]
    return (f"Machine probe (per repeat, median): in-memory ideal loader {np.median(ideal):.0f} samples/s in one "
            f"process, memory copy {np.median(memcpy):.1f} GB/s; 'x ideal loader' = samples/s / that figure")


def throughput_table(cells: list[CellSummary]) -> Table:
    m = mark(cells[:1])
    axes = shown_axes(cells)
    ci = " (median ± 95% CI)" if any(c.throughput_summary for c in cells) else ""
    probe = ["x ideal loader"] if any(c.figures.vs_probe is not None for c in cells) else []
    au = f"AU %{m}" if m else "AU % (timers / CUDA events / NVML)"
    headers = [*axes, f"samples/s{m}{ci}", *probe, f"step p50 ms{m}", f"p95{m}", f"p99{m}", "stall % mean/max",
               au, "imbalance", "cache hit %", "read MB/s"] + (["CPU>model %"] if m else [])
    rows = []
    for c in cells:
        f = c.figures
        row = [display_name(cells, c, a) for a in axes]
        if not c.measured:
            rows.append(row + [short_error(c)] + ["-"] * (len(headers) - len(row) - 1))
            continue
        rows.append(row + [
            _throughput(c), *([fmt(f.vs_probe, ".2f")] if probe else []), fmt(f.step_p50_ms, ".1f"),
            fmt(f.step_p95_ms, ".1f"), fmt(f.step_p99_ms, ".1f"), f"{f.stall_mean_pct:.0f} / {f.stall_max_pct:.0f}",
            _au(c), fmt(f.imbalance, ".2f"), _hit(c), fmt(f.read_mb_s, ".1f")]
            + ([fmt(f.overrun_pct, ".0f")] if m else []))
    return Table("Throughput and utilisation", headers, rows)


def memory_io_table(cells: list[CellSummary]) -> Table:
    emulated = bool(cells and cells[0].emulated)
    axes = shown_axes(cells)
    device_col = f"device peak GB{mark(cells[:1])} (modelled)" if emulated else "device peak GB"
    headers = [*axes, "host PSS/rank MB", "host PSS all ranks MB", "host RSS/rank MB", "cache resident MB",
               device_col, "disk read MB", "requested MB"]
    rows = []
    for c in cells:
        f, cache = c.figures, c.cache or {}
        rows.append([display_name(cells, c, a) for a in axes] + [
            fmt(f.host_pss_peak_mb, ".0f"), fmt(f.host_pss_total_mb, ".0f"), fmt(f.host_rss_peak_mb, ".0f"),
            f"{cache['resident_mb']:.0f} in {cache['caches']}" if cache else "-",
            fmt(f.device_peak_gb, ".2f"), fmt(f.disk_read_mb, ".1f"), fmt(f.logical_read_mb, ".1f")])
    return Table("Memory and I/O (peaks over the window)", headers, rows)


def batching_table(cells: list[CellSummary]) -> Table:
    axes = shown_axes(cells)
    headers = [*axes, "mean batch", "max batch", "padding waste %", "OOM events", "shadow steps",
               "coverage %", "duplicates", "missing", "sampler contract"]
    rows = []
    for c in cells:
        f, cov = c.figures, c.coverage or {}
        rows.append([display_name(cells, c, a) for a in axes] + [
            fmt(f.mean_batch, ".1f"), fmt(f.max_batch, ".0f"), fmt(f.padding_waste_pct, ".0f"),
            "OOM (cell stopped)" if (c.error or "").startswith("OOM") else fmt(f.oom_events, ".0f"),
            fmt(f.shadow_steps, ".0f"), fmt(cov.get("coverage_pct"), ".1f"),
            fmt(cov.get("duplicates"), ".0f"), fmt(cov.get("missing"), ".0f"),
            "-" if not cov else ("ok" if cov.get("ok") else "BROKEN")])
    return Table("Batching and correctness", headers, rows)


def decomposition_table(cells: list[CellSummary]) -> Table:
    m = mark(cells[:1])
    axes = shown_axes(cells)
    headers = [*axes, f"compute s/step{m}", "prep stall s/step (%)", "fetch stall s/step (%)",
               f"compute-bound samples/s{m}", f"warm samples/s{m}", f"cold samples/s{m}"]
    rows = []
    for c in cells:
        d = c.decomposition
        if not d:
            continue
        row = [display_name(cells, c, a) for a in axes]
        if "error" in d:
            rows.append(row + [d["error"]] + ["-"] * 5)
            continue
        rows.append(row + [f"{d['compute_s']:.4f}", f"{d['prep_stall_s']:.4f} ({d['prep_stall_pct']:.0f}%)",
                           f"{d['fetch_stall_s']:.4f} ({d['fetch_stall_pct']:.0f}%)",
                           f"{d['compute_bound_samples_s']:.0f}", f"{d['warm_samples_s']:.0f}",
                           f"{d['cold_samples_s']:.0f}"])
    return Table("Stall decomposition (compute alone / page cache warm / page cache dropped)", headers, rows)


def _au(c: CellSummary) -> str:
    """AU from the step timers; on real GPUs also from CUDA events and NVML's sampled utilisation."""
    f = c.figures
    extra = [f"{v:.0f}" for v in (f.gpu_compute_au_pct, f.nvml_util_pct) if v is not None]
    return " / ".join([f"{f.au_pct:.0f}", *extra])


def _hit(c: CellSummary) -> str:
    return f"{c.cache['hit_pct']:.0f} ({c.cache['scope']})" if c.cache else "-"


def report_tables(cells: list[CellSummary]) -> list[Table]:
    """The per-cell tables of a run (tables without rows are left out when rendered)."""
    if not cells:
        return []
    return [throughput_table(cells), memory_io_table(cells), batching_table(cells), decomposition_table(cells)]


def render(results: list[CellResult], env: dict | None = None, probe: dict | None = None,
           results_1x: list[CellResult] | None = None, fmt: str = "text") -> str:
    """The whole report: header once, the run's tables, then the articles' tables. "text" or "markdown"."""
    cells, cells_1x = merge_repeats(results), merge_repeats(results_1x or [])
    markdown = fmt == "markdown"
    parts = ([f"# {REPORT_TITLE}", ""] if markdown else []) + render_lines(
        header_lines(cells, env, probe, cells_1x), fmt)
    parts += render_tables(report_tables(cells), fmt, level=2)
    if cells:
        samples = ((env or {}).get("dataset") or {}).get("samples")
        parts += ["", f"## {ARTICLES_TITLE}", ""] if markdown else ["", ARTICLES_TITLE]
        parts += render_lines(articles.note_lines(cells + cells_1x), fmt)
        parts += render_tables(articles.article_tables(cells, cells_1x, samples), fmt, level=3)
    return "\n".join(parts) + "\n"


def summary_frame(results: list[CellResult]) -> pd.DataFrame:
    """summary.csv: one row per cell and repeat."""
    rows = []
    for c in results:
        row = {"cell": c.cell, "repeat": c.repeat, **c.strategies, "device": c.device, "emulated": c.emulated,
               "error": c.error}
        row.update(sorted(c.figures.to_json().items()))  # columns in the order of the file's sorted keys
        cov, cache = c.coverage or {}, c.cache or {}
        row.update(coverage_ok=cov.get("ok"), coverage_pct=cov.get("coverage_pct"),
                   duplicates=cov.get("duplicates"), missing=cov.get("missing"),
                   cache_hit_pct=cache.get("hit_pct"), cache_resident_mb=cache.get("resident_mb"))
        rows.append(row)
    return pd.DataFrame(rows)


def write_all(run_dir: Path, results: list[CellResult], env: dict | None = None,
              results_1x: list[CellResult] | None = None) -> str:
    """Write summary.csv, report.md and plots/ into run_dir; return the terminal text."""
    probe = run_files.read_probe(run_dir)
    results = relative_to_probe(results, probe)
    summary_frame(results).to_csv(run_dir / "summary.csv", index=False)
    (run_dir / "report.md").write_text(render(results, env, probe, results_1x, "markdown"))
    plots.write_plots(results, run_dir / "plots")
    return render(results, env, probe, results_1x, "text")

"""Tables from cells.jsonl alone: terminal tables (tabulate), summary.csv (pandas) and report.md."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from tabulate import tabulate

from harness import stats
from strategies.registry import AXES

EMULATED_MARK = "*"
OVERRUN_WARN_PCT = 10


def measured(cell: dict | None) -> bool:
    return bool(cell) and not cell.get("error") and "throughput" in (cell.get("figures") or {})


def aggregate(cells: list[dict]) -> list[dict]:
    """One cell per id, in first-seen order. With repeats, figures are the medians over the measured
    repeats (a cell counts as errored only when no repeat was measured; failed_repeats says how many failed), the throughput carries its 95% confidence interval and CV (harness.stats), and the ranks
    of every repeat are pooled (for step-time distributions)."""
    groups: dict[str, list[dict]] = {}
    for c in cells:
        groups.setdefault(c["cell"], []).append(c)
    out = []
    for reps in groups.values():
        ok = [r for r in reps if measured(r)]
        merged = dict((ok or reps)[0], repeats=len(ok), failed_repeats=len(reps) - len(ok),
                      throughput_repeats=[r["figures"]["throughput"] for r in ok])
        if len(ok) > 1:
            figures = {}
            for key, value in ok[0]["figures"].items():
                values = [r["figures"].get(key) for r in ok]
                numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
                figures[key] = _median_like(values) if numeric else value
            figures["throughput_summary"] = stats.summary(merged["throughput_repeats"])
            merged["figures"] = figures
            merged["ranks"] = [rank for r in ok for rank in r.get("ranks") or []]
        out.append(merged)
    return out


def _median_like(values: list) -> float | int:
    """The median, kept an integer when every value is one (step counts, events)."""
    m = float(np.median(values))
    return int(round(m)) if all(isinstance(v, int) for v in values) else m


def _throughput(f: dict) -> str:
    s = f.get("throughput_summary")
    if not s:
        return _fmt(f["throughput"], ".0f")
    return f"{s['median']:.0f} ± {s['half_ci']:.0f} (CV {s['cv'] * 100:.0f}%)"


def relative_to_probe(cells: list[dict], probe: dict) -> list[dict]:
    """Each measured cell's throughput as a multiple of its repeat's in-memory ideal loader (probe.jsonl):
    the figure that stays comparable across machines."""
    ideal = probe.get("ideal_samples_per_s") or []
    out = []
    for c in cells:
        repeat, f = c.get("repeat", 0), c.get("figures", {})
        if "throughput" in f and repeat < len(ideal) and ideal[repeat]:
            c = dict(c, figures=dict(f, vs_probe=f["throughput"] / ideal[repeat]))
        out.append(c)
    return out


def shown_axes(cells: list[dict]) -> list[str]:
    """Axes every cell has, in AXES order; only those whose strategy varies (at least the first)."""
    common = [a for a in AXES if cells and all(a in c["strategies"] for c in cells)]
    varying = [a for a in common if len({c["strategies"][a] for c in cells}) > 1]
    return varying or common[:1]


def _name(cells: list[dict], cell: dict, axis: str) -> str:
    """The strategy's plain name where that is unambiguous in this run, else its label with parameters."""
    name = cell["strategies"][axis].split("(")[0]
    labels = {c["strategies"][axis] for c in cells if c["strategies"][axis].split("(")[0] == name}
    return name if len(labels) == 1 else cell["strategies"][axis]


def strategy_notes(cells: list[dict]) -> list[str]:
    """One line per strategy shown by its plain name but run with parameters."""
    notes = {}
    for a in AXES:
        for c in cells:
            label = c["strategies"][a]
            if "(" in label and _name(cells, c, a) != label:  # shown by its plain name
                notes[f"{a}={label.split('(')[0]}"] = label
    return [f"{k}: {v}" for k, v in notes.items()]


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def header_lines(cells: list[dict], env: dict | None = None, probe: dict | None = None) -> list[str]:
    if not cells:
        return ["no cells were measured"]
    c0 = cells[0]
    lines = [f"Scenario {c0['scenario']}: {c0['world_size']} ranks x {c0['device']}, workload {c0['workload']}, "
             f"batch {c0['batch_size']} per rank, {c0['figures'].get('window_steps', 0)} measured steps per rank"]
    if c0["emulated"]:
        lines.append(f"ACCELERATOR EMULATED: no such GPU here; each step's real CPU compute is padded to the "
                     f"modelled step time and device memory is modelled. Columns marked {EMULATED_MARK} "
                     f"depend on that model. The DDP allreduce, data loading and host memory are real.")
        worst = max((c["figures"].get("overrun_pct", 0) for c in cells), default=0)
        if worst > OVERRUN_WARN_PCT:
            lines.append(f"WARNING: in up to {worst:.0f}% of steps (column CPU>model %) the real CPU step took "
                         f"longer than the modelled accelerator step: this host cannot emulate it at full speed, "
                         f"so throughput and AU understate the accelerator. Use fewer ranks or a bigger host.")
    lines += page_cache_lines(cells, env)
    repeats = max(c.get("repeats", 1) for c in cells)
    if repeats > 1:
        lines.append(f"{repeats} repeats per cell, interleaved across cells; figures are medians over repeats")
    if probe and probe.get("ideal_samples_per_s"):
        lines.append(probe_line(probe))
    notes = strategy_notes(cells)
    if notes:
        lines.append("Parameters: " + "; ".join(notes))
    if env:
        lines.append(f"Host: {env.get('cpu_count')} CPUs ({env.get('cpu_model')}), "
                     f"{env.get('memory_gb') or 0:.0f} GB RAM, torch {env['versions'].get('torch')}")
    return lines


def page_cache_lines(cells: list[dict], env: dict | None) -> list[str]:
    states = sorted({(c.get("page_cache") or {}).get("state", "as-is") for c in cells})
    decomposed = any(c.get("decomposition") for c in cells)
    lines = [f"Page cache before each cell: {', '.join(states)}"
             + (" (decomposition cells ran compute-only, warm and cold phases)" if decomposed else "")]
    unverified = [c["cell"] for c in cells if (c.get("page_cache") or {}).get("verified") is False]
    if unverified:
        lines.append(f"WARNING: the cold drop could not be verified for {len(unverified)} cell(s)")
    data_gb, ram_gb = (env or {}).get("dataset_gb"), (env or {}).get("memory_gb")
    if data_gb and ram_gb and data_gb < ram_gb and "cold" not in states:
        lines.append(f"NOTE: the dataset ({data_gb * 1000:.0f} MB) fits in this host's RAM ({ram_gb:.0f} GB): without "
                     f"--cache-state cold the figures may reflect the page cache, not the storage device")
    return lines


def throughput_table(cells: list[dict]) -> tuple[list[str], list[list]]:
    m = EMULATED_MARK if cells and cells[0]["emulated"] else ""
    axes = shown_axes(cells)
    ci = " (median ± 95% CI)" if any("throughput_summary" in c["figures"] for c in cells) else ""
    probe = ["x ideal loader"] if any("vs_probe" in c["figures"] for c in cells) else []
    au = f"AU %{m}" if m else "AU % (timers / CUDA events / NVML)"
    headers = [*axes, f"samples/s{m}{ci}", *probe, f"step p50 ms{m}", f"p95{m}", f"p99{m}", "stall % mean/max",
               au, "imbalance", "cache hit %", "read MB/s"] + (["CPU>model %"] if m else [])
    rows = []
    for c in cells:
        f = c["figures"]
        row = [_name(cells, c, a) for a in axes]
        if c.get("error") or "throughput" not in f:
            rows.append(row + [_short_error(c)] + ["-"] * (len(headers) - len(row) - 1))
            continue
        rows.append(row + [
            _throughput(f), *([_fmt(f.get("vs_probe"), ".2f")] if probe else []), _fmt(f["step_p50_ms"], ".1f"), _fmt(f["step_p95_ms"], ".1f"),
            _fmt(f["step_p99_ms"], ".1f"), f"{f['stall_mean_pct']:.0f} / {f['stall_max_pct']:.0f}",
            _au(f), _fmt(f["imbalance"], ".2f"), _hit(c), _fmt(f["read_mb_s"], ".1f")]
            + ([_fmt(f["overrun_pct"], ".0f")] if m else []))
    return headers, rows


def memory_table(cells: list[dict]) -> tuple[list[str], list[list]]:
    emulated = bool(cells and cells[0]["emulated"])
    axes = shown_axes(cells)
    device_col = f"device peak GB{EMULATED_MARK} (modelled)" if emulated else "device peak GB"
    headers = [*axes, "host PSS/rank MB", "host PSS all ranks MB", "host RSS/rank MB", "cache resident MB",
               device_col, "disk read MB", "requested MB"]
    rows = []
    for c in cells:
        f = c["figures"]
        cache = c.get("cache") or {}
        rows.append([_name(cells, c, a) for a in axes] + [
            _fmt(f.get("host_pss_peak_mb"), ".0f"), _fmt(f.get("host_pss_total_mb"), ".0f"),
            _fmt(f.get("host_rss_peak_mb"), ".0f"),
            f"{cache['resident_mb']:.0f} in {cache['caches']}" if cache else "-",
            _fmt(f.get("device_peak_gb"), ".2f"), _fmt(f.get("disk_read_mb"), ".1f"),
            _fmt(f.get("logical_read_mb"), ".1f")])
    return headers, rows


def batching_table(cells: list[dict]) -> tuple[list[str], list[list]]:
    axes = shown_axes(cells)
    headers = [*axes, "mean batch", "max batch", "padding waste %", "OOM events", "shadow steps",
               "coverage %", "duplicates", "missing", "sampler contract"]
    rows = []
    for c in cells:
        f, cov = c["figures"], c.get("coverage") or {}
        rows.append([_name(cells, c, a) for a in axes] + [
            _fmt(f.get("mean_batch"), ".1f"), _fmt(f.get("max_batch"), ".0f"),
            _fmt(f.get("padding_waste_pct"), ".0f"),
            "OOM (cell stopped)" if (c.get("error") or "").startswith("OOM") else _fmt(f.get("oom_events"), ".0f"),
            _fmt(f.get("shadow_steps"), ".0f"), _fmt(cov.get("coverage_pct"), ".1f"),
            _fmt(cov.get("duplicates"), ".0f"), _fmt(cov.get("missing"), ".0f"),
            "-" if not cov else ("ok" if cov.get("ok") else "BROKEN")])
    return headers, rows


def _au(f: dict) -> str:
    """AU from the step timers; on real GPUs also from CUDA events and NVML's sampled utilisation."""
    extra = [f"{f[k]:.0f}" for k in ("gpu_compute_au_pct", "nvml_util_pct") if f.get(k) is not None]
    return " / ".join([f"{f['au_pct']:.0f}", *extra])


def _hit(cell: dict) -> str:
    cache = cell.get("cache")
    return f"{cache['hit_pct']:.0f} ({cache['scope']})" if cache else "-"


def _short_error(cell: dict) -> str:
    error = cell.get("error") or "no steps"
    return "OOM" if error.startswith("OOM") else error[:60]


def decomposition_table(cells: list[dict]) -> tuple[list[str], list[list]]:
    m = EMULATED_MARK if cells and cells[0]["emulated"] else ""
    axes = shown_axes(cells)
    headers = [*axes, f"compute s/step{m}", "prep stall s/step (%)", "fetch stall s/step (%)",
               f"compute-bound samples/s{m}", f"warm samples/s{m}", f"cold samples/s{m}"]
    rows = []
    for c in cells:
        d = c.get("decomposition")
        if not d:
            continue
        row = [_name(cells, c, a) for a in axes]
        if "error" in d:
            rows.append(row + [d["error"]] + ["-"] * 5)
            continue
        rows.append(row + [f"{d['compute_s']:.4f}", f"{d['prep_stall_s']:.4f} ({d['prep_stall_pct']:.0f}%)",
                           f"{d['fetch_stall_s']:.4f} ({d['fetch_stall_pct']:.0f}%)",
                           f"{d['compute_bound_samples_s']:.0f}", f"{d['warm_samples_s']:.0f}",
                           f"{d['cold_samples_s']:.0f}"])
    return headers, rows


TABLES = (("Throughput and utilisation", throughput_table), ("Memory and I/O (peaks over the window)", memory_table),
          ("Batching and correctness", batching_table),
          ("Stall decomposition (compute alone / page cache warm / page cache dropped)", decomposition_table))


def render_text(cells: list[dict], env: dict | None = None, probe: dict | None = None) -> str:
    cells = aggregate(cells)
    parts = header_lines(cells, env, probe)
    for title, table in TABLES:
        headers, rows = table(cells) if cells else ([], [])
        if rows:
            parts += ["", title, tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)]
    return "\n".join(parts)


def render_markdown(cells: list[dict], env: dict | None = None, probe: dict | None = None) -> str:
    cells = aggregate(cells)
    parts = ["# Data-loading benchmark report", ""] + [f"{line}  " for line in header_lines(cells, env, probe)]
    for title, table in TABLES:
        headers, rows = table(cells) if cells else ([], [])
        if rows:
            parts += ["", f"## {title}", "",
                      tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)]
    return "\n".join(parts) + "\n"


def summary_frame(cells: list[dict]) -> pd.DataFrame:
    rows = []
    for c in cells:
        row = {"cell": c["cell"], "repeat": c.get("repeat", 0), **c["strategies"], "device": c["device"],
               "emulated": c["emulated"], "error": c.get("error")}
        row.update(c["figures"])
        cov, cache = c.get("coverage") or {}, c.get("cache") or {}
        row.update(coverage_ok=cov.get("ok"), coverage_pct=cov.get("coverage_pct"),
                   duplicates=cov.get("duplicates"), missing=cov.get("missing"),
                   cache_hit_pct=cache.get("hit_pct"), cache_resident_mb=cache.get("resident_mb"))
        rows.append(row)
    return pd.DataFrame(rows)


def write_all(run_dir: Path, cells: list[dict], env: dict | None = None,
              cells_1x: list[dict] | None = None) -> str:
    """Write summary.csv, report.md (with the seeds' tables, measured) and plots/; return the terminal text."""
    from harness import plots, results, seedtables

    probe = results.read_probe(run_dir)
    cells = relative_to_probe(cells, probe)
    summary_frame(cells).to_csv(run_dir / "summary.csv", index=False)
    samples = (env or {}).get("dataset", {}).get("samples")
    seeds_md = seedtables.render_seed_tables(cells, cells_1x, dataset_samples=samples, fmt="markdown")
    (run_dir / "report.md").write_text(render_markdown(cells, env, probe) + "\n## The seeds' tables, measured\n\n"
                                       + seeds_md + "\n")
    plots.write_plots(cells, run_dir / "plots")
    return (render_text(cells, env, probe) + "\n\nThe seeds' tables, measured\n"
            + seedtables.render_seed_tables(cells, cells_1x, dataset_samples=samples, fmt="text"))


def probe_line(probe: dict) -> str:
    ideal, memcpy = probe["ideal_samples_per_s"], probe.get("memcpy_gb_s") or [0]
    return (f"Machine probe (per repeat, median): in-memory ideal loader {np.median(ideal):.0f} samples/s in one "
            f"process, memory copy {np.median(memcpy):.1f} GB/s; 'x ideal loader' = samples/s / that figure")

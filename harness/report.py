"""Tables from cells.jsonl alone: terminal tables (tabulate), summary.csv (pandas) and report.md."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
from tabulate import tabulate

from strategies.registry import AXES

EMULATED_MARK = "*"
OVERRUN_WARN_PCT = 10


def _axes_shown(cells: list[dict]) -> list[str]:
    varying = [a for a in AXES if len({c["strategies"][a] for c in cells}) > 1]
    return varying or ["storage"]


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


def header_lines(cells: list[dict], env: dict | None = None) -> list[str]:
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
    notes = strategy_notes(cells)
    if notes:
        lines.append("Parameters: " + "; ".join(notes))
    if env:
        lines.append(f"Host: {env.get('cpu_count')} CPUs ({env.get('cpu_model')}), "
                     f"{env.get('memory_gb') or 0:.0f} GB RAM, torch {env['versions'].get('torch')}")
    return lines


def throughput_table(cells: list[dict]) -> tuple[list[str], list[list]]:
    m = EMULATED_MARK if cells and cells[0]["emulated"] else ""
    axes = _axes_shown(cells)
    headers = [*axes, f"samples/s{m}", f"step p50 ms{m}", f"p95{m}", f"p99{m}", "stall % mean/max",
               f"AU %{m}", "imbalance", "cache hit %", "read MB/s"] + (["CPU>model %"] if m else [])
    rows = []
    for c in cells:
        f = c["figures"]
        row = [_name(cells, c, a) for a in axes]
        if c.get("error") or "throughput" not in f:
            rows.append(row + [_short_error(c)] + ["-"] * (len(headers) - len(row) - 1))
            continue
        rows.append(row + [
            _fmt(f["throughput"], ".0f"), _fmt(f["step_p50_ms"], ".1f"), _fmt(f["step_p95_ms"], ".1f"),
            _fmt(f["step_p99_ms"], ".1f"), f"{f['stall_mean_pct']:.0f} / {f['stall_max_pct']:.0f}",
            _fmt(f["au_pct"], ".0f"), _fmt(f["imbalance"], ".2f"), _hit(c), _fmt(f["read_mb_s"], ".1f")]
            + ([_fmt(f["overrun_pct"], ".0f")] if m else []))
    return headers, rows


def memory_table(cells: list[dict]) -> tuple[list[str], list[list]]:
    emulated = bool(cells and cells[0]["emulated"])
    axes = _axes_shown(cells)
    device_col = f"device peak GB{EMULATED_MARK} (modelled)" if emulated else "device peak GB"
    headers = [*axes, "host PSS/rank MB", "host PSS all ranks MB", "host RSS/rank MB", "cache resident MB",
               device_col]
    rows = []
    for c in cells:
        f = c["figures"]
        cache = c.get("cache") or {}
        rows.append([_name(cells, c, a) for a in axes] + [
            _fmt(f.get("host_pss_peak_mb"), ".0f"), _fmt(f.get("host_pss_total_mb"), ".0f"),
            _fmt(f.get("host_rss_peak_mb"), ".0f"),
            f"{cache['resident_mb']:.0f} in {cache['caches']}" if cache else "-",
            _fmt(f.get("device_peak_gb"), ".2f")])
    return headers, rows


def batching_table(cells: list[dict]) -> tuple[list[str], list[list]]:
    axes = _axes_shown(cells)
    headers = [*axes, "mean batch", "max batch", "padding waste %", "OOM events", "shadow steps",
               "coverage %", "duplicates", "missing", "sampler contract"]
    rows = []
    for c in cells:
        f, cov = c["figures"], c.get("coverage") or {}
        rows.append([_name(cells, c, a) for a in axes] + [
            _fmt(f.get("mean_batch"), ".1f"), _fmt(f.get("max_batch"), "d"),
            _fmt(f.get("padding_waste_pct"), ".0f"),
            "OOM (cell stopped)" if (c.get("error") or "").startswith("OOM") else _fmt(f.get("oom_events"), "d"),
            _fmt(f.get("shadow_steps"), "d"), _fmt(cov.get("coverage_pct"), ".1f"),
            _fmt(cov.get("duplicates"), "d"), _fmt(cov.get("missing"), "d"),
            "-" if not cov else ("ok" if cov.get("ok") else "BROKEN")])
    return headers, rows


def _hit(cell: dict) -> str:
    cache = cell.get("cache")
    return f"{cache['hit_pct']:.0f} ({cache['scope']})" if cache else "-"


def _short_error(cell: dict) -> str:
    error = cell.get("error") or "no steps"
    return "OOM" if error.startswith("OOM") else error[:60]


TABLES = (("Throughput and utilisation", throughput_table), ("Memory (peaks over the window)", memory_table),
          ("Batching and correctness", batching_table))


def render_text(cells: list[dict], env: dict | None = None) -> str:
    parts = header_lines(cells, env)
    for title, table in TABLES:
        if cells:
            headers, rows = table(cells)
            parts += ["", title, tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)]
    return "\n".join(parts)


def render_markdown(cells: list[dict], env: dict | None = None) -> str:
    parts = ["# Data-loading benchmark report", ""] + [f"{line}  " for line in header_lines(cells, env)]
    for title, table in TABLES:
        if cells:
            headers, rows = table(cells)
            parts += ["", f"## {title}", "",
                      tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)]
    return "\n".join(parts) + "\n"


def summary_frame(cells: list[dict]) -> pd.DataFrame:
    rows = []
    for c in cells:
        row = {"cell": c["cell"], **c["strategies"], "device": c["device"], "emulated": c["emulated"],
               "error": c.get("error")}
        row.update(c["figures"])
        cov, cache = c.get("coverage") or {}, c.get("cache") or {}
        row.update(coverage_ok=cov.get("ok"), coverage_pct=cov.get("coverage_pct"),
                   duplicates=cov.get("duplicates"), missing=cov.get("missing"),
                   cache_hit_pct=cache.get("hit_pct"), cache_resident_mb=cache.get("resident_mb"))
        rows.append(row)
    return pd.DataFrame(rows)


def write_all(run_dir: Path, cells: list[dict], env: dict | None = None) -> str:
    """Write summary.csv and report.md into run_dir; return the terminal text."""
    summary_frame(cells).to_csv(run_dir / "summary.csv", index=False)
    (run_dir / "report.md").write_text(render_markdown(cells, env))
    return render_text(cells, env)

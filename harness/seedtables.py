"""The seed posts' tables, measured: scaling, fixed vs dynamic memory, the cumulative ladder and a ranking.

Pure functions of cells lists (the lines of cells.jsonl). Each table returns (title, headers, rows) for
tabulate. Several lines with the same cell id (a run with --repeats) are merged first: the median of the
repeats' figures; a cell that ran once counts as n=1.
"""
from __future__ import annotations


from tabulate import tabulate

from harness.report import (EMULATED_MARK, OVERRUN_WARN_PCT, _fmt, _name, _short_error, aggregate, measured,
                            shown_axes, strategy_notes)
from strategies.registry import AXES

BASELINE = {"storage": "raw", "cache": "none", "batching": "fixed", "sampler": "default"}


def figure(cell: dict | None, key: str):
    return cell["figures"].get(key) if measured(cell) else None


def emulated(cells: list[dict]) -> bool:
    return any(c.get("emulated") for c in cells)


def stack_label(cells: list[dict], cell: dict, axes: list[str]) -> str:
    return "/".join(_name(cells, cell, a) for a in axes)


def _plain(cell: dict, axis: str) -> str:
    return cell["strategies"].get(axis, "").split("(")[0]


def _matches(cell: dict, want: dict) -> bool:
    """want: axis -> a full label or a plain strategy name."""
    return all(cell["strategies"].get(a) == v or _plain(cell, a) == v for a, v in want.items())


def infer_dataset_samples(cells: list[dict]) -> int | None:
    """Dataset size from the coverage check of a completed epoch (unique + missing indices)."""
    for c in cells:
        for epoch in (c.get("coverage") or {}).get("epochs", []):
            if epoch.get("complete") and epoch.get("missing") is not None:
                return epoch["unique"] + epoch["missing"]
    return None


def scaling_table(cells_1x: list[dict], cells_4x: list[dict]) -> tuple[str, list[str], list[list]]:
    """Throughput per strategy stack at 1 rank and at N ranks; efficiency = thr_N / (N x thr_1)."""
    one, many = aggregate(cells_1x), aggregate(cells_4x)
    n1, n = (cs[0].get("world_size") or 1 if cs else 1 for cs in (one, many))
    both = one + many
    axes, m = shown_axes(both), EMULATED_MARK if emulated(both) else ""
    by_one, by_many = ({tuple(sorted(c["strategies"].items())): c for c in cs} for cs in (one, many))
    headers = ["/".join(axes), f"{n1} rank{'s' * (n1 > 1)} samples/s{m}", f"{n} ranks samples/s{m}",
               "scaling efficiency %"]
    rows = []
    order = [k for k in by_many if k in by_one] + [k for k in by_many if k not in by_one]
    for key in order + [k for k in by_one if k not in by_many]:  # stacks measured on both sides first
        a, b = by_one.get(key), by_many.get(key)
        t1, tn = figure(a, "throughput"), figure(b, "throughput")
        efficiency = (tn / n) / (t1 / n1) * 100 if t1 and tn else None
        rows.append([stack_label(both, b or a, axes),
                     _fmt(t1, ".0f") if a is None or measured(a) else _short_error(a),
                     _fmt(tn, ".0f") if b is None or measured(b) else _short_error(b), _fmt(efficiency, ".0f")])
    title = f"Scaling: {n1} vs {n} ranks (efficiency = per-rank throughput at {n} / per-rank at {n1})"
    batches = {c.get("batch_size") for c in both} - {None}
    if len(batches) > 1:
        title += f"; NOTE: the runs differ in batch per rank ({', '.join(map(str, sorted(batches)))})"
    return title, headers, rows


def memory_table(cells: list[dict]) -> tuple[str, list[str], list[list]]:
    """Device memory of fixed vs dynamic batching per (storage, cache, sampler) stack, with mean batches."""
    cells = aggregate(cells)
    m = EMULATED_MARK if emulated(cells) else ""
    fixed = next((c["strategies"]["batching"] for c in cells if _plain(c, "batching") == "fixed"), None)
    others = list(dict.fromkeys(c["strategies"]["batching"] for c in cells if _plain(c, "batching") != "fixed"))
    rest = [a for a in shown_axes(cells) if a != "batching"] or ["storage"]
    index = {(tuple(c["strategies"][a] for a in rest), c["strategies"]["batching"]): c for c in cells}
    stacks = list(dict.fromkeys(tuple(c["strategies"][a] for a in rest) for c in cells))
    several = len(others) > 1
    headers = ["/".join(rest)] + (["batching"] if several else []) + [
        f"fixed GB{m}", f"dynamic GB{m}", "change %", "fixed mean batch", "dynamic mean batch"]
    rows = []
    for stack in stacks:
        f = index.get((stack, fixed))
        for label in others:
            d = index.get((stack, label))
            if f is None and d is None:
                continue
            shown = f or d
            gf, gd = figure(f, "device_peak_gb"), figure(d, "device_peak_gb")
            change = (gd - gf) / gf * 100 if gf and gd is not None else None
            batching = [_name(cells, d, "batching") if d else "-"] if several else []
            rows.append([stack_label(cells, shown, rest), *batching,
                _fmt(gf, ".2f") if f is None or measured(f) else _short_error(f),
                _fmt(gd, ".2f") if d is None or measured(d) else _short_error(d),
                _fmt(change, "+.0f"), _fmt(figure(f, "mean_batch"), ".1f"), _fmt(figure(d, "mean_batch"), ".1f")])
    title = "Device memory: fixed vs dynamic batching (peak over the window; mean batch shows what was packed)"
    return title, headers, rows


def ladder_steps(cells: list[dict]) -> list[tuple[str, dict, dict | None]]:
    """The second seed's cumulative ladder: (step, wanted strategies, the measured cell or None)."""
    raw_default = {"storage": "raw", "sampler": "default"}
    lru = next((c["strategies"]["cache"] for c in cells if _matches(c, {**raw_default, "batching": "fixed"})
                and _plain(c, "cache") == "lru"), None)
    lru = lru or next((c["strategies"]["cache"] for c in cells if _plain(c, "cache") == "lru"), "lru")
    dynamic = next((c["strategies"]["batching"] for c in cells if _plain(c, "batching") == "dynamic"), "dynamic")
    best_want = {"cache": lru, "batching": dynamic, "sampler": "balanced"}
    candidates = [c for c in cells if _matches(c, best_want) and measured(c)]
    best = max(candidates, key=lambda c: c["figures"]["throughput"], default=None)
    steps = [("baseline", BASELINE), ("+ cache", {**BASELINE, "cache": lru}),
             ("+ dynamic batching", {**BASELINE, "cache": lru, "batching": dynamic})]
    out = [(name, want, next((c for c in cells if _matches(c, want)), None)) for name, want in steps]
    out.append(("+ everything", {"storage": "best", **best_want}, best))
    return out


def ladder_table(cells: list[dict], dataset_samples: int | None = None) -> tuple[str, list[str], list[list]]:
    """Baseline, + cache, + dynamic batching, + everything: time per epoch, AU, memory, speed-up."""
    cells = aggregate(cells)
    m = EMULATED_MARK if emulated(cells) else ""
    samples = dataset_samples or infer_dataset_samples(cells)
    axes = [a for a in AXES if cells and all(a in c["strategies"] for c in cells)]
    headers = ["step", "/".join(axes), f"time per epoch (s){m}", f"AU %{m}", f"device peak GB{m}",
               "host PSS all ranks MB", f"speed-up{m}"]
    steps = ladder_steps(cells)
    base = figure(steps[0][2], "throughput")
    rows = []
    for name, want, cell in steps:
        if cell is None:
            wanted = "/".join(str(want.get(a, "-")).split("(")[0] for a in axes)
            rows.append([name, f"not in this run ({wanted})"] + ["-"] * (len(headers) - 2))
            continue
        label = stack_label(cells, cell, axes)
        if not measured(cell):
            rows.append([name, f"{label}: {_short_error(cell)}"] + ["-"] * (len(headers) - 2))
            continue
        thr = cell["figures"]["throughput"]
        rows.append([name, label, _fmt(samples / thr if samples and thr else None, ".1f"),
                     _fmt(figure(cell, "au_pct"), ".0f"), _fmt(figure(cell, "device_peak_gb"), ".2f"),
                     _fmt(figure(cell, "host_pss_total_mb"), ".0f"),
                     _fmt(thr / base if base else None, ".2f")])
    per = f"{samples} samples" if samples else "dataset size unknown"
    return f"The cumulative ladder of the second seed, measured (epoch = {per})", headers, rows


def ranking_table(cells: list[dict]) -> tuple[str, list[str], list[list]]:
    """Every cell by throughput, fastest first, with its speed-up over the baseline; errored cells last."""
    cells = aggregate(cells)
    m = EMULATED_MARK if emulated(cells) else ""
    axes = shown_axes(cells)
    ok = sorted((c for c in cells if measured(c)), key=lambda c: -c["figures"]["throughput"])
    base = next((c for c in cells if _matches(c, BASELINE)), None)
    against = "baseline"
    if not measured(base):
        base, against = (ok[-1] if ok else None), "slowest"
    base_thr = figure(base, "throughput")
    repeats = any(c["repeats"] > 1 for c in cells)
    headers = ["#", "/".join(axes), f"samples/s{m}", f"speed-up vs {against}{m}", f"AU %{m}", "stall % mean",
               f"device peak GB{m}"] + (["n"] if repeats else [])
    rows = []
    for i, c in enumerate(ok, 1):
        f = c["figures"]
        rows.append([str(i), stack_label(cells, c, axes), _fmt(f["throughput"], ".0f"),
                     _fmt(f["throughput"] / base_thr if base_thr else None, ".2f"), _fmt(f.get("au_pct"), ".0f"),
                     _fmt(f.get("stall_mean_pct"), ".0f"), _fmt(f.get("device_peak_gb"), ".2f")]
                    + ([str(c["repeats"])] if repeats else []))
    for c in cells:
        if not measured(c):
            rows.append(["-", stack_label(cells, c, axes), _short_error(c)] + ["-"] * (len(headers) - 3))
    return f"All cells by throughput (speed-up over the {against} cell)", headers, rows


def note_lines(cells: list[dict]) -> list[str]:
    lines = []
    if emulated(cells):
        lines.append(f"ACCELERATOR EMULATED: columns marked {EMULATED_MARK} depend on the modelled accelerator "
                     f"(step time, device memory); data loading, the DDP allreduce and host memory are real.")
        worst = max((c.get("figures", {}).get("overrun_pct") or 0 for c in cells), default=0)
        if worst > OVERRUN_WARN_PCT:
            lines.append(f"WARNING: in up to {worst:.0f}% of steps the real CPU step outran the modelled one: "
                         f"throughput, AU and scaling understate the accelerator on this host.")
    common = [a for a in AXES if cells and all(a in c["strategies"] for c in cells)]
    notes = strategy_notes([{**c, "strategies": {a: c["strategies"].get(a, "") for a in AXES}} for c in cells])
    if notes:
        lines.append("Parameters: " + "; ".join(notes))
    fixed = [a for a in common if len({c["strategies"][a] for c in cells}) == 1 and a not in shown_axes(cells)]
    if fixed:
        lines.append("Every cell: " + ", ".join(f"{a}={cells[0]['strategies'][a]}" for a in fixed))
    return lines


def seed_tables(cells: list[dict], cells_1x: list[dict] | None = None,
                dataset_samples: int | None = None) -> list[tuple[str, list[str], list[list]]]:
    """The tables that apply to these cells."""
    tables = []
    if cells_1x:
        tables.append(scaling_table(cells_1x, cells))
    plain = {_plain(c, "batching") for c in cells}
    if "fixed" in plain and len(plain) > 1:
        tables.append(memory_table(cells))
    if sum(cell is not None for _, _, cell in ladder_steps(aggregate(cells))) >= 2:
        tables.append(ladder_table(cells, dataset_samples))
    if cells:
        tables.append(ranking_table(cells))
    return tables


def render_seed_tables(cells: list[dict], cells_1x: list[dict] | None = None,
                       dataset_samples: int | None = None, fmt: str = "text") -> str:
    """The applicable tables with their titles, as terminal text or as markdown for a pull-request comment."""
    if not cells:
        return "no cells were measured"
    markdown = fmt == "markdown"
    parts = [f"{line}  " if markdown else line for line in note_lines(cells + (cells_1x or []))]
    for title, headers, rows in seed_tables(cells, cells_1x, dataset_samples):
        parts += ["", f"### {title}", ""] if markdown else ["", title]
        parts.append(tabulate(rows, headers=headers, tablefmt="github" if markdown else "simple",
                              disable_numparse=True))
    return "\n".join(parts) + "\n"

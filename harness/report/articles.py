"""The articles' tables, measured: the tables the two blog posts print (scaling, fixed vs dynamic
device memory, the cumulative ladder, a ranking), built from what this run measured.

Pure functions: results in (harness.results.cellresult.CellResult, the lines of cells.jsonl), a
harness.report.tables.Table out. Several results with the same cell id (a run with --repeats) are
merged first (harness.results.repeats.merge_repeats): the median of the repeats' figures; a cell
that ran once counts as n=1.

Every throughput carries its interval ([low, high], labelled in the header or an "interval"
column). The ranking and the ladder call two cells different only when their intervals do not
overlap; otherwise they are a tie, and the table's footnote says so. The ladder's steps are fixed
before measuring (the articles' own choice for each step, named in the table), never the best
measured of several cells: taking the best of N noisy cells would overstate the step.
"""
from __future__ import annotations

from harness.analysis.ties import tie_ranks
from harness.report.tables import (
    TIE_NOTE,
    Table,
    common_axes,
    compare_intervals,
    display_name,
    fmt,
    fmt_throughput,
    interval,
    interval_header,
    interval_label_of,
    mark,
    repeats_text,
    short_error,
    shown_axes,
    stack_label,
)
from harness.results.cellresult import CellResult
from harness.results.repeats import CellSummary, merge_repeats

BASELINE = {"storage": "raw", "cache": "none", "batching": "fixed", "sampler": "default"}
# the storage of the ladder's last step, fixed before measuring: the articles' first choice that the run has
# (HDF5 is what the articles recommend first, then memory maps); never the best measured of the storages
EVERYTHING_STORAGE = ("hdf5", "mmap", "raw")


def figure(result: CellResult | None, key: str):
    """A figure of a measured result, by its attribute's name (an unknown name is an
    AttributeError); None for no result or an errored one."""
    return getattr(result.figures, key) if result is not None and result.measured else None


def _matches(result: CellResult, want: dict[str, str]) -> bool:
    """want: axis -> a full label or a strategy name."""
    return all(result.label(a) == v or result.name(a) == v for a, v in want.items())


def infer_dataset_samples(results: list[CellResult]) -> int | None:
    """Dataset size from the coverage check of a completed epoch (unique + missing indices)."""
    for r in results:
        for epoch in r.coverage.epochs if r.coverage is not None else []:
            if epoch.complete and epoch.missing is not None:
                return epoch.unique + epoch.missing
    return None


def _shown_or_error(result: CellResult | None, key: str, spec: str) -> str:
    return fmt(figure(result, key), spec) if result is None or result.measured else short_error(result)


def _devices(results: list[CellResult]) -> str:
    return " and ".join(sorted({r.device + ("" if "emulated" in r.device or not r.emulated else " (emulated)")
                                for r in results}))


def scaling_mismatch(results_1x: list[CellResult], results_nx: list[CellResult]) -> str | None:
    """Why the two runs cannot be divided one by the other, or None: efficiency compares a device
    with itself at more ranks, so both runs must be on the same device, both real or both emulated
    (a 1-GPU host runs `1xV100` on its GPU and `4xV100` emulated; N ranks sharing one GPU are
    another device than one rank on it: its name says so)."""
    kinds = [{(r.device, bool(r.emulated)) for r in rs} for rs in (results_1x, results_nx)]
    if not kinds[0] or not kinds[1] or kinds[0] == kinds[1]:
        return None
    return (f"the smaller run is on {_devices(results_1x)}, the larger on {_devices(results_nx)}: efficiency "
            f"needs the same device, both real or both emulated; rerun one of them on the other's device")


def scaling_table(results_1x: list[CellResult], results_nx: list[CellResult]) -> Table:
    """Throughput per strategy stack at 1 rank and at N ranks; efficiency = thr_N / (N x thr_1).
    Refused (one row saying why) when the runs' devices or emulation differ (scaling_mismatch)."""
    one, many = merge_repeats(results_1x), merge_repeats(results_nx)
    n1, n = ((rs[0].world_size or 1) if rs else 1 for rs in (one, many))
    mismatch = scaling_mismatch(one, many)
    if mismatch is not None:
        return Table(f"Scaling: {n1} vs {n} ranks: refused", ["why"], [[mismatch]])
    both = one + many
    axes, m = shown_axes(both), mark(both)
    by_one, by_many = ({tuple(sorted(r.strategies.items())): r for r in rs} for rs in (one, many))
    headers = ["/".join(axes), f"{n1} rank{'s' * (n1 > 1)} samples/s{m}", f"{n} ranks samples/s{m}",
               "scaling efficiency %"]
    rows = []
    order = [k for k in by_many if k in by_one] + [k for k in by_many if k not in by_one]
    for key in order + [k for k in by_one if k not in by_many]:  # stacks measured on both sides first
        a, b = by_one.get(key), by_many.get(key)
        t1, tn = figure(a, "throughput"), figure(b, "throughput")
        efficiency = (tn / n) / (t1 / n1) * 100 if t1 and tn else None
        rows.append([stack_label(both, b or a, axes), _throughput_or_error(a), _throughput_or_error(b),
                     fmt(efficiency, ".0f")])
    title = f"Scaling: {n1} vs {n} ranks (efficiency = per-rank throughput at {n} / per-rank at {n1})"
    batches = {r.batch_size for r in both} - {None}
    if len(batches) > 1:
        title += f"; NOTE: the runs differ in batch per rank ({', '.join(map(str, sorted(batches)))})"
    return Table(title, headers, rows, _interval_notes(both))


def _throughput_or_error(result: CellResult | None) -> str:
    if result is None:
        return "-"
    return fmt_throughput(result) if result.measured else short_error(result)


def _interval_notes(results: list[CellResult]) -> list[str]:
    """What the [low, high] after each throughput is, one line per kind of interval shown."""
    labels = list(dict.fromkeys(interval_label_of(r) for r in results if r.measured and interval(r)))
    return [f"[low, high] after a throughput: {'; '.join(labels)}"] if labels else []


def fixed_vs_dynamic_table(results: list[CellResult]) -> Table:
    """Device memory of fixed vs dynamic batching per (storage, cache, sampler) stack, with mean
    batches."""
    cells = merge_repeats(results)
    m = mark(cells)
    fixed = next((c.label("batching") for c in cells if c.name("batching") == "fixed"), None)
    others = list(dict.fromkeys(c.label("batching") for c in cells if c.name("batching") != "fixed"))
    rest = [a for a in shown_axes(cells) if a != "batching"] or ["storage"]
    index = {(tuple(c.label(a) for a in rest), c.label("batching")): c for c in cells}
    stacks = list(dict.fromkeys(tuple(c.label(a) for a in rest) for c in cells))
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
            batching = [display_name(cells, d, "batching") if d else "-"] if several else []
            rows.append([stack_label(cells, shown, rest), *batching, _shown_or_error(f, "device_peak_gb", ".2f"),
                         _shown_or_error(d, "device_peak_gb", ".2f"), fmt(change, "+.0f"),
                         fmt(figure(f, "mean_batch"), ".1f"), fmt(figure(d, "mean_batch"), ".1f")])
    title = "Device memory: fixed vs dynamic batching (peak over the window; mean batch shows what was packed)"
    return Table(title, headers, rows)


def _pick(cells: list[CellSummary], axis: str, name: str, among: list[CellSummary] | None = None) -> str:
    """The label of the first cell (among `among` first, if given) running strategy `name` on
    `axis`; the bare name when none does."""
    for pool in (among or [], cells):
        label = next((c.label(axis) for c in pool if c.name(axis) == name), None)
        if label is not None:
            return label
    return name


def ladder_steps(cells: list[CellSummary]) -> list[tuple[str, dict[str, str], CellSummary | None]]:
    """The second article's cumulative ladder: (step, wanted strategies, the measured cell or
    None).

    Every step's strategies are fixed a priori (not chosen by measured throughput): the LRU cache
    and the dynamic batching the run has (the first such label, preferring the one run on the
    baseline's stack), and for "+ everything" also the balanced sampler and the storage of
    EVERYTHING_STORAGE that the run has."""
    raw_fixed = [c for c in cells if _matches(c, {"storage": "raw", "sampler": "default", "batching": "fixed"})]
    lru = _pick(cells, "cache", "lru", among=raw_fixed)
    dynamic = _pick(cells, "batching", "dynamic")
    storages = {c.name("storage") for c in cells}
    storage = next((s for s in EVERYTHING_STORAGE if s in storages), EVERYTHING_STORAGE[0])
    everything = {"storage": storage, "cache": lru, "batching": dynamic, "sampler": "balanced"}
    steps = [("baseline", BASELINE), ("+ cache", {**BASELINE, "cache": lru}),
             ("+ dynamic batching", {**BASELINE, "cache": lru, "batching": dynamic}),
             (f"+ everything ({storage}, balanced sampler)", everything)]
    return [(name, want, next((c for c in cells if _matches(c, want)), None)) for name, want in steps]


def _wanted_names(cells: list[CellSummary], want: dict[str, str], axes: list[str]) -> str:
    """A wanted stack by strategy names: a label that some cell runs is shown by that cell's
    name."""
    def name(axis: str) -> str:
        label = want.get(axis, "-")
        return next((c.name(axis) for c in cells if c.label(axis) == label), label)
    return "/".join(name(a) for a in axes)


def ladder_table(results: list[CellResult], dataset_samples: int | None = None) -> Table:
    """Baseline, + cache, + dynamic batching, + everything: throughput with its interval, time per
    epoch, AU, memory, speed-up, and whether the step differs from the previous one (intervals
    apart) or ties."""
    cells = merge_repeats(results)
    m = mark(cells)
    samples = dataset_samples or infer_dataset_samples(cells)
    axes = common_axes(cells)
    steps = ladder_steps(cells)
    present = [cell for _, _, cell in steps if cell is not None]
    words, per_row = interval_header(present)
    headers = ["step", "/".join(axes), f"samples/s{m}{words}", *(["interval"] if per_row else []),
               f"time per epoch (s){m}", f"AU %{m}", f"device peak GB{m}", "host PSS all ranks MB",
               f"speed-up{m}", "vs previous step"]
    base = figure(steps[0][2], "throughput")
    rows, previous = [], None
    for name, want, cell in steps:
        if cell is None:
            rows.append([name, f"not in this run ({_wanted_names(cells, want, axes)})"]
                        + ["-"] * (len(headers) - 2))
            previous = None
            continue
        label = stack_label(cells, cell, axes)
        if not cell.measured:
            rows.append([name, f"{label}: {short_error(cell)}"] + ["-"] * (len(headers) - 2))
            previous = None
            continue
        thr = cell.figures.throughput
        rows.append([name, label, fmt_throughput(cell), *([interval_label_of(cell)] if per_row else []),
                     fmt(samples / thr if samples and thr else None, ".1f"),
                     fmt(figure(cell, "au_pct"), ".0f"), fmt(figure(cell, "device_peak_gb"), ".2f"),
                     fmt(figure(cell, "host_pss_total_mb"), ".0f"), fmt(thr / base if base else None, ".2f"),
                     compare_intervals(cell, previous) if previous is not None else "-"])
        previous = cell
    per = f"{samples} samples" if samples else "dataset size unknown"
    notes = ["Each step's strategies were fixed before measuring (named in the step), not picked as the best "
             "measured of several cells, which would overstate the step. vs previous step: faster / slower "
             "when the two throughput intervals do not overlap, tie when they do (not a significant "
             "difference)"]
    return Table(f"The cumulative ladder of the second article, measured (epoch = {per})", headers, rows, notes)


def ranking_table(results: list[CellResult]) -> Table:
    """Every cell by rank (1 + the cells whose interval lies wholly above its own), then by
    throughput, with its speed-up over the baseline; cells whose intervals overlap another's are
    ties (rank marked "="); errored cells last."""
    cells = merge_repeats(results)
    m = mark(cells)
    axes = shown_axes(cells)
    ok = sorted((c for c in cells if c.measured), key=lambda c: -c.figures.throughput)
    base = next((c for c in cells if _matches(c, BASELINE)), None)
    against = "baseline"
    if base is None or not base.measured:
        base, against = (ok[-1] if ok else None), "slowest"
    base_thr = figure(base, "throughput")
    repeats = any(c.total_repeats > 1 for c in cells)
    words, per_row = interval_header(ok)
    ranks = tie_ranks(ok)
    ok.sort(key=lambda c: (ranks[c.cell][0] or len(ok) + 1, -c.figures.throughput))  # by rank, then point value
    kernel = any(c.figures.kernel_au_pct is not None for c in ok)  # --profile on a GPU
    launch = any(not c.emulated and c.figures.launch_ms_p50 is not None for c in ok)  # a real GPU's host time
    headers = ["#", "/".join(axes), f"samples/s{m}{words}", *(["interval"] if per_row else []),
               f"speed-up vs {against}{m}", f"AU %{m}", *(["kernel AU %"] if kernel else []),
               *(["host launch ms"] if launch else []), "stall % mean", f"device peak GB{m}"] + (
        ["n"] if repeats else [])
    rows = []
    for c in ok:
        f = c.figures
        rank, tied = ranks[c.cell]
        speed = fmt(f.throughput / base_thr if base_thr else None, ".2f")
        if base_thr and c is not base and compare_intervals(c, base) == "tie":
            speed += " (tie)"
        shown_rank = "-" if rank is None else f"={rank}" if tied else str(rank)
        rows.append([shown_rank, stack_label(cells, c, axes), fmt_throughput(c),
                     *([interval_label_of(c)] if per_row else []), speed, fmt(f.au_pct, ".0f"),
                     *([fmt(f.kernel_au_pct, ".0f")] if kernel else []),
                     *([fmt(f.launch_ms_p50, ".2f")] if launch else []),
                     fmt(f.stall_mean_pct, ".0f"), fmt(f.device_peak_gb, ".2f")]
                    + ([repeats_text(c)] if repeats else []))
    for c in cells:
        if not c.measured:
            rows.append(["-", stack_label(cells, c, axes), short_error(c)] + ["-"] * (len(headers) - 4)
                        + ([repeats_text(c)] if repeats else ["-"]))
    notes = [TIE_NOTE + f"; (tie) after a speed-up: the cell's interval overlaps the {against} cell's"]
    if any(interval(c) is None for c in ok):
        notes.append("a cell without an interval (fewer than 4 measured steps) has no rank (-) and is tied with none; "
                     "it is listed by its point value")
    if any(c.failed_repeats for c in cells):
        notes.append("n: measured repeats of those run; figures are over the measured repeats only")
    if kernel:
        notes.append("kernel AU %: the share of the profiled steps' span in which some GPU kernel ran (AU % counts "
                     "the CUDA events' span, launch gaps and host syncs inside it included)")
    if launch:
        notes.append("host launch ms: median per step of the host's own time from the agreement to the last launch")
    return Table(f"All cells by throughput (speed-up over the {against} cell)", headers, rows, notes)


def note_lines(results: list[CellResult]) -> list[str]:
    """What the articles' tables leave out: the strategies every cell ran (axes not shown)."""
    cells = merge_repeats(results)
    fixed = [a for a in common_axes(cells) if len({c.label(a) for c in cells}) == 1 and a not in shown_axes(cells)]
    return ["Every cell: " + ", ".join(f"{a}={cells[0].label(a)}" for a in fixed)] if fixed else []


def article_tables(results: list[CellResult], results_1x: list[CellResult] | None = None,
                   dataset_samples: int | None = None) -> list[Table]:
    """The articles' tables that apply to these results."""
    tables = []
    if results_1x:
        tables.append(scaling_table(results_1x, results))
    names = {r.name("batching") for r in results}
    if "fixed" in names and len(names) > 1:
        tables.append(fixed_vs_dynamic_table(results))
    if sum(cell is not None for _, _, cell in ladder_steps(merge_repeats(results))) >= 2:
        tables.append(ladder_table(results, dataset_samples))
    if results:
        tables.append(ranking_table(results))
    return tables

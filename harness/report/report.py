"""The report of a run, from cells.jsonl alone: terminal text, report.md, summary.csv (pandas) and
plots/.

Table builders are pure: results in (harness.results.cellresult.CellResult), a
harness.report.tables.Table out. One renderer (harness.report.tables.render_tables) writes them as
text or markdown; the header (harness.report.header) is written once, above every table.

Every throughput is shown with its interval as [low, high] and a label that says what the interval
is (method, level, n): within one run, batch means over the window's steps; across repeats, the
median with the order-statistic interval and its real coverage (harness.results.stats).
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from harness import safewrite
from harness.analysis import sequential
from harness.analysis.effects import MIN_EFFECT, Effect, level_order, whole_passes
from harness.analysis.loaddependence import load_dependence
from harness.analysis.ties import leader_and_tied
from harness.measure.rankrecord import SHOWN_PARTS
from harness.report import articles, effecttables, ordercost, plots, rollout, stagetable, verdict, whatif
from harness.report.header import header_lines, outside_load_lines
from harness.report.remotetable import remote_table
from harness.report.tables import (
    Table,
    display_name,
    fmt,
    fmt_throughput,
    interval_header,
    interval_label_of,
    mark,
    order_effects_table,
    order_table,
    render_lines,
    render_tables,
    repeats_text,
    short_error,
    shown_axes,
)
from harness.report.trainingtable import training_table
from harness.results import rundir as run_files
from harness.results.cellresult import CellResult
from harness.results.environment import Environment
from harness.results.probeline import ProbeSeries
from harness.results.repeats import CellSummary, merge_repeats
from harness.results.vsprobe import relative_to_probe
from harness.run import budgetstate

REPORT_TITLE = "Data-loading benchmark report"
ARTICLES_TITLE = "The articles' tables, measured"


def cell_rows(cells: list[CellSummary], axes: list[str], values: Callable[[CellSummary], list | None]) -> list[list]:
    """One row per cell: its strategies' names on `axes`, then `values(cell)`; a cell whose values
    are None has no row."""
    rows = []
    for c in cells:
        shown = values(c)
        if shown is not None:
            rows.append([display_name(cells, c, a) for a in axes] + shown)
    return rows


def unmeasured(c: CellSummary, width: int) -> list[str]:
    """An unmeasured cell's `width` values: its error, then dashes."""
    return [short_error(c)] + ["-"] * (width - 1)


def throughput_table(cells: list[CellSummary]) -> Table:
    """Throughput with its interval, step-time percentiles, cache and read rates, repeats."""
    m = mark(cells[:1])
    axes = shown_axes(cells)
    words, per_row = interval_header(cells)
    probe = ["x ideal loader"] if any(c.figures.vs_probe is not None for c in cells) else []
    repeats = any(c.total_repeats > 1 for c in cells)
    headers = [*axes, f"samples/s{m}{words}", *(["interval"] if per_row else []), *probe, f"step p50 ms{m}",
               f"p95{m}", f"p99{m}", "cache hit %", "read MB/s"] + (["repeats"] if repeats else [])
    width = len(headers) - len(axes)
    rows = cell_rows(cells, axes, lambda c: _throughput_values(c, width, per_row, bool(probe), repeats))
    notes = []
    if any(c.failed_repeats for c in cells):
        notes.append("repeats: measured of run; a cell's figures are over its measured repeats only")
    return Table("Throughput", headers, rows, notes)


def _throughput_values(c: CellSummary, width: int, per_row: bool, probe: bool, repeats: bool) -> list[str]:
    if not c.measured:
        return unmeasured(c, width - 1) + ([repeats_text(c)] if repeats else ["-"])
    f = c.figures
    shown = [fmt_throughput(c), *([interval_label_of(c)] if per_row else []),
             *([fmt(f.vs_probe, ".2f")] if probe else []), fmt(f.step_p50_ms, ".1f"),
             fmt(f.step_p95_ms, ".1f"), fmt(f.step_p99_ms, ".1f"), _hit(c), fmt(f.read_mb_s, ".1f")]
    return shown + ([repeats_text(c)] if repeats else [])


PART_HEADER_SUFFIX = {"wait": " mean/max", "device": " (device busy / wall)"}


def _part_cells(c: CellSummary) -> list[str]:
    """A measured cell's five parts (SHOWN_PARTS order); the stall as mean / max over ranks, an AU
    that keeps schema 1's meaning marked "(old)"."""
    f = c.figures
    out = []
    for part in SHOWN_PARTS:
        value = getattr(f, part.figure)
        text = fmt(value, ".0f")
        if part.name == "wait":
            text += f" / {fmt(f.stall_max_pct, '.0f')}"
        elif part.figure in c.legacy_figures and value is not None:
            text += " (old)"
        out.append(text)
    return out


def utilisation_table(cells: list[CellSummary]) -> Table:
    """Each rank's wall time accounted once into five parts that sum to 100 (mean over ranks)."""
    m = mark(cells[:1])
    axes = shown_axes(cells)
    nvml = any(c.figures.nvml_util_pct is not None for c in cells)
    headers = [*axes, *(p.column + (m if p.modelled else "") + PART_HEADER_SUFFIX.get(p.name, "")
                        for p in SHOWN_PARTS)] + (["NVML util %"] if nvml else []) + ([f"overrun %{m}"] if m else [])
    width = len(headers) - len(axes)
    rows = cell_rows(cells, axes, lambda c: _part_values(c, width, nvml, bool(m)))
    old = any(c.legacy_figures for c in cells if c.measured)
    notes = ["Per rank, stall + h2d + AU + peer wait + overhead = 100% of its window (mean over ranks): stall = "
             "waiting for the next batch, h2d = copy to the device, AU = the device busy, peer wait = waiting "
             "for the other ranks, overhead = the rest of the host's work in the step"]
    if m:
        notes.append("overrun % (emulated only): steps whose host work outlasted the modelled device step; that "
                     "time is in overhead, not AU")
    if old:
        notes.append("(old): a line written before the five-part split: its AU is compute (with the rank "
                     "agreement) / wall, not device-busy / wall")
    return Table("Where each rank's time goes (% of wall time, the five parts sum to 100)", headers, rows, notes)


def _part_values(c: CellSummary, width: int, nvml: bool, overrun: bool) -> list[str]:
    if not c.measured:
        return unmeasured(c, width)
    f = c.figures
    return (_part_cells(c) + ([fmt(f.nvml_util_pct, ".0f")] if nvml else [])
            + ([fmt(f.overrun_pct, ".0f")] if overrun else []))


def balance_table(cells: list[CellSummary], what_if_cores: float | None = None) -> Table:
    """Stragglers (per step and over the window), the sampler's cost balance, and what feeding
    costs."""
    m = mark(cells[:1])
    axes = shown_axes(cells)
    headers = [*axes, "step imbalance", "window imbalance", "cost imbalance", "loader CPU ms/sample",
               "rank CPU ms/sample", f"device samples/s/rank{m}", f"cores to feed/rank{m}"]
    if what_if_cores is not None:
        headers.append(whatif.column_header(what_if_cores, m or "*"))
    width = len(headers) - len(axes)
    rows = cell_rows(cells, axes, lambda c: _balance_values(c, width, what_if_cores))
    notes = ["step imbalance = mean over steps of the slowest rank's busy time / the mean rank's; window "
             "imbalance = the same over whole-window totals (stragglers that take turns cancel out in it); cost "
             "imbalance = mean over steps of max / mean across ranks of the sampler's summed cost; cores to "
             "feed = (loader + rank CPU s/sample) x device samples/s: the cores per rank the loader and the "
             "rank's own host work need to keep the device fed"]
    if what_if_cores is not None:
        notes.append(f"predicted (modelled, an upper bound): world size x min(device samples/s/rank, "
                     f"{what_if_cores:g} / (loader + rank CPU s per sample), workers / loader CPU s per sample); it "
                     f"ignores peer waits and host overhead")
    return Table("Balance across ranks and the cost of feeding the device", headers, rows, notes)


def _balance_values(c: CellSummary, width: int, what_if_cores: float | None) -> list[str]:
    if not c.measured:
        return unmeasured(c, width)
    f = c.figures
    loader, rank = f.loader_cpu_s_per_sample, f.rank_cpu_s_per_sample
    shown = [fmt(f.step_imbalance, ".2f"), fmt(f.window_imbalance, ".2f"), fmt(f.cost_imbalance, ".2f"),
             fmt(loader * 1e3 if loader is not None else None, ".2f"),
             fmt(rank * 1e3 if rank is not None else None, ".2f"), fmt(f.device_samples_per_s, ".0f"),
             fmt(f.cores_to_feed, ".2f")]
    if what_if_cores is not None:
        shown.append(fmt(whatif.predict(c, what_if_cores), ".0f"))
    return shown


def memory_io_table(cells: list[CellSummary]) -> Table:
    """Memory peaks, the cache's resident size, the device's peak, disk and requested reads, the
    access hint."""
    emulated = bool(cells and cells[0].emulated)
    axes = shown_axes(cells)
    device_col = f"device peak GB{mark(cells[:1])} (modelled)" if emulated else "device peak GB"
    headers = [*axes, "host PSS/rank MB", "host PSS all ranks MB", "host RSS/rank MB", "cache resident MB",
               device_col, "disk read MB", "read amp x", "requested MB", "advice"]
    return Table("Memory and I/O (peaks over the window)", headers, cell_rows(cells, axes, _memory_io_values))


def _memory_io_values(c: CellSummary) -> list[str]:
    f, cache = c.figures, c.cache
    return [fmt(f.host_pss_peak_mb, ".0f"), fmt(f.host_pss_total_mb, ".0f"), fmt(f.host_rss_peak_mb, ".0f"),
            f"{cache.resident_mb:.0f} in {cache.caches}" if cache is not None else "-",
            fmt(f.device_peak_gb, ".2f"), fmt(f.disk_read_mb, ".1f"), fmt(f.read_amplification, ".1f"),
            fmt(f.logical_read_mb, ".1f"), c.advice or "-"]


def batching_table(cells: list[CellSummary]) -> Table:
    """Batch sizes, padding, OOM events and shadow steps, and whether the sampler's contract
    held."""
    axes = shown_axes(cells)
    headers = [*axes, "mean batch", "max batch", "padding waste %", "OOM events", "shadow steps",
               "coverage %", "duplicates", "missing", "sampler contract"]
    return Table("Batching and correctness", headers, cell_rows(cells, axes, _batching_values))


def _batching_values(c: CellSummary) -> list[str]:
    f, cov = c.figures, c.coverage
    checked = [fmt(cov.coverage_pct, ".1f"), fmt(cov.duplicates, ".0f"), fmt(cov.missing, ".0f"),
               "ok" if cov.ok else "BROKEN"] if cov is not None else ["-"] * 4
    return [fmt(f.mean_batch, ".1f"), fmt(f.max_batch, ".0f"), fmt(f.padding_waste_pct, ".0f"),
            "OOM (cell stopped)" if (c.error or "").startswith("OOM") else fmt(f.oom_events, ".0f"),
            fmt(f.shadow_steps, ".0f"), *checked]


def decomposition_table(cells: list[CellSummary]) -> Table:
    """The --decompose phases: compute alone, the prep and fetch stalls, the three phases'
    samples/s."""
    m = mark(cells[:1])
    axes = shown_axes(cells)
    headers = [*axes, f"compute s/step{m}", "prep stall s/step (%)", "fetch stall s/step (%)",
               f"compute-bound samples/s{m}", f"warm samples/s{m}", f"cold samples/s{m}"]
    return Table("Stall decomposition (compute alone / page cache warm / page cache dropped)", headers,
                 cell_rows(cells, axes, _decomposition_values))


def _decomposition_values(c: CellSummary) -> list[str] | None:
    d = c.decomposition
    if d is None:
        return None
    if d.error is not None:
        return [d.error] + ["-"] * 5
    return [f"{d.compute_s:.4f}", f"{d.prep_stall_s:.4f} ({d.prep_stall_pct:.0f}%)",
            f"{d.fetch_stall_s:.4f} ({d.fetch_stall_pct:.0f}%)", f"{d.compute_bound_samples_s:.0f}",
            f"{d.warm_samples_s:.0f}", f"{d.cold_samples_s:.0f}"]


def _hit(c: CellSummary) -> str:
    return f"{c.cache.hit_pct:.0f} ({c.cache.scope})" if c.cache is not None else "-"


def report_tables(cells: list[CellSummary], what_if_cores: float | None = None) -> list[Table]:
    """The per-cell tables of a run (tables without rows are left out when rendered)."""
    if not cells:
        return []
    return [throughput_table(cells), order_table(cells), training_table(cells), utilisation_table(cells),
            balance_table(cells, what_if_cores), memory_io_table(cells), batching_table(cells),
            decomposition_table(cells), remote_table(cells)]


def in_matrix_order(results: list[CellResult], env: Environment | None) -> list[CellResult]:
    """Results sorted by their cell's place in the matrix (env.json's settings list the cells),
    then repeat: the tables list cells in the matrix's order whatever order they were visited
    in."""
    rank = {cid: i for i, cid in enumerate((env.cell_ids if env else None) or [])}
    return sorted(results, key=lambda r: (rank.get(r.cell, len(rank)), r.repeat))


def min_effect_of(env: Environment | None) -> float:
    """The smallest effect that counts (--min-effect, recorded in env.json), else MIN_EFFECT."""
    return (env.min_effect if env else None) or MIN_EFFECT


def rule_of(env: Environment | None, run_dir: Path | None = None) -> sequential.Rule:
    """The run's decision rule as env.json records it: --min-effect, --family-alpha, the run's CPUs
    and its budget (the looks' plan); with `run_dir`, whether its budget ended (budget.json: a
    look its plan had left is taken at its end)."""
    if env is None:
        return sequential.Rule(min_effect_of(env))
    state = budgetstate.read(run_dir) if run_dir is not None else None
    return sequential.Rule(min_effect_of(env), env.family_alpha, env.run_cpus, env.budget_s or None,
                           bool(state and state.ended))


def decision_words(decided: sequential.Decisions | None) -> dict[tuple[str, str], str] | None:
    """(axis, level) -> the stopping rule's decision and the pass that made it, for the effects
    table."""
    if decided is None:
        return None
    words = {}
    for d in decided.levels:
        word = effecttables.verdict_word(d.effect, decided.rule.min_effect) if d.decided else d.word
        words[(d.effect.axis, d.effect.level)] = (f"{word} on {verdict.RESPONSE_WORDS[decided.response]}"
                                                  + (f" (pass {d.passes})" if d.decided else ""))
    return words


def plotted_decisions(decided: sequential.Decisions | None):
    """What plots/effects.png shows: the response's name and each level's effect at its deciding
    (or last) look with the stopping rule's words (decision_words), as the first screen's EFFECTS
    decides them."""
    if decided is None:
        return None
    words = decision_words(decided)
    return (verdict.RESPONSE_WORDS[decided.response],
            [(d.effect, words[(d.effect.axis, d.effect.level)]) for d in decided.levels])


def render(results: list[CellResult], env: Environment | None = None, probe: ProbeSeries | None = None,
           results_1x: list[CellResult] | None = None, fmt: str = "text",
           what_if_cores: float | None = None, fitted: list[Effect] | None = None, target=None,
           decided: sequential.Decisions | None = None) -> str:
    """The whole report: the answer first (verdict, effects), the header once, the run's tables,
    then the articles' tables. "text" or "markdown". `decided`: the stopping rule's decisions
    (default: replayed with env.json's rule, rule_of)."""
    cells, cells_1x = merge_repeats(in_matrix_order(results, env)), merge_repeats(results_1x or [])
    markdown = fmt == "markdown"
    parts = ([f"# {REPORT_TITLE}", ""] if markdown else [])
    m = min_effect_of(env)
    if decided is None and cells:
        decided = sequential.decide(results, env.cell_ids if env else None, rule_of(env))
    if cells and fitted is not None:
        leader, tied = leader_and_tied(cells)
        tolerance = ordercost.tolerance_of(env)
        roll = rollout.rollout_lines(cells, results, [leader, *tied] if leader else [], target, m, tolerance)
        load = load_dependence(results, level_order(results, env.cell_ids if env else None))
        parts += render_lines(verdict.verdict_lines(cells, fitted, env.run_cpus if env else None,
                                                    whole_passes(results), m, roll, load, tolerance, decided),
                              fmt) + [""]
    parts += render_lines(header_lines(cells, env, probe, cells_1x) + outside_load_lines(results)
                          + ([target.describe()] if target is not None else []), fmt)
    if fitted:
        table = effecttables.effects_table(fitted, any(c.emulated for c in cells), m,
                                           level_order(results, env.cell_ids if env else None), whole_passes(results),
                                           decision_words(decided))
        parts += render_tables([table, order_effects_table(fitted, m, whole_passes(results))], fmt, level=2)
    parts += render_tables(report_tables(cells, what_if_cores), fmt, level=2)
    parts += render_tables(stagetable.tables(results, target), fmt, level=2)
    if cells:
        samples = ((env.dataset if env else None) or {}).get("samples")
        parts += ["", f"## {ARTICLES_TITLE}", ""] if markdown else ["", ARTICLES_TITLE]
        parts += render_lines(articles.note_lines(cells + cells_1x), fmt)
        parts += render_tables(articles.article_tables(cells, cells_1x, samples), fmt, level=3)
    return "\n".join(parts) + "\n"


def summary_frame(results: list[CellResult]) -> pd.DataFrame:
    """summary.csv: one row per cell and repeat."""
    rows = []
    for c in results:
        row = {"cell": c.cell, "repeat": c.repeat, **c.strategies, "device": c.device, "emulated": c.emulated,
               "error": c.error, "advice": c.advice}
        row.update(sorted(c.figures.to_json().items()))  # columns in the order of the file's sorted keys
        cov, cache = c.coverage, c.cache
        row.update(coverage_ok=cov.ok if cov else None, coverage_pct=cov.coverage_pct if cov else None,
                   duplicates=cov.duplicates if cov else None, missing=cov.missing if cov else None,
                   cache_hit_pct=cache.hit_pct if cache else None,
                   cache_resident_mb=cache.resident_mb if cache else None)
        rows.append(row)
    return pd.DataFrame(rows)


def write_all(run_dir: Path, results: list[CellResult], env: Environment | None = None,
              results_1x: list[CellResult] | None = None, what_if_cores: float | None = None,
              target=None) -> str:
    """Write summary.csv, report.md and plots/ into run_dir; return the terminal text. `target`: a
    harness.config.target.Target to predict each cell on (its table follows the stage table)."""
    probe = run_files.read_probe(run_dir)
    results = in_matrix_order(relative_to_probe(results, probe), env)
    fitted = effecttables.run_effects(results, env.cell_ids if env else None)
    effecttables.write_effects(run_dir, fitted)
    safewrite.write_text(run_dir / "summary.csv", summary_frame(results).to_csv(index=False), run_dir)
    decided = sequential.decide(results, env.cell_ids if env else None, rule_of(env, run_dir)) if results else None
    safewrite.write_text(run_dir / "report.md", render(results, env, probe, results_1x, "markdown", what_if_cores,
                                                       fitted, target, decided), run_dir)
    safewrite.make_dir(run_dir / "plots", run_dir)
    plots.write_plots(results, run_dir / "plots")
    effecttables.effects_plot(fitted, run_dir / "plots" / "effects.png", min_effect=min_effect_of(env),
                              passes=whole_passes(results), decided=plotted_decisions(decided))
    stagetable.stage_plot(results, run_dir / "plots" / "stages.png")
    return render(results, env, probe, results_1x, "text", what_if_cores, fitted, target, decided)

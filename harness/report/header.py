"""The report's header: what the tables need said once, above them all (the scenario, the imported
data, the emulation banner and the overrun verdict, the page cache, the data's device, repeats, the
machine probe, the strategies' parameters, the host), and the warning on other processes' load
during the visits.
"""
from __future__ import annotations

import numpy as np

from harness.measure.hostload import OUTSIDE_LOAD_PCT
from harness.report.tables import EMULATED_MARK, display_name, emulated, interval
from harness.results.cellresult import CellResult
from harness.results.environment import Environment
from harness.results.probeline import ProbeSeries
from harness.results.repeats import CellSummary
from strategies.registry import AXES

OVERRUN_VERDICT_PCT = 5  # an emulated run whose host work outlasted the modelled step in more steps: a verdict
AMPLIFICATION_WARN = 4.0  # a cold cell that read more than this many device bytes per delivered byte: warned


def header_lines(cells: list[CellSummary], env: Environment | None = None, probe: ProbeSeries | None = None,
                 others: list[CellSummary] | None = None) -> list[str]:
    """What the tables need said once: scenario, emulation banner and overrun verdict, page cache,
    repeats (and failed repeats), machine probe, parameters, host. `others`: results of another run
    shown too (the one-rank run of the scaling table)."""
    if not cells:
        return ["no cells were measured"]
    c0, every = cells[0], cells + (others or [])
    lines = [f"Scenario {c0.scenario}: {c0.world_size} ranks x {c0.device}, workload {c0.workload}, "
             f"batch {c0.batch_size} per rank, {c0.figures.window_steps or 0} measured steps per rank"]
    lines += import_lines(env)
    lines += emulation_lines(every)
    lines += overrun_lines(cells, env)
    lines += page_cache_lines(cells, env)
    lines += io_lines(cells, env)
    lines += repeat_lines(cells)
    if probe and probe.ideal_samples_per_s:
        lines.append(probe_line(probe))
    notes = strategy_notes(every)
    if notes:
        lines.append("Parameters: " + "; ".join(notes))
    return lines + host_lines(env)


def import_lines(env: Environment | None) -> list[str]:
    """The imported dataset (--data): how many samples from where, the corrupt images skipped, the
    failed downloads and non-JPEG images counted."""
    imp = env.imported if env else None
    if not imp:
        return []
    line = (f"Data: {imp['samples']} samples imported from {imp['source']} ({imp['layout']}), "
            f"{imp['corrupt']} corrupt images skipped")
    if imp.get("failed_downloads"):
        line += f", {imp['failed_downloads']} failed downloads (img2dataset) not counted"
    if imp.get("non_jpeg"):
        line += f", {imp['non_jpeg']} non-JPEG images (simplejpeg hands them to PIL)"
    if imp.get("empty_captions"):
        line += f", {imp['empty_captions']} empty captions"
    return [line + ("; embeddings from the source" if imp.get("embeddings") == "source"
                    else "; embeddings: a fixed random projection of the pixels and captions")]


def emulation_lines(results: list[CellResult]) -> list[str]:
    """The emulation banner (print it once; the overrun verdict is `overrun_lines`)."""
    if not emulated(results):
        return []
    return [f"ACCELERATOR EMULATED: no such GPU here; each rank runs a real DDP step of a cheap stand-in "
            f"model, then sleeps until the modelled step time has passed (leaving the CPU to the loader, as a "
            f"GPU host does); device time and memory are modelled. Columns marked {EMULATED_MARK} depend on "
            f"that model. The DDP allreduce, data loading and host memory are real."]


def overrun_lines(results: list[CellResult], env: Environment | None = None) -> list[str]:
    """On an emulated run where some cell's host work outlasted the modelled step in more than
    OVERRUN_VERDICT_PCT % of steps: one verdict line with the figures."""
    measured = [r for r in results if r.emulated and r.measured and r.figures.overrun_pct is not None]
    over = [r.figures.overrun_pct for r in measured]
    if not over or max(over) <= OVERRUN_VERDICT_PCT:
        return []
    cells_over = sum(o > OVERRUN_VERDICT_PCT for o in over)
    line = (f"VERDICT: host work outlasted the modelled {accelerator_name(measured[0])} step in up to "
            f"{max(over):.0f}% of steps (median {float(np.median(over)):.0f}% over {len(over)} cells; "
            f"{cells_over} cell(s) above {OVERRUN_VERDICT_PCT}%); that time is counted as host overhead, not "
            f"device time")
    cores = [r.figures.cores_to_feed for r in measured if r.figures.cores_to_feed is not None]
    host_cores = env.run_cpus if env else None  # the run's allowance (affinity, cgroup quota)
    ranks = measured[0].world_size or measured[0].figures.ranks
    if cores:
        line += (f"; feeding the device needs {float(np.median(cores)):.1f} cores per rank{EMULATED_MARK} "
                 f"(median over cells)")
        if host_cores and ranks:
            line += f" and this run has {host_cores:g} cores for {ranks} ranks"
    elif host_cores and ranks:
        line += f"; this run has {host_cores:g} cores for {ranks} ranks"
    return [line]


def accelerator_name(result: CellResult) -> str:
    """The device a result ran on, without the " (emulated)" suffix."""
    name = result.device or "the accelerator"
    return name[:-len(" (emulated)")] if name.endswith(" (emulated)") else name


def page_cache_lines(cells: list[CellResult], env: Environment | None) -> list[str]:
    """The page cache's state before each cell, a cold drop not verified, a dataset that fits in
    RAM."""
    states = sorted({c.page_cache.state if c.page_cache else "as-is" for c in cells})
    decomposed = any(c.decomposition is not None for c in cells)
    lines = [f"Page cache before each cell: {', '.join(states)}"
             + (" (decomposition cells ran compute-only, warm and cold phases)" if decomposed else "")]
    unverified = [c.cell for c in cells if c.page_cache is not None and c.page_cache.verified is False]
    if unverified:
        lines.append(f"WARNING: the cold drop could not be verified for {len(unverified)} cell(s)")
    data_gb, ram_gb = (env.dataset_gb, env.memory_gb) if env else (None, None)
    if data_gb and ram_gb and data_gb < ram_gb and "cold" not in states:
        lines.append(f"NOTE: the dataset ({data_gb * 1000:.0f} MB) fits in this host's RAM ({ram_gb:.0f} GB): "
                     f"without --cache-state cold the figures may reflect the page cache, not the storage device")
    return lines


def io_lines(results: list[CellResult], env: Environment | None = None) -> list[str]:
    """The block device behind the data and its read-ahead (env.json), and a warning when a cold
    cell read more than AMPLIFICATION_WARN times from the device what its readers delivered
    (figures.read_amplification)."""
    lines = []
    if env is not None and env.data_device:
        ahead = f"read_ahead_kb {env.read_ahead_kb}" if env.read_ahead_kb is not None else "read-ahead unknown"
        lines.append(f"Data: {env.data_dir} on block device {env.data_device}, {ahead} (what a read or a page "
                     f"fault may read ahead without an access hint)")
    high = [r for r in results if r.page_cache is not None and r.page_cache.state == "cold"
            and (r.figures.read_amplification or 0) > AMPLIFICATION_WARN]
    if high:
        worst = max(high, key=lambda r: r.figures.read_amplification)
        lines.append(f"WARNING: {len(high)} cold cell(s) read more than {AMPLIFICATION_WARN:g}x from the device what "
                     f"their readers delivered (up to {worst.figures.read_amplification:.0f}x: {worst.cell}, advice "
                     f"{worst.advice or '-'}): read-ahead around scattered reads; the storage's advice parameter "
                     f"sets the access hint (docs/cold-scale.md)")
    return lines


def repeat_lines(cells: list[CellSummary]) -> list[str]:
    """What the figures and the throughput intervals are taken over (repeats or one run), and the
    cells some of whose repeats failed."""
    repeats = max(c.total_repeats for c in cells)
    if repeats > 1:
        lines = [f"{repeats} repeats per cell, interleaved across cells; figures are medians over repeats, "
                 f"throughput intervals are across repeats (order statistics, with their real coverage)"]
    elif any(interval(c) for c in cells):
        lines = ["1 run per cell: throughput intervals are within the run (batch means over the measured "
                 "steps); they do not cover run-to-run drift (use --repeats)"]
    else:
        lines = []
    return lines + failed_repeat_lines(cells)


def failed_repeat_lines(cells: list[CellSummary]) -> list[str]:
    """One warning naming the cells some of whose repeats failed (figures are over the measured
    ones)."""
    partial = [c for c in cells if c.failed_repeats and c.repeats]
    if not partial:
        return []
    shown = "; ".join(f"{c.cell} ({c.failed_repeats} of {c.total_repeats}: {c.repeat_errors[0][:60]})"
                      for c in partial)
    return [f"WARNING: repeats failed in {len(partial)} cell(s), whose figures are over the other repeats: "
            f"{shown}"]


def probe_line(probe: ProbeSeries) -> str:
    ideal, memcpy = probe.ideal_samples_per_s, probe.memcpy_gb_s or [0]
    return (f"Machine probe (per repeat, median): in-memory ideal loader {np.median(ideal):.0f} samples/s in one "
            f"process, memory copy {np.median(memcpy):.1f} GB/s; 'x ideal loader' = samples/s / that figure")


def strategy_notes(results: list[CellResult]) -> list[str]:
    """One note per strategy shown by its name but run with parameters: "axis=name: label"."""
    notes = {}
    for a in AXES:
        for r in results:
            label = r.label(a)
            if label != r.name(a) and display_name(results, r, a) != label:
                notes[f"{a}={r.name(a)}"] = label
    return [f"{k}: {v}" for k, v in notes.items()]


def host_lines(env: Environment | None) -> list[str]:
    """The host the run was on (env.json): its CPUs and the run's allowance of them, memory,
    torch."""
    if not (env and env.time_utc):
        return []
    allowed = f", the run's allowance {env.run_cpus:g}" if env.run_cpus and env.run_cpus != env.cpu_count else ""
    threads = (", free-threaded Python (no GIL: the threads loader's threads run in parallel)"
               if env.free_threaded else "")
    return [f"Host: {env.cpu_count} CPUs ({env.cpu_model}){allowed}, {env.memory_gb or 0:.0f} GB RAM, "
            f"torch {env.torch_version}{threads}"]


def outside_load_lines(results: list[CellResult]) -> list[str]:
    """One warning naming the visits during which other processes used much of the host's CPU."""
    busy = [r for r in results if (r.figures.other_cpu_pct or 0) > OUTSIDE_LOAD_PCT]
    if not busy:
        return []
    worst = max(busy, key=lambda r: r.figures.other_cpu_pct)
    return [f"WARNING: other processes used more than {OUTSIDE_LOAD_PCT:.0f}% of this host's CPU during "
            f"{len(busy)} of {len(results)} visit(s) (up to {worst.figures.other_cpu_pct:.0f}%, {worst.cell} "
            f"repeat {worst.repeat}); their figures may show that load, not the strategy: rerun on a quiet "
            f"machine, or with --repeats or --budget: a disturbed visit is left out of the effects fit when "
            f"its cell has a calm one"]

"""Baselines and the CI regression gate: compare this run's cells with a saved baseline.

Baseline file, format "dlbench-baseline/1" (JSON; keys are stable, new optional keys may be added
without bumping the version, any change of meaning bumps it):

    {"format": "dlbench-baseline/1", "created": "<UTC ISO time>", "scenario": "ci",
     "comparable": {"dataset_key": "<hash>", "world_size": 2, "workload": "pixels", "batch_size": 8,
                    "accelerator": "V100-16GB", "emulated": true,
                    "device": "V100-16GB (emulated)", "image_size": 64, "steps": 12, "epochs": 0,
                    "warmup_steps": 2, "workers": 1, "prefetch_factor": 2, "cache_state": "as-is"},
     "machine": {"cpu_model": ..., "cpu_count": ..., "hostname": ..., "memory_gb": ...},
     "versions": {...}, "git": {...},
     "probe": {"ideal_samples_per_s": [per repeat], "memcpy_gb_s": [per repeat]},
     "cells": {"<cell id>": {"throughput": [per repeat], "normalised": [per repeat],
                             "step_p50_ms": [per repeat], "error": null,
                             "params": {"<axis>": {<the strategy's parameters>}}}}}

- `comparable` must be equal between a baseline and a run, key by key, or they are not compared (exit 3).
  `device` is the real device: on CUDA the GPU's name, on an emulated run "<accelerator> (emulated)".
  Baselines written before `device`, `image_size`, `steps`, `epochs`, `warmup_steps`, `workers`,
  `prefetch_factor` and `cache_state` were added lack them: they are compared on the keys both sides have,
  with one warning naming the keys that could not be checked.
- `params` (optional, added later in version 1): a cell whose strategies' parameters differ between the
  baseline and the run is not compared (verdict "not comparable"); without `params` on either side, cells
  are matched by id alone (one warning).
- `normalised[i] = throughput[i] / probe.ideal_samples_per_s[i]`: the same repeat's machine probe, so a
  baseline made on another machine still means something. Compare raw throughput only on the same machine.
- A cell that errored in any repeat keeps the error(s) and no samples (all lists empty).

Verdicts per cell (union of the baseline's and the run's cell ids):

- "faster" / "slower": the medians differ by at least `min_effect` (relative) AND a two-sided Mann-Whitney
  test gives p < alpha.
- "inconclusive": the data cannot support the test: fewer than 2 repeats on a side, or so few that even
  the most extreme ordering cannot reach alpha (2 / C(n1 + n2, n1) >= alpha: 1 vs 1 up to 3 vs 3 repeats at
  alpha 0.05; 4 vs 4 is the least that can). The change is shown; no verdict is drawn from it.
- "unchanged": tested, and not both significant and at least `min_effect`.
- "not comparable": the cell's strategy parameters differ from the baseline's.
- "new": not in the baseline (or it errored there). "missing": in the baseline, not in this run.
  "error": errored in this run.

Exit code of a comparison: 1 when a cell is "slower", or errored now where the baseline had a result; with
`strict`, also when a cell is "inconclusive"; else 0 (an inconclusive cell then adds one warning line). A
"missing" or "not comparable" cell is reported but is NOT a regression: filtering cells with --only is
legitimate.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from tabulate import tabulate

from harness.results import stats
from harness.results.cellresult import CellResult
from strategies.registry import ADDED_AXES

FORMAT = "dlbench-baseline/1"
VERDICTS = ("slower", "error", "faster", "unchanged", "inconclusive", "not comparable", "new", "missing")
REQUIRED = ("scenario", "comparable", "cells")
MACHINE_KEYS = ("cpu_model", "cpu_count", "hostname", "memory_gb")
REMEDY = "regenerate it with --save-baseline"


class BaselineError(Exception):
    """A baseline that cannot be used (missing, unreadable, wrong format, not comparable); the CLI exits 3."""


def build_baseline(results: list[CellResult], env: dict, probe: dict, comparable: dict, scenario: str,
                   created: str | None = None) -> dict:
    """A baseline-shaped dict from a run's results (one per cell and repeat). A ValueError (one line) when a
    cell has two results for one repeat or the probe lacks a repeat."""
    ideal = list(probe.get("ideal_samples_per_s", []))
    grouped: dict[str, dict[int, CellResult]] = {}
    for c in results:
        if c.repeat in grouped.setdefault(c.cell, {}):
            raise ValueError(f"cell {c.cell} has two results for repeat {c.repeat}")
        grouped[c.cell][c.repeat] = c
    out_cells = {}
    for cid, reps in grouped.items():
        ordered = [reps[r] for r in sorted(reps)]
        errors = sorted({c.error for c in ordered if c.error})
        entry = {"throughput": [], "normalised": [], "step_p50_ms": [], "error": "; ".join(errors) or None,
                 "params": {a: dict(p) for a, p in sorted(ordered[0].params.items())}}
        if not errors:
            for rep, c in zip(sorted(reps), ordered):
                if rep >= len(ideal) or not ideal[rep] > 0:
                    raise ValueError(f"the probe has no ideal_samples_per_s for repeat {rep} (cell {cid})")
                if c.figures.throughput is None or c.figures.step_p50_ms is None:
                    raise ValueError(f"cell {cid} repeat {rep} has no error and no throughput")
                tp = float(c.figures.throughput)
                entry["throughput"].append(tp)
                entry["normalised"].append(tp / float(ideal[rep]))
                entry["step_p50_ms"].append(float(c.figures.step_p50_ms))
        out_cells[cid] = entry
    return {"format": FORMAT,
            "created": created or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "scenario": scenario, "comparable": dict(comparable),
            "machine": {k: env.get(k) for k in MACHINE_KEYS},
            "versions": dict(env.get("versions", {})), "git": dict(env.get("git", {})),
            "probe": {"ideal_samples_per_s": [float(x) for x in ideal],
                      "memcpy_gb_s": [float(x) for x in probe.get("memcpy_gb_s", [])]},
            "cells": out_cells}


def _check(obj, where: str) -> dict:
    if not isinstance(obj, dict) or "format" not in obj:
        raise BaselineError(f"{where} is not a dlbench baseline (no \"format\" key); {REMEDY}")
    if obj["format"] != FORMAT:
        raise BaselineError(f"{where} has format {obj['format']!r}, this harness reads {FORMAT!r}; {REMEDY}")
    missing = [k for k in REQUIRED if not isinstance(obj.get(k), (dict, str))]
    if missing:
        raise BaselineError(f"{where} lacks {', '.join(missing)}; {REMEDY}")
    return obj


def save_baseline(obj: dict, path: str | os.PathLike) -> None:
    """Write atomically (temporary file, then rename), creating parent directories."""
    path = Path(path)
    _check(obj, "the baseline to save")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def load_baseline(path: str | os.PathLike) -> dict:
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise BaselineError(f"baseline {path} does not exist; create it with --save-baseline {path}") from None
    except OSError as err:
        raise BaselineError(f"baseline {path} cannot be read ({err.strerror}); check the path") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        raise BaselineError(f"baseline {path} is not valid JSON (line {err.lineno}: {err.msg}); "
                            f"{REMEDY}") from None
    return _check(obj, f"baseline {path}")


@dataclass
class Row:
    cell: str
    baseline: float | None  # median of the baseline's samples
    current: float | None  # median of this run's samples
    ratio: float | None  # current / baseline
    p: float | None  # two-sided Mann-Whitney p; None when no test was made
    verdict: str
    note: str = ""
    regression: bool = False  # counts towards exit code 1


@dataclass
class Comparison:
    rows: list[Row]
    metric: str  # "normalised" or "throughput"
    min_effect: float
    alpha: float
    warnings: list[str] = field(default_factory=list)
    strict: bool = False  # an inconclusive cell counts as a failure (exit 1)

    @property
    def exit_code(self) -> int:
        if any(r.regression for r in self.rows):
            return 1
        return 1 if self.strict and any(r.verdict == "inconclusive" for r in self.rows) else 0

    def counts(self) -> dict[str, int]:
        return {v: sum(r.verdict == v for r in self.rows) for v in VERDICTS}

    def summary_line(self) -> str:
        counts = self.counts()
        parts = [f"{n} {v}" for v, n in counts.items() if n or v in ("slower", "faster", "unchanged")]
        metric = "normalised throughput" if self.metric == "normalised" else "raw throughput"
        return (f"{', '.join(parts)} (metric: {metric}, min effect {self.min_effect:.0%}, "
                f"alpha {self.alpha:g}{', strict' if self.strict else ''})")


def _show(v) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def check_comparable(current: dict, baseline: dict) -> list[str]:
    """Raise BaselineError (one line) when the run and the baseline differ in scenario or in a `comparable`
    key both record; return warnings for keys only one side records (an older baseline): those are not
    checked."""
    if current["scenario"] != baseline["scenario"]:
        raise BaselineError(f"baseline is for scenario {baseline['scenario']}, this run is "
                            f"{current['scenario']}; pass the baseline of this scenario or {REMEDY}")
    cur, base = current["comparable"], baseline["comparable"]
    shared = sorted(set(cur) & set(base))
    diffs = [f"baseline is for {k}={_show(base.get(k))}, this run has {_show(cur.get(k))}"
             for k in shared if cur.get(k) != base.get(k)]
    if diffs:
        raise BaselineError("; ".join(diffs) + f"; run with the baseline's settings or {REMEDY}")
    warnings = []
    only_run, only_base = sorted(set(cur) - set(base)), sorted(set(base) - set(cur))
    if only_run:
        warnings.append(f"the baseline does not record {', '.join(only_run)} (an older baseline): compared "
                        f"on the {len(shared)} settings both record; {REMEDY} to check them")
    if only_base:
        warnings.append(f"this run does not record {', '.join(only_base)}, which the baseline does: compared "
                        f"on the {len(shared)} settings both record")
    return warnings


def needed_repeats(n_other: int, alpha: float, limit: int = 1000) -> int | None:
    """The fewest repeats on one side that let the rank test reach alpha against n_other on the other side
    (None beyond `limit`)."""
    for n in range(2, limit + 1):
        if n_other >= 2 and stats.min_attainable_p(n, n_other) < alpha:
            return n
    return None


def _params_differ(cur: dict, base: dict) -> str | None:
    """A note naming the axes whose parameters differ, or None (also when a side does not record them)."""
    a, b = cur.get("params"), base.get("params")
    if a is None or b is None or a == b:
        return None
    # an axis added later (precision, preprocess, loader) is absent from an older side; ids match only when
    # it held its default strategy there, which takes no parameters
    a, b = ({k: {} for k in ADDED_AXES if k not in side} | side for side in (a, b))
    axes = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    if not axes:
        return None
    return "parameters differ: " + "; ".join(f"{k} baseline {b.get(k)}, this run {a.get(k)}" for k in axes)


def _compare_cell(cid: str, cur: dict | None, base: dict | None, key: str, min_effect: float,
                  alpha: float) -> Row:
    if cur is None:
        return Row(cid, _med(base.get(key)), None, None, None, "missing", "not run")
    if base is not None:
        differ = _params_differ(cur, base)
        if differ:
            return Row(cid, _med(base.get(key)), _med(cur.get(key)), None, None, "not comparable", differ)
    if cur.get("error"):
        had_result = base is not None and not base.get("error") and bool(base.get(key))
        note = cur["error"] if had_result or base is None else "errored in the baseline too"
        return Row(cid, _med(base.get(key)) if base else None, None, None, None, "error", note,
                   regression=had_result)
    a = cur.get(key) or []
    if base is None or base.get("error") or not base.get(key):
        note = f"baseline errored: {base['error']}" if base and base.get("error") else "not in baseline"
        return Row(cid, None, _med(a), None, None, "new", note)
    b = base[key]
    if not a:
        return Row(cid, _med(b), None, None, None, "missing", f"no {key} samples in this run")
    mb, ma = stats.median(b), stats.median(a)
    ratio = ma / mb if mb > 0 else (float("inf") if ma > 0 else 1.0)
    if len(a) < 2 or len(b) < 2 or stats.min_attainable_p(len(a), len(b)) >= alpha:
        return Row(cid, mb, ma, ratio, None, "inconclusive",
                   f"{len(b)} vs {len(a)} repeats: no rank test can reach p<{alpha:g}")
    _, p = stats.mann_whitney_u(a, b)
    significant = p < alpha and abs(ratio - 1) >= min_effect
    note = "" if significant else ("below min effect" if p < alpha else "not significant")
    verdict = ("faster" if ratio > 1 else "slower") if significant else "unchanged"
    return Row(cid, mb, ma, ratio, p, verdict, note, regression=verdict == "slower")


def _med(xs) -> float | None:
    return stats.median(xs) if xs else None


def compare(current: dict, baseline: dict, raw: bool = False, min_effect: float = 0.05,
            alpha: float = 0.05, strict: bool = False) -> Comparison:
    """Compare a run (a dict shaped like a baseline, from build_baseline) with a baseline."""
    _check(current, "this run")
    _check(baseline, "the baseline")
    warnings = check_comparable(current, baseline)
    key = "throughput" if raw else "normalised"
    cur_cells, base_cells = current["cells"], baseline["cells"]
    ids = list(base_cells) + [c for c in cur_cells if c not in base_cells]
    rows = [_compare_cell(c, cur_cells.get(c), base_cells.get(c), key, min_effect, alpha) for c in ids]
    both = [c for c in ids if c in cur_cells and c in base_cells]
    if both and any("params" not in side[c] for c in both for side in (cur_cells, base_cells)):
        warnings.append("the baseline (or this run) does not record the strategies' parameters per cell "
                        f"(an older baseline): cells are matched by id alone; {REMEDY}")
    m_cur, m_base = current.get("machine", {}), baseline.get("machine", {})
    if raw and m_cur and m_base and any(m_cur.get(k) != m_base.get(k) for k in MACHINE_KEYS):
        warnings.append(f"raw throughput compared across machines (baseline: {m_base.get('hostname')}, "
                        f"{m_base.get('cpu_model')} x{m_base.get('cpu_count')}; this run: "
                        f"{m_cur.get('hostname')}, {m_cur.get('cpu_model')} x{m_cur.get('cpu_count')}): "
                        f"differences may be the machine's; drop --raw to compare normalised throughput")
    differ = [r for r in rows if r.verdict == "not comparable"]
    if differ:
        warnings.append(f"{len(differ)} cell(s) not compared: their strategies' parameters differ from the "
                        f"baseline's ({differ[0].cell})")
    inconclusive = [r for r in rows if r.verdict == "inconclusive"]
    if inconclusive:
        warnings.append(inconclusive_warning(inconclusive, current, baseline, key, alpha, strict))
    return Comparison(rows, key, min_effect, alpha, warnings, strict)


def inconclusive_warning(rows: list[Row], current: dict, baseline: dict, key: str, alpha: float,
                         strict: bool) -> str:
    """One line: how many cells could not be tested, with how many repeats, and what would be needed."""
    n_base = min(len(baseline["cells"][r.cell].get(key) or []) for r in rows)
    n_cur = min(len(current["cells"][r.cell].get(key) or []) for r in rows)
    need = needed_repeats(n_base, alpha)
    if need is not None:
        remedy = f"this run needs --repeats {need} or more against the baseline's {n_base}"
    else:
        remedy = f"the baseline's {n_base} repeat(s) are too few for any run; regenerate it with --repeats 10"
    worst = min((r.ratio for r in rows if r.ratio is not None), default=None)
    change = f"; largest drop {(worst - 1) * 100:+.1f}%, not tested" if worst is not None and worst < 1 else ""
    outcome = "fails under --strict" if strict else "passes (use --strict to fail)"
    return (f"{len(rows)} cell(s) inconclusive: {n_base} vs {n_cur} repeats cannot reach p<{alpha:g}; "
            f"{remedy}{change}; the gate {outcome}")


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def render(comparison: Comparison, fmt: str = "text") -> str:
    """A one-line verdict summary, then the table: "text" for a terminal, "markdown" for a PR comment."""
    if fmt not in ("text", "markdown"):
        raise ValueError(f"fmt must be 'text' or 'markdown', got {fmt!r}")
    md = fmt == "markdown"
    unit = "normalised" if comparison.metric == "normalised" else "samples/s"
    table = []
    for r in comparison.rows:
        change = "-" if r.ratio is None else f"{(r.ratio - 1) * 100:+.1f}%"
        verdict = f"**{r.verdict}**" if md and r.regression else r.verdict
        note = r.note if len(r.note) <= 80 else r.note[:77] + "..."
        cells = [r.cell, _num(r.baseline), _num(r.current), change,
                 "-" if r.p is None else f"{r.p:.3g}", verdict, note]
        table.append([c.replace("|", "\\|") for c in cells] if md else cells)
    headers = ["cell", f"baseline ({unit})", f"current ({unit})", "change", "p", "verdict", "note"]
    summary = comparison.summary_line()
    lines = [f"**{summary}**" if md else summary, ""]
    lines.append(tabulate(table, headers=headers, tablefmt="github" if md else "simple",
                          disable_numparse=True))
    for w in comparison.warnings:
        lines += ["", f"> WARNING: {w}" if md else f"WARNING: {w}"]
    return "\n".join(lines)

"""A comparison of a run with a baseline (harness.gates.baseline) as text or markdown: the one-line
verdict summary, then the table (a pull-request comment in markdown); a verdict of several figures
as one such block per figure, then one line per figure."""
from __future__ import annotations

import sys
from pathlib import Path

from harness import safewrite
from harness.gates.baseline import FIGURES, Comparison, Verdict
from harness.report.tables import Table, render_tables


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def render(comparison: Comparison, fmt: str = "text") -> str:
    """A one-line verdict summary, then the table: "text" for a terminal, "markdown" for a PR
    comment."""
    if fmt not in ("text", "markdown"):
        raise ValueError(f"fmt must be 'text' or 'markdown', got {fmt!r}")
    md = fmt == "markdown"
    unit = {"normalised": "normalised", "throughput": "samples/s",
            **{k: "ratio" for k in FIGURES}}.get(comparison.metric, "CPU s/sample")
    rows = []
    for r in comparison.rows:
        change = "-" if r.ratio is None else f"{(r.ratio - 1) * 100:+.1f}%"
        verdict = f"**{r.verdict}**" if md and r.regression else r.verdict
        note = r.note if len(r.note) <= 80 else r.note[:77] + "..."
        cells = [r.cell, _num(r.baseline), _num(r.current), change,
                 "-" if r.p is None else f"{r.p:.3g}", verdict, note]
        rows.append([c.replace("|", "\\|") for c in cells] if md else cells)
    headers = ["cell", f"baseline ({unit})", f"current ({unit})", "change", "p", "verdict", "note"]
    summary = comparison.summary_line()
    table = render_tables([Table(summary, headers, rows)], fmt)[-1] if rows else ""  # the one renderer
    lines = [f"**{summary}**" if md else summary, "", table]
    for w in comparison.warnings:
        lines += ["", f"> WARNING: {w}" if md else f"WARNING: {w}"]
    return "\n".join(lines)


def render_verdict(verdict: Verdict, fmt: str = "text") -> str:
    """Each figure's comparison (render); with several figures, then one line per figure."""
    blocks = [render(c, fmt) for c in verdict.comparisons]
    if len(verdict.comparisons) > 1:
        lines = [f"- {'FAILED' if c.exit_code else 'passed'}: {c.summary_line()}" for c in verdict.comparisons]
        blocks.append("\n".join(["Verdict, one line per figure:" if fmt == "text" else "**Verdict, one line per "
                                  "figure:**", *lines]))
    return "\n\n".join(blocks)


def show(verdict: Verdict, markdown_path: Path | None) -> int:
    """The text tables on stdout, each warning as one line on stderr, the markdown written to
    `markdown_path` (None: not written); the verdict's exit code."""
    print("\n" + render_verdict(verdict, "text"))
    for warning in verdict.warnings:
        print(f"WARNING: {warning}", file=sys.stderr)
    if markdown_path is not None:
        safewrite.write_text(markdown_path, render_verdict(verdict, "markdown") + "\n")
    return verdict.exit_code

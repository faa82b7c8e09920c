"""The static HTML dashboard (`history html OUT_DIR`): index.html and one page per scenario, each
machine of it in its own section, named: every cell's throughput, AU and loader + rank CPU per
sample over commits (each commit's interval drawn, harness.history.series), each axis's effect over
commits (each run's fit and interval), the change points marked (harness.history.changepoints).
Inline SVG and one inline style sheet: no script, no network, no CDN; it opens from the file."""
from __future__ import annotations

import hashlib
import sqlite3
from html import escape
from pathlib import Path

from harness import safewrite
from harness.history import series
from harness.history.changepoints import change_points
from harness.history.svgchart import STYLE, ChartPoint, Marker, chart

CELL_FIGURES = ("throughput", "au", "cpu")


def _page(title: str, body: list[str]) -> str:
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>\n")


def _cell_section(db, runs, cell: str) -> str:
    charts, notes = [], []
    for figure in CELL_FIGURES:
        points = series.per_commit(db, runs, cell, figure)
        found, drifts = change_points(series.cell_runs(db, runs, figure).get(cell, []))
        markers = [Marker(s.commit, f"step x{s.ratio:.2f}") for s in found]
        markers += [Marker(d.first, f"drift x{d.change:.2f}", d.last) for d in drifts]
        name = series.FIGURES[figure][1]
        charts.append(chart(name, [ChartPoint(p.commit, p.value, p.low, p.high, p.label) for p in points], markers))
        notes += [f"{name}: step at {s.commit[:10]} x{s.ratio:.3f} [{s.low:.3f}, {s.high:.3f}]" for s in found]
        notes += [f"{name}: drift over {d.commits} commits from {d.first[:10]} x{d.change:.3f} "
                  f"[{d.low:.3f}, {d.high:.3f}]" for d in drifts]
    listed = "".join(f"<li>{escape(n)}</li>" for n in notes)
    return (f'<section class="cell" data-cell="{escape(cell)}"><h3>{escape(cell)}</h3>'
            f'<div class="row">{"".join(charts)}</div>'
            + (f'<ul class="steps">{listed}</ul>' if notes else "") + "</section>")


def _axis_section(db, runs, axis: str) -> str:
    charts = []
    for level, points in series.effect_points(db, runs, axis, "throughput").items():
        pts = [ChartPoint(c, r, lo, hi) for c, r, lo, hi in points]
        charts.append(chart(f"{level} against the first level (samples/s ratio)", pts, reference=1.0))
    return (f'<section class="axis" data-axis="{escape(axis)}"><h3>axis {escape(axis)}</h3>'
            f'<div class="row">{"".join(charts)}</div></section>')


def scenario_page(db: sqlite3.Connection, scenario: str, groups: dict) -> str:
    body = [f"<h1>{escape(scenario)}: figures over commits</h1>",
            '<p>Each point is a commit (the median of its runs; the bar its interval); a red dashed line is a '
            'change point with the step\'s size, a shaded band a slow drift. Commits in the order they were '
            'first measured.</p>']
    for (_, fp), runs in groups.items():
        commits = list(dict.fromkeys(r["commit_id"] for r in runs))
        body.append(f'<h2>machine {escape(fp)}</h2><p class="machine">{escape(series.machine_name(runs[-1]))}; '
                    f"{len(runs)} run{'s' * (len(runs) != 1)} of {len(commits)} commit{'s' * (len(commits) != 1)}, "
                    f"{escape(runs[0]['time_utc'])} .. "
                    f"{escape(runs[-1]['time_utc'])}</p>")
        for cell in series.cell_runs(db, runs, "throughput"):
            body.append(_cell_section(db, runs, cell))
        for axis in series.axes_of(db, runs):
            body.append(_axis_section(db, runs, axis))
    return _page(f"{scenario}: dlbench history", body)


PLAIN_NAME = 64  # a scenario name this long or shorter, of safe characters only, names its page as it is


def _file_name(scenario: str) -> str:
    """The scenario's page: its name where that is safe, short and not the index's; else a safe
    prefix and a hash of the whole name after a "~", which a plain name cannot hold, so two
    scenarios never share a page."""
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in scenario)
    if safe == scenario and 0 < len(scenario) <= PLAIN_NAME and scenario.lower() != "index" \
            and not scenario.startswith("."):
        return scenario + ".html"
    return f"{safe[:PLAIN_NAME].lstrip('.')}~{hashlib.sha1(scenario.encode()).hexdigest()[:10]}.html"


def write(db: sqlite3.Connection, out_dir: Path) -> list[Path]:
    """index.html and one page per scenario under `out_dir`; the pages written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    all_groups = series.groups(db)
    scenarios = sorted({sc for sc, _ in all_groups})
    pages = []
    for sc in scenarios:
        path = out_dir / _file_name(sc)
        safewrite.write_text(path, scenario_page(db, sc, {k: v for k, v in all_groups.items() if k[0] == sc}),
                             out_dir)
        pages.append(path)
    links = "".join(f'<li><a href="{escape(_file_name(sc))}">{escape(sc)}</a></li>' for sc in scenarios)
    index = out_dir / "index.html"
    safewrite.write_text(index, _page("dlbench history", ["<h1>dlbench history</h1>", f"<ul>{links}</ul>"
                                                          if links else "<p>the history is empty</p>"]), out_dir)
    return [index, *pages]

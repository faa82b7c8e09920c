"""Pure: one small inline SVG chart of a figure over commits: a point per commit with its interval
as a vertical bar, the points joined, the change points marked (a dashed line and the step's size),
a drift as a shaded band over its commits, a reference line where given (1 for an effect's ratio).
No script, no external resource: it renders from a file offline."""
from __future__ import annotations

from dataclasses import dataclass
from html import escape

WIDTH, HEIGHT = 560, 170
LEFT, RIGHT, TOP, BOTTOM = 58, 10, 22, 26


@dataclass(frozen=True)
class ChartPoint:
    commit: str
    value: float
    low: float
    high: float
    note: str = ""


@dataclass(frozen=True)
class Marker:
    commit: str  # the first commit after the step (a drift's first commit)
    text: str
    last: str | None = None  # a drift's last commit: the marker is a band over its commits


def _fmt(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 1e4 else f"{v:.0f}"


def chart(title: str, points: list[ChartPoint], markers: list[Marker] = (), reference: float | None = None) -> str:
    """The chart as an <svg> element (a note in its place when there are no points)."""
    if not points:
        return f'<p class="empty">{escape(title)}: no measurement</p>'
    lows = [p.low for p in points] + ([reference] if reference is not None else [])
    highs = [p.high for p in points] + ([reference] if reference is not None else [])
    lo, hi = min(lows), max(highs)
    if hi <= lo:
        lo, hi = lo * 0.95 - 1e-12, hi * 1.05 + 1e-12
    pad = (hi - lo) * 0.08
    lo, hi = lo - pad, hi + pad
    n = len(points)
    inner_w, inner_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(i: float) -> float:
        return LEFT + (inner_w * (i + 0.5) / n)

    def y(v: float) -> float:
        return TOP + inner_h * (hi - v) / (hi - lo)

    out = [f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}">',
           f'<text x="{LEFT}" y="14" class="t">{escape(title)}</text>',
           f'<rect x="{LEFT}" y="{TOP}" width="{inner_w}" height="{inner_h}" class="frame"/>']
    for v in (lo + pad, (lo + hi) / 2, hi - pad):
        out.append(f'<text x="{LEFT - 4}" y="{y(v) + 4:.1f}" class="a" text-anchor="end">{_fmt(v)}</text>')
    if reference is not None:
        out.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(reference):.1f}" y2="{y(reference):.1f}" '
                   f'class="ref"/>')
    index = {p.commit: i for i, p in enumerate(points)}
    for m in markers:
        if m.last is not None and m.commit in index and m.last in index:
            x0, x1 = x(index[m.commit] - 0.5), x(index[m.last] + 0.5)
            out.append(f'<g class="drift" data-commit="{escape(m.commit)}"><rect x="{x0:.1f}" y="{TOP}" '
                       f'width="{x1 - x0:.1f}" height="{inner_h}"/><text x="{x1 - 3:.1f}" y="{TOP + inner_h - 4}" '
                       f'text-anchor="end">{escape(m.text)}</text></g>')
        elif m.commit in index:
            xm = x(index[m.commit] - 0.5)
            out.append(f'<g class="step" data-commit="{escape(m.commit)}"><line x1="{xm:.1f}" x2="{xm:.1f}" '
                       f'y1="{TOP}" y2="{TOP + inner_h}"/><text x="{xm + 3:.1f}" y="{TOP + 11}">'
                       f'{escape(m.text)}</text></g>')
    path = " ".join(f"{x(i):.1f},{y(p.value):.1f}" for i, p in enumerate(points))
    out.append(f'<polyline points="{path}" class="line"/>')
    for i, p in enumerate(points):
        tip = escape(f"{p.commit[:10]}: {_fmt(p.value)} [{_fmt(p.low)}, {_fmt(p.high)}] {p.note}")
        out.append(f'<g class="pt"><title>{tip}</title><line x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{y(p.low):.1f}" '
                   f'y2="{y(p.high):.1f}"/><circle cx="{x(i):.1f}" cy="{y(p.value):.1f}" r="2.5"/></g>')
    step = max(1, n // 6)
    for i in range(0, n, step):
        out.append(f'<text x="{x(i):.1f}" y="{HEIGHT - 8}" class="a" text-anchor="middle">'
                   f'{escape(points[i].commit[:7])}</text>')
    out.append("</svg>")
    return "".join(out)


STYLE = """body{font:14px sans-serif;margin:16px;color:#222;max-width:1200px}h1{font-size:20px}h2{font-size:17px;
margin-top:28px}h3{font-size:14px;margin:14px 0 4px}.row{display:flex;flex-wrap:wrap;gap:8px}
svg .t{font-size:12px;font-weight:bold}svg .a{font-size:10px;fill:#555}svg .frame{fill:#fafafa;stroke:#ccc}
svg .line{fill:none;stroke:#3465a4;stroke-width:1.2}svg .pt line{stroke:#3465a4;stroke-width:2;opacity:.45}
svg .pt circle{fill:#3465a4}svg .ref{stroke:#888;stroke-dasharray:2 2}svg .step line{stroke:#c00;
stroke-dasharray:4 3;stroke-width:1.5}svg .step text{font-size:11px;fill:#c00}svg .drift rect{fill:#f5a623;opacity:.15}
svg .drift text{font-size:11px;fill:#a35f00}.machine{color:#555}
.steps{color:#c00}table{border-collapse:collapse}td,th{padding:2px 8px;border-bottom:1px solid #eee;text-align:left}"""

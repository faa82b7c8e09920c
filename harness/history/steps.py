"""Pure: where a figure stepped across commits, how far (with an interval), and a slow drift (no I/O).

Input: the runs of one figure in commit order, each (commit, value); a commit may have several runs. On the log
of the figure (a change is a factor):

- **Steps**: the piecewise-constant fit with the fewest squared residuals plus a penalty per step (optimal
  partitioning by dynamic programming, exact; asv's step detection fits the same kind of model), steps only
  between commits, every segment at least MIN_SEGMENT runs. The penalty is BIC's, 2 sigma^2 log n, with sigma
  estimated from successive differences between runs (their median absolute value, which a few steps hardly
  move), so that pure noise gives no step. Each step's size is the ratio of the geometric means of the
  segments on either side, with a 95% Welch interval on the log values.
- **Drift**: within each segment of at least MIN_DRIFT commits, the least-squares slope of the log value on
  the commit's position, its 95% interval, and the change over the segment (exp(slope x commits)); a drift is
  reported when the interval excludes 0 and the change is at least `min_effect`. A drift steep enough against
  the noise is cut into steps instead; one too gentle for that still shows here, over its segment.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from harness.results import stats

MIN_SEGMENT = 2  # runs on each side of a step
MIN_DRIFT = 6  # commits in a segment before its slope is tested


@dataclass(frozen=True)
class Step:
    commit: str  # the first commit after the step
    before: str  # the last commit before it
    ratio: float  # after / before (geometric means of the two segments)
    low: float
    high: float


@dataclass(frozen=True)
class Drift:
    first: str
    last: str
    commits: int
    change: float  # exp(slope x (commits - 1)): the factor over the segment
    low: float
    high: float


def _noise(logs: list[float]) -> float:
    diffs = sorted(abs(b - a) for a, b in zip(logs, logs[1:]))
    if not diffs:
        return 0.0
    return 1.4826 * diffs[len(diffs) // 2] / math.sqrt(2)


def _cost(prefix: list[float], prefix2: list[float], i: int, j: int) -> float:
    n = j - i
    s = prefix[j] - prefix[i]
    return (prefix2[j] - prefix2[i]) - s * s / n


def segments(logs: list[float], cuts_allowed: list[int], penalty: float) -> list[int]:
    """The start indices of the best segments (optimal partitioning), cuts only at `cuts_allowed`."""
    n = len(logs)
    prefix, prefix2 = [0.0], [0.0]
    for x in logs:
        prefix.append(prefix[-1] + x)
        prefix2.append(prefix2[-1] + x * x)
    ends = sorted({c for c in cuts_allowed if MIN_SEGMENT <= c <= n - MIN_SEGMENT} | {n})
    best: dict[int, tuple[float, list[int]]] = {0: (-penalty, [])}
    for j in ends:
        options = [(best[i][0] + penalty + _cost(prefix, prefix2, i, j), best[i][1] + [i])
                   for i in best if j - i >= MIN_SEGMENT]
        if options:
            best[j] = min(options, key=lambda o: o[0])
    return best[n][1] if n in best else [0]


def _welch(a: list[float], b: list[float]) -> tuple[float, float, float]:
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    va = sum((x - ma) ** 2 for x in a) / (len(a) - 1) / len(a)
    vb = sum((x - mb) ** 2 for x in b) / (len(b) - 1) / len(b)
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / ((va * va / (len(a) - 1)) + (vb * vb / (len(b) - 1))) if se > 0 else 1
    half = stats.t_quantile(0.95, max(1, int(df))) * se
    d = mb - ma
    return math.exp(d), math.exp(d - half), math.exp(d + half)


def _drift(commits: list[str], logs: list[float], positions: list[int], min_effect: float) -> Drift | None:
    distinct = sorted(set(positions))
    if len(distinct) < MIN_DRIFT:
        return None
    mx, my = sum(positions) / len(positions), sum(logs) / len(logs)
    sxx = sum((x - mx) ** 2 for x in positions)
    slope = sum((x - mx) * (y - my) for x, y in zip(positions, logs)) / sxx
    resid = [y - my - slope * (x - mx) for x, y in zip(positions, logs)]
    se = math.sqrt(sum(r * r for r in resid) / (len(logs) - 2) / sxx)
    half = stats.t_quantile(0.95, len(logs) - 2) * se
    span = distinct[-1] - distinct[0]
    change, low, high = (math.exp(v * span) for v in (slope, slope - half, slope + half))
    if (low <= 1 <= high) or max(change, 1 / change) < 1 + min_effect:
        return None
    return Drift(commits[0], commits[-1], len(distinct), change, low, high)


def change_points(runs: list[tuple[str, float]], min_effect: float = 0.05) -> tuple[list[Step], list[Drift]]:
    """The steps and drifts of a figure over `runs`, (commit, value) in commit order (positive values)."""
    runs = [(c, v) for c, v in runs if v and v > 0]
    logs = [math.log(v) for _, v in runs]
    commits = [c for c, _ in runs]
    position, positions = {}, []
    for c in commits:
        positions.append(position.setdefault(c, len(position)))
    if len(runs) < 2 * MIN_SEGMENT:
        return [], []
    sigma = _noise(logs)
    penalty = 2 * max(sigma, 1e-9) ** 2 * math.log(len(logs))
    cuts = [i for i in range(1, len(runs)) if commits[i] != commits[i - 1]]
    starts = segments(logs, cuts, penalty) + [len(runs)]
    found, drifts = [], []
    for a, b, c in zip(starts, starts[1:], starts[2:]):
        ratio, low, high = _welch(logs[a:b], logs[b:c])
        found.append(Step(commits[b], commits[b - 1], ratio, low, high))
    for a, b in zip(starts, starts[1:]):
        d = _drift(commits[a:b], logs[a:b], positions[a:b], min_effect)
        if d is not None:
            drifts.append(d)
    return found, drifts

"""Pure: where a figure stepped across commits, how far (with an interval), and a slow drift (no
I/O).

Input: the runs of one figure in commit order, each (commit, value); a commit may have several
runs. On the log of the figure (a change is a factor):

- **Steps**: the piecewise-constant fit with the fewest squared residuals plus a penalty per step
  (optimal partitioning by dynamic programming, exact; asv's step detection fits the same kind of
  model), steps only between commits, every segment at least MIN_SEGMENT runs. The penalty is
  BIC's, 2 sigma^2 log n, with sigma estimated from successive differences between runs (their
  median absolute value, which a few steps hardly move; their mean where most are 0), so that pure
  noise gives no step; a figure equal in every run has none. Each step's size is the ratio of the
  geometric means of the NEAR runs on either side of it (fewer where a segment is shorter: a drift
  beside the step then biases it little), with a 95% Welch interval on the log values; a step whose
  interval holds 1 (no change) is not reported.
- **Drift**: within each segment of at least MIN_DRIFT commits, the least-squares slope of the log
  value on the commit's position, its 95% interval, and the change over the segment (exp(slope x
  commits)); a drift is reported when the interval excludes 0 and the change is at least
  `min_effect`. A drift the fit cut into one or more steps one way is taken back into one segment
  when a line fits it as well (its squared residuals plus one penalty, against the pieces' plus one
  penalty per step), and reported as a drift, not as steps.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from harness.results import stats

MIN_SEGMENT = 2  # runs on each side of a step
MIN_DRIFT = 6  # commits in a segment before its slope is tested
NEAR = 6  # runs on each side of a step that measure its size (fewer where a segment is shorter)


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
    typical = diffs[len(diffs) // 2] or sum(diffs) / len(diffs)  # the mean where most differences are 0
    return 1.4826 * typical / math.sqrt(2)


def _cost(prefix: list[float], prefix2: list[float], i: int, j: int) -> float:
    n = j - i
    s = prefix[j] - prefix[i]
    return max(0.0, (prefix2[j] - prefix2[i]) - s * s / n)


def segments(logs: list[float], cuts_allowed: list[int], penalty: float) -> list[int]:
    """The start indices of the best segments (optimal partitioning), cuts only at
    `cuts_allowed`."""
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


def _line_cost(x: list[int], y: list[float]) -> float:
    """Squared residuals of the least-squares line of y on x."""
    mx, my = sum(x) / len(x), sum(y) / len(y)
    sxx = sum((a - mx) ** 2 for a in x)
    slope = sum((a - mx) * (b - my) for a, b in zip(x, y)) / sxx if sxx else 0.0
    return sum((b - my - slope * (a - mx)) ** 2 for a, b in zip(x, y))


def _ramps(starts: list[int], logs: list[float], positions: list[int], penalty: float) -> list[tuple[int, int]]:
    """Runs of one or more steps one way that a line fits as well (its squared residuals plus one
    penalty for the slope, against the pieces' plus one per step): a drift cut into steps. (first,
    last) segment indices, the longest first, never overlapping."""
    chosen: list[tuple[int, int]] = []
    n = len(starts) - 1  # segments
    means = [sum(logs[a:b]) / (b - a) for a, b in zip(starts, starts[1:])]
    for length in range(n, 1, -1):
        for first in range(0, n - length + 1):
            last = first + length - 1
            if any(not (last < a or first > b) for a, b in chosen):
                continue
            ups = [m2 > m1 for m1, m2 in zip(means[first:last], means[first + 1:last + 1])]
            if not (all(ups) or not any(ups)):
                continue
            a, b = starts[first], starts[last + 1]
            pieces = sum(sum((v - means[k]) ** 2 for v in logs[starts[k]:starts[k + 1]])
                         for k in range(first, last + 1))
            if _line_cost(positions[a:b], logs[a:b]) + penalty <= pieces + penalty * (length - 1):
                chosen.append((first, last))
    return chosen


def change_points(runs: list[tuple[str, float]], min_effect: float = 0.05) -> tuple[list[Step], list[Drift]]:
    """The steps and drifts of a figure over `runs`, (commit, value) in commit order (positive
    values)."""
    runs = [(c, v) for c, v in runs if v and v > 0]
    logs = [math.log(v) for _, v in runs]
    commits = [c for c, _ in runs]
    position, positions = {}, []
    for c in commits:
        positions.append(position.setdefault(c, len(position)))
    if len(runs) < 2 * MIN_SEGMENT:
        return [], []
    sigma = _noise(logs)
    if sigma == 0:  # the same value in every run: nothing to decide
        return [], []
    penalty = 2 * sigma ** 2 * math.log(len(logs))
    cuts = [i for i in range(1, len(runs)) if commits[i] != commits[i - 1]]
    starts = segments(logs, cuts, penalty) + [len(runs)]
    ramps = _ramps(starts, logs, positions, penalty)
    inside = {k for first, last in ramps for k in range(first + 1, last + 1)}  # steps a ramp replaces
    found = []
    for k, (a, b, c) in enumerate(zip(starts, starts[1:], starts[2:]), 1):
        if k not in inside:
            ratio, low, high = _welch(logs[max(a, b - NEAR):b], logs[b:min(c, b + NEAR)])
            if not low <= 1 <= high:  # a step is reported when its interval excludes no change
                found.append(Step(commits[b], commits[b - 1], ratio, low, high))
    spans = [(starts[first], starts[last + 1]) for first, last in ramps]
    spans += [(a, b) for k, (a, b) in enumerate(zip(starts, starts[1:]))
              if not any(first <= k <= last for first, last in ramps)]
    drifts = [d for a, b in sorted(spans) if (d := _drift(commits[a:b], logs[a:b], positions[a:b], min_effect))]
    return found, drifts

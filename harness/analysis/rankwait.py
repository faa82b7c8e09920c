"""Pure: what ranks cost each other, measured at a few ranks and carried to N (docs/prediction.md,
"The ranks' wait").

A 1-rank calibration cannot see it: with one rank nobody waits. Every step the ranks agree (a tiny
allreduce) and all-reduce the gradients, so a step lasts as long as its slowest rank's busy time
plus the agreement's own latency, and each rank spends CPU on the gradient allreduce that it did
not spend alone. From a calibration at `ranks` >= 2 ranks (its rank records) this module takes,
measured:

    busy      each rank's busy time per step (its step less its peer wait), in steps that began
              no epoch
    latency   per step, the least peer wait among the ranks: the agreement's own time for the last
              to arrive
    restart   the extra wait of a step that began a new epoch (its iterator, its first batch), over
              the median busy time
    cpu       the rank's CPU per sample there less the 1-rank calibration's: the collectives' CPU

and carries them to N ranks by stated laws:

    step(N)   = E[max of N busy times drawn from the measured ones] + latency
                + restart x N B / samples          (one epoch start every samples / (N B) steps)
    cpu(N)    = the 1-rank rank CPU + cpu x m(N) / m(ranks),   m(n) = 2 (n - 1)
                                                   (a ring allreduce's messages per rank and step:
                                                   for the small gradients of the emulated models
                                                   each message's fixed cost, a wake-up and a send,
                                                   outweighs its bytes, which stay about the
                                                   gradient's size, 2 (n-1)/n of it)

The expected maximum is exact for the empirical distribution: sum over the sorted x_k of x_k
((k/m)^N - ((k-1)/m)^N). At N = `ranks` it reproduces the calibration's own mean step, so a case at
the calibration's own rank count is a repeat, not a prediction (the caller says so).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RankWait:
    """The ranks' wait, measured at `ranks` ranks (module docstring)."""

    ranks: int
    busy_s: tuple[float, ...]  # sorted busy seconds per rank and step (steps no epoch began)
    device_s: float  # mean device seconds per step over those steps
    latency_s: float  # mean over steps of the least peer wait among the ranks
    restart_s: float  # extra wait of a step that began an epoch (0: none in the window)
    restarts: int  # epoch starts the window held (0: restart_s is not measured)
    cpu_s: float  # rank CPU seconds per sample there less the 1-rank calibration's (>= 0)


def ring_messages(n: int) -> float:
    """The messages a ring allreduce sends per rank and step: 2 (n - 1) (0 at one rank)."""
    return 2.0 * (n - 1) if n > 1 else 0.0


def expected_max(values: tuple[float, ...] | list[float], n: int) -> float:
    """E[max of n independent draws] from the empirical distribution of `values` (exact)."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    m = len(x)
    if m == 0 or n < 1:
        return 0.0
    k = np.arange(1, m + 1, dtype=np.float64)
    return float(np.sum(x * ((k / m) ** n - ((k - 1) / m) ** n)))


def measure(records, one_rank_rank_s: float) -> RankWait | None:
    """The ranks' wait from a calibration's rank records at 2 or more ranks (None below 2 or
    without steps). `one_rank_rank_s`: the 1-rank calibration's rank CPU seconds per sample."""
    if len(records) < 2:
        return None
    n = min(len(r.step) for r in records)
    if n == 0:
        return None
    step = np.array([r.step[:n] for r in records], dtype=np.float64)
    peer = np.array([r.peer_wait[:n] for r in records], dtype=np.float64)
    device = np.array([r.device[:n] for r in records], dtype=np.float64)
    starts = sorted({i for r in records for i in (r.epoch_starts or []) if i < n})
    plain = np.ones(n, dtype=bool)
    plain[starts] = False
    if not plain.any():
        return None
    busy = step - peer
    typical = float(np.median(busy[:, plain]))
    restart = float(np.mean(busy[:, starts].max(axis=0) - typical)) if starts else 0.0
    samples = sum(r.samples for r in records)
    cpu = sum(r.rank_cpu_s for r in records) / samples if samples else 0.0
    return RankWait(ranks=len(records), busy_s=tuple(sorted(busy[:, plain].ravel().tolist())),
                    device_s=float(device[:, plain].mean()), latency_s=float(peer[:, plain].min(axis=0).mean()),
                    restart_s=max(0.0, restart), restarts=len(starts), cpu_s=max(0.0, cpu - one_rank_rank_s))


def pooled(waits: list[RankWait | None]) -> RankWait | None:
    """The waits of several launches at one rank count as one (their busy times together, the rest
    their mean; the epoch starts' cost the mean of those that had one); None without any."""
    waits = [w for w in waits if w is not None]
    if not waits:
        return None
    started = [w for w in waits if w.restarts]
    return RankWait(ranks=waits[0].ranks, busy_s=tuple(sorted(x for w in waits for x in w.busy_s)),
                    device_s=statistics.mean(w.device_s for w in waits),
                    latency_s=statistics.mean(w.latency_s for w in waits),
                    restart_s=statistics.mean(w.restart_s for w in started) if started else 0.0,
                    restarts=sum(w.restarts for w in waits), cpu_s=statistics.mean(w.cpu_s for w in waits))


def step_seconds(wait: RankWait, ranks: int, batch_size: int, samples: int) -> float:
    """A step at `ranks` ranks: the slowest of them, the agreement, the epoch starts amortised."""
    restarts = wait.restart_s * ranks * batch_size / samples if samples else 0.0
    return expected_max(wait.busy_s, ranks) + wait.latency_s + restarts


def au_pct(wait: RankWait, ranks: int, batch_size: int, samples: int) -> float:
    """The accelerator's busy share of that step (%)."""
    step = step_seconds(wait, ranks, batch_size, samples)
    return min(100.0, 100.0 * wait.device_s / step) if step > 0 else 0.0


def rank_cpu_s(one_rank_s: float, wait: RankWait, ranks: int) -> float:
    """The rank's CPU seconds per sample at `ranks` ranks: alone, plus the collectives' CPU by the
    ring's messages (module docstring)."""
    if ranks <= 1:
        return one_rank_s
    return one_rank_s + wait.cpu_s * ring_messages(ranks) / ring_messages(wait.ranks)


def summary(wait: RankWait) -> str:
    """One line: what the calibration measured."""
    restart = (f"an epoch start {wait.restart_s * 1e3:.0f} ms ({wait.restarts} in the window)" if wait.restarts
               else "no epoch start in the window (its cost not measured: 0)")
    return (f"at {wait.ranks} ranks: busy per step median {statistics.median(wait.busy_s) * 1e3:.1f} ms "
            f"(device {wait.device_s * 1e3:.1f}), agreement {wait.latency_s * 1e3:.2f} ms, {restart}, "
            f"collectives' CPU {wait.cpu_s * 1e3:.3f} ms/sample")

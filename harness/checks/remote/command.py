"""The target model's storage bounds against the project's own shaped store, predicted then
measured (model.py: the cases, the model and the table; sweep.py: the measuring). Root: the link is
a network namespace and a veth pair shaped with tc. docs/measurements/remote.md has a measured
table.

    # bandwidth 0 (calibration), 20, 10, 5 MB/s
    sudo python run_bench.py check-remote
    # 2 MB/s: under the small cases' demand
    sudo python run_bench.py check-remote --bandwidths 20 5 2 --seconds 8
    sudo python run_bench.py check-remote --bandwidths 40 10 2.5 --seconds 10
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from harness.checks.remote import model, sweep
from harness.config.scenariofields import number
from harness.errors import EXIT_OK, UsageError


@dataclass(frozen=True)
class CheckRemoteRequest:
    """`run_bench.py check-remote [--bandwidths MB/s ...] [--seconds S] [--rounds N] [--samples
    N]`."""

    bandwidths: tuple[float, ...] = (20.0, 10.0, 5.0)  # shaped settings in MB/s, after the unshaped calibration
    seconds: float = 8.0  # measured seconds per case and setting
    rounds: int = 2  # sweeps over every setting (medians reported)
    samples: int = 512  # the dataset's samples

    def __post_init__(self) -> None:
        """Every option checked as the command line is read, before a namespace or a store is
        built."""
        number(self.samples, "--samples", whole=True, least=model.BATCH, most=10**6,
               remedy=f"give at least a batch ({model.BATCH} samples)")
        number(self.seconds, "--seconds", above=True, most=3600, remedy="give the seconds measured per case")
        number(self.rounds, "--rounds", whole=True, least=1, most=100, remedy="give 1 or more sweeps")
        for bandwidth in self.bandwidths:
            number(bandwidth, "--bandwidths", above=True, most=1e6,
                   remedy="give shaped settings in MB/s above 0 (the unshaped calibration is always run)")


def main(request: CheckRemoteRequest) -> int:
    if os.geteuid() != 0:
        raise UsageError("check-remote needs root (a network namespace and tc); run it with sudo")
    rows = sweep.run(list(request.bandwidths), request.seconds, request.rounds, request.samples)
    print("\n".join(model.notes(rows, request.rounds)))
    print("\n".join(model.table(rows)))
    return EXIT_OK

"""`run_bench.py oomcheck [--real]`: an OOM on one rank of a 2-rank DDP run must neither hang nor
crash the other. Each case (model x phase x splitting on/off) is run by inject.py beside it, whose
docstring says what must hold; this prints one line per case and the verdict. Exit 0 when every
case holds, 1 when one does not. Each case runs on a device of its own (inject.case_device): "steps
that raised" are the OOMs the step policy handled, "OOM events" the harness's figure, which counts
the same steps (the steps split ahead after an OOM, from the device's memory of it, raised nothing
and are not counted: harness.train.ddpstep).
"""
from __future__ import annotations

import shlex
import sys
import time
from dataclasses import dataclass

from harness.checks.oom.inject import MODELS, all_cases, holds, run
from harness.errors import EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, UsageError


@dataclass(frozen=True)
class OomCheckRequest:
    """`run_bench.py oomcheck [--real] [--model NAME ...] [--timeout S]`."""

    real: bool = False  # a real CUDA OOM (needs a GPU); else injected, on CPU
    models: tuple[str, ...] = ()  # only these models (inject.MODELS); (): every model
    timeout: float = 30.0  # seconds a case may take before it is a hang


Request = OomCheckRequest  # what harness.cli builds


def main(request: Request) -> int:
    unknown = [m for m in request.models if m not in MODELS]
    if unknown:
        raise UsageError(f"oomcheck: no model {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    cases = all_cases(request.models or MODELS)
    started = time.monotonic()
    outcomes = run(cases, real=request.real, timeout_s=request.timeout)
    ok = True
    for case, ranks in zip(cases, outcomes):
        good = ranks is not None and holds(case, ranks)
        ok &= good
        detail = "did not finish (a hang or a crash)" if ranks is None else (
            f"steps {[r['steps'] for r in ranks]}, steps that raised {[r['raised'] for r in ranks]}, "
            f"OOM events {[r['oom_events'] for r in ranks]}, "
            f"errors {[r['error'] for r in ranks]}")
        print(f"{case.label}: expected {'goes on' if case.goes_on else 'every rank stops'}; {detail}: "
              f"{'OK' if good else 'FAILED'}", flush=True)
    print(f"{len(cases)} cases in {time.monotonic() - started:.1f} s: {'all hold' if ok else 'FAILED'}")
    return EXIT_OK if ok else EXIT_REGRESSION


if __name__ == "__main__":
    print("python -m harness.checks.oom.command is now: python run_bench.py oomcheck "
          f"{shlex.join(sys.argv[1:])}".rstrip(), file=sys.stderr)
    sys.exit(EXIT_USAGE)

#!/usr/bin/env python
"""Benchmark data-loading strategies under real DDP training. See README.md."""
import sys

if __name__ == "__mp_main__":  # a process the run spawned (a rank, a pool's worker) re-imports this file
    # first: it dies with its parent from here on, even if the parent is killed while it imports torch
    from harness.run.deathsig import die_with_parent

    die_with_parent()

if __name__ == "__main__":
    # imported here, not at the top: every spawned rank and every DataLoader worker re-imports this file as
    # its __mp_main__, and the CLI's imports (pandas, matplotlib, the report) cost each of them a second
    try:
        from harness.cli import main
    except Exception as err:  # a harness that cannot import is a bug: one line, exit 2 (never 1, a regression)
        if "--debug" in sys.argv:
            raise
        print(f"run_bench.py: internal error (a bug in the harness): cannot import it: {type(err).__name__}: "
              f"{err}; rerun with --debug for the traceback", file=sys.stderr)
        sys.exit(2)
    sys.exit(main())

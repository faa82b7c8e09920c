#!/usr/bin/env python
"""Benchmark data-loading strategies under real DDP training. See README.md."""
import sys

if __name__ == "__main__":
    # imported here, not at the top: every spawned rank and every DataLoader worker re-imports this file as
    # its __mp_main__, and the CLI's imports (pandas, matplotlib, the report) cost each of them a second
    from harness.cli import main

    sys.exit(main())

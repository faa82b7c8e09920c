#!/usr/bin/env python
"""Benchmark data-loading strategies under real DDP training. See README.md."""
import sys

from harness.cli import main

if __name__ == "__main__":
    sys.exit(main())

"""Kept for the command lines written before the bench started the store itself: the same as
``python run_bench.py ...``. A scenario with a [remote] table now runs inside its remote session from the bench
(harness.run.remoterun.with_remote: the project's own object store behind its shaped link, stopped on any
exit; the remote figures printed and written beside the report as remote.md).

    python scripts/s3/run_remote.py --scenario remote --out results [any run_bench.py option]
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

if __name__ == "__main__":
    os.execv(sys.executable, [sys.executable, str(REPO / "run_bench.py"), *sys.argv[1:]])

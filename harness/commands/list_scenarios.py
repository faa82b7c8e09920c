"""`run_bench.py --list`: the scenarios, one line each."""
from __future__ import annotations

from harness.config import scenario
from harness.errors import EXIT_OK


def main() -> int:
    rows = scenario.describe_all()
    width = max(len(name) for name, _ in rows)
    for name, description in rows:
        print(f"{name:<{width}}  {description}")
    return EXIT_OK

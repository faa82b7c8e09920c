"""The gates, one vocabulary: the baseline gate (`baseline.py`: a run's cells against a baseline,
or run B against run A; `mainrun.py` around the main run's --baseline / --save-baseline;
`compare_command.py`), the A/B gate (`ab.py` its judgement, `trees.py` the interleaved runs of two
trees, `ab_command.py` ab-gate and gate-precheck), the history gate (`history.py`, its test
`lookback.py`) and the CI cache (`cicache.py`, `ci_command.py` ci-history); what they read from run
directories (`inputs.py`) and the comparison's table (`table.py`). docs/ci-gate.md,
docs/history.md."""

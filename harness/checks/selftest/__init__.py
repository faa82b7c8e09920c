"""self-test (--self-test): the harness's own figures checked on a calibrated synthetic workload
with analytic answers; `fidelity.py` measures, `command.py` judges and prints the table."""

"""check-predictions (`command.py`) and check-capacity (`capacity_command.py`; its pure model and
verdict `capacity.py`, its table `capacity_table.py`): the target model checked on this machine
against real launches of the harness's cells (`calibration.py`) and the side measurements beside
them (`sidebench.py`); the cases and their scoring (`cases.py`, `scoring.py`), the intervals'
coverage (`interval.py`) and check-predictions' table (`table.py`). docs/prediction.md."""

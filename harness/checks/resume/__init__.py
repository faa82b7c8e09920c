"""check-resume: what a restart costs per loader and storage; `measuring.py` times a restart's
first batch (page cache warm and cold) and records a mid-epoch resume's order each way
(`loaders.py` rebuilds and restores each case's loader), `counting.py` counts the samples repeated
and dropped, `table.py` prints the rows and `command.py` is the command. docs/resume-cost.md."""

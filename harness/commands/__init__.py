"""commands: one thin module per command (the main run, report, compare, resume, list, self-test, loader-only,
check-predictions, check-capacity, target-report, oomcheck, the A/B gate). Each takes a typed request that
harness/cli/ built from the command line, and calls the wings: it parses nothing and measures nothing."""

"""commands: one thin module per command (the main run, report, compare, list, self-test, history,
check-predictions, check-capacity, check-remote, target-report, oomcheck, the A/B gate and its precheck). Each
takes a typed request that harness/cli/ built from the command line, and calls the wings: it parses nothing,
and no command imports another (what two of them share lives in its wing: harness.run, harness.analysis,
harness.report)."""

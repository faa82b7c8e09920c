"""commands: one thin module per command of the main run (the run, report, list, history,
check-resume, target-report; the side features' commands are in their packages: harness/checks/,
harness/gates/). Each takes a typed request that harness/cli/ built from the command line, and
calls the wings: it parses nothing, and no command imports another (what two of them share lives in
its wing: harness.run, harness.analysis, harness.report)."""

"""oomcheck: an OOM on one rank of a 2-rank DDP run must neither hang nor crash the other;
`inject.py` runs each case in spawned ranks, `command.py` prints the verdicts. docs/gpu-path.md."""

"""measure: what is recorded while a cell runs: the per-step arrays of the five-part accounting (recorder),
the samplers of host memory, disk reads and loader CPU (telemetry), torch.profiler traces (profiling) and the
visible GPUs (gpuinfo). Imports no other wing."""

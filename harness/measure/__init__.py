"""measure: what is recorded while a cell runs: the per-step arrays of the five-part accounting
(steprecorder), the typed per-rank record and the table of the five parts (rankrecord), the
samplers of host memory, disk reads and loader CPU (telemetry), the CPU used outside the run
(hostload), torch.profiler traces (profiling) and the visible GPUs (gpuinfo); a remote store's
figures, merged from its readers' counters (remotecounters, which reads the latency bins of
strategies.remote.s3client). Imports no other wing."""

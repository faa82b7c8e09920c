"""results: what a run leaves on disk, one typed record per file, and the pure arithmetic over it:
the result model of one cell and its parts (cellresult, cellparts), its repeats merged (repeats),
throughput against the probe (vsprobe), cells.jsonl's format (cellsversions), env.json
(environment), probe.jsonl (probeline), baselines (baseline), a run directory's files (rundir) and
the one helper that versions, reads and writes them (fileformat), a cell's figures from its rank
records (metrics), the effects of each choice (effects) and the statistics (stats)."""

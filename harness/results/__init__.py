"""results: what a run leaves on disk and the pure arithmetic over it: the result model of one cell
(cellresult), a run directory's files (rundir), a cell's figures from its rank records (metrics) and the
statistics (stats)."""

"""report: what a run tells its user, built from the run directory alone: the one table renderer
(tables), the answer first (verdict) and the configuration to roll out on the target (rollout), the
effect of each choice (effecttables), the report (report) and what it says once above the tables
(header), the articles' tables (articles), plots, the what-if column (whatif) and the remote
figures (remotetable)."""

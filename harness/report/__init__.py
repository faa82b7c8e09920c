"""report: what a run tells its user, built from the run directory alone: the one table renderer (tables),
the report and its header (report), the articles' tables (articles), plots, the what-if column and the
baselines and the CI gate's verdicts (compare)."""

"""report: what a run tells its user, built from the run directory alone: the one table renderer (tables),
the answer first (verdict), the effect of each choice (effects), the report and its header (report), the
articles' tables (articles), plots, the what-if column (whatif), the CI gate's verdicts (compare) and the
--loader-only tables (loaderonly_tables)."""

"""check-remote: the target model's storage bounds against the project's own shaped store,
predicted (`model.py`, with harness.analysis.checkcases' case model) then measured (`sweep.py`);
`command.py` prints the notes and the table. Root. docs/remote.md."""

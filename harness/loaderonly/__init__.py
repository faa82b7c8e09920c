"""The loader-only run (`--loader-only`, dispatched here by harness/cli/): each storage's read path
alone (`readpath.py`, timing the sources of `sources.py`) beside a RAM gather and the article's
per-row reads, its rows (`rows.py`: loader.jsonl, decode.jsonl) and tables (`tables.py`);
`command.py` runs it."""

"""The side checks, one package each beside the core wings: its command (harness.cli parses and
builds its typed request), its measuring, its judgement and its table. A check imports the core
wings and the base modules, never another check; no core wing imports a check
(tests/test_imports.py)."""

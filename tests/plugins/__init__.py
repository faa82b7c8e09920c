"""Strategies that exist only to prove the harness catches them (loaded with --plugin)."""

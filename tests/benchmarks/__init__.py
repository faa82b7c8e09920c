"""Read-path microbenchmarks (a package so its conftest does not shadow tests/conftest.py as module `conftest`)."""

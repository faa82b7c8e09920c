"""The history wing: every run kept per commit and machine in one SQLite store, the questions a
person asks of it, change points across commits, and a static HTML dashboard. Between report (it
reads a run directory the way a report does) and commands (whose history command is a thin adapter
over it)."""

"""The one error type for user mistakes (the CLI prints it as one line and exits 2) and the exit
codes."""

EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, EXIT_BASELINE = 0, 1, 2, 3
EXIT_INCONCLUSIVE = 4  # a check whose figures missed only while other processes loaded the machine
EXIT_NOT_RUN = 5  # the CI gate (scripts/ci_gate.sh, ab-gate) measured nothing: NOT RUN, no verdict


class UsageError(Exception):
    """A mistake in the user's input, with the remedy in its message."""

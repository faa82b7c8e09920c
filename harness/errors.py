"""The one error type for user mistakes: the CLI prints it as one line and exits 2."""


class UsageError(Exception):
    """A mistake in the user's input, with the remedy in its message."""

"""The one error type for user mistakes (the CLI prints it as one line and exits 2) and the exit codes."""
import sys
from collections.abc import Callable

EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, EXIT_BASELINE = 0, 1, 2, 3


class UsageError(Exception):
    """A mistake in the user's input, with the remedy in its message."""


def run_module(prog: str, main: Callable[[], int]) -> None:
    """`python -m harness.commands.X`: exit with main()'s code; a UsageError is one line naming `prog`, exit 2."""
    try:
        code = main()
    except UsageError as err:
        print(f"{prog}: {err}", file=sys.stderr)
        code = EXIT_USAGE
    sys.exit(code)

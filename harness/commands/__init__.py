"""commands: the commands beside the main run, one module each: --self-test, --loader-only, --resume and
python -m harness.commands.oomcheck. harness/cli.py parses the command line and dispatches here."""

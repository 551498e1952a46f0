"""User-facing errors: the command-line entry points print ``str(err)`` as one line and exit 2."""
import argparse
import sys


class UserError(ValueError):
    """Bad input from the user: an unknown name, an out-of-range value, a missing data file,
    a foreign or truncated checkpoint. The message names the problem and the fix."""


class DataError(UserError):
    """A dataset cannot be loaded (missing or partial directory, wrong format)."""


class CheckpointError(UserError):
    """A file is not a readable fedlab_analysis checkpoint."""


class Diverged(RuntimeError):
    """Training met a non-finite loss or parameters (``--on-divergence stop``): the command line prints the
    message as one line and exits with ``EXIT_DIVERGED``."""

    def __init__(self, message: str, round: int):
        super().__init__(message)
        self.round = round


EXIT_DIVERGED = 3


class ArgParser(argparse.ArgumentParser):
    """argparse with the project's contract: a bad flag is ONE line ``error: ...`` on stderr and exit 2
    (argparse's default prints the usage block first). Sub-parsers inherit it. ``--debug`` is listed in --help; the
    guard (``cli.guard``) takes it out of argv before parsing."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        if self.add_help:
            from .cli import DEBUG, DEBUG_HELP
            self.add_argument(DEBUG, action="store_true", help=DEBUG_HELP)

    def error(self, message):
        print(f"error: {' '.join(message.split())} (see --help)", file=sys.stderr)
        sys.exit(2)

"""User-facing errors: the command-line entry points print ``str(err)`` as one line and exit 2."""


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


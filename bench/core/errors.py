"""Errors the CLI maps to exit codes."""


class BenchInputError(Exception):
    """Bad input or usage: the CLI prints one line and exits 2, before anything is run or written."""

    def __init__(self, message: str, where: str | None = None):
        # One line, always: multi-line messages break the "one clear line" contract.
        message = " ".join(str(message).split())
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)


class RunFailed(Exception):
    """A run that could not go on (the store refused a write): the CLI prints one line and exits 1; what was
    recorded before stays recorded."""

"""SubmitFileError: why a submit file cannot be run, naming the file and line."""

from __future__ import annotations


class SubmitFileError(ValueError):
    """A submit file llic cannot run; the message is `file:line: what`."""

    def __init__(self, where: str, line: int | None, message: str) -> None:
        self.where = where
        self.line = line
        self.reason = message
        super().__init__(f"{where}:{line}: {message}" if line else f"{where}: {message}")

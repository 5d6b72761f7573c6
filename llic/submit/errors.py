"""Errors: SubmitFileError (why a submit file cannot be run, naming the file and line) and
ExpandError (why a macro could not be expanded, before the line is known)."""

from __future__ import annotations


class SubmitFileError(ValueError):
    """A submit file llic cannot run; the message is `file:line: what`."""

    def __init__(self, where: str, line: int | None, message: str) -> None:
        self.where = where
        self.line = line
        self.reason = message
        super().__init__(f"{where}:{line}: {message}" if line else f"{where}: {message}")


class ExpandError(Exception):
    """A macro could not be expanded; the caller, who knows the line, turns it into a SubmitFileError."""

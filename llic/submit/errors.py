"""Errors: SubmitFileError (why a submit file cannot be run, naming the file and line) and
ExpandError (why a macro could not be expanded, before the line is known)."""

from __future__ import annotations

MAX_REASON_CHARS = 1000  # of what is wrong: a value echoed whole made an error line of 20 KB


class SubmitFileError(ValueError):
    """A submit file llic cannot run; the message is `file:line: what`."""

    def __init__(self, where: str, line: int | None, message: str) -> None:
        if len(message) > MAX_REASON_CHARS:
            message = f"{message[:MAX_REASON_CHARS]}... ({len(message)} characters)"
        self.where = where
        self.line = line
        self.reason = message
        super().__init__(f"{where}:{line}: {message}" if line else f"{where}: {message}")


class ExpandError(Exception):
    """A macro could not be expanded; the caller, who knows the line, turns it into a SubmitFileError."""

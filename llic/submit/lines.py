"""The lines of a submit file: physical lines joined into logical ones (condor's
getline_implementation with the submit-file options).

A trailing `\\` continues a line; a `#` line inside a continuation is dropped but for its last
character (so one that ends in `\\` continues it further); a `#` line never starts a
continuation; both ends of every physical line are trimmed. Comment and blank logical lines are
returned too: the parser skips them, `queue ... from FILE` keeps them as items.
"""

from __future__ import annotations

from llic.submit.values import WHITESPACE


class LogicalLines:
    """Logical lines of a submit file: continuations joined, both ends trimmed."""

    def __init__(self, text: str) -> None:
        self._phys = text.split("\n")
        if self._phys and self._phys[-1] == "":
            self._phys.pop()  # the newline that ends the last line
        self._next = 0

    def next(self) -> tuple[int, str] | None:
        """(number of the first physical line, logical line), None at the end."""
        buf = ""
        start = self._next + 1
        first = True
        while True:
            if self._next >= len(self._phys):
                return (start, buf) if buf else None
            seg = self._phys[self._next].rstrip(WHITESPACE).lstrip(WHITESPACE)
            self._next += 1
            in_comment = seg.startswith("#")
            if in_comment and not first:
                seg = seg[-1:]  # a commented line inside a continuation: only its last character stays
                in_comment = False
            buf += seg
            if buf.endswith("\\"):
                buf = buf[:-1]
                if not in_comment:
                    first = False
                    continue
            return start, buf

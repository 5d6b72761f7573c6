"""Decisions of the protocol cores as structured events.

A core (poolD.core, faultD.role) returns, with its actions, the decisions worth a log line. Each
is a `Note`: an event name and fields for machines (`event=takeover epoch=7 manager=... `), and the
sentence a person reads in `poold status` / `faultd status` (str() of the note). Plain data: the
cores stay pure, and the drivers log them with `log_note`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Note:
    """One decision: `event` names it, `fields` carry its figures, `text` says it in a sentence."""

    event: str
    text: str
    fields: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.text


def note(event: str, text: str, **fields: Any) -> Note:
    """A Note with keyword fields: note("takeover", "...", epoch=7, manager="10.0.0.5:7641")."""
    return Note(event, text, fields)


def printable(text: str, limit: int = 200) -> str:
    """`text` as one printable line of at most `limit` characters: control and other
    non-printable characters become their escapes (`\\x1b`, `\\n`), so that text a peer chose
    cannot move a terminal's cursor, retitle it or forge lines of `poold status` or a log."""
    cut = text[:limit]
    if cut.isprintable():  # the common case, without a pass per character
        return cut
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in cut)[:limit]


def log_note(log: Any, item: Note | str, **extra: Any) -> None:
    """Log a note at info: its event name, its fields, and its sentence as `msg`."""
    if isinstance(item, Note):
        log.info(item.event, **item.fields, **extra, msg=item.text)
    else:
        log.info("decision", **extra, msg=item)

"""Structured logging for every daemon and tool of the suite.

Three forms, picked by where stderr goes:
- the journal (systemd sets JOURNAL_STREAM to stderr's device:inode): one line per event in
  logfmt (`event=takeover epoch=7 manager=10.0.0.5:7641 took_s=3.1`), prefixed with its syslog
  priority as sd-daemon(3) defines it (`<4>` for a warning), so `journalctl -p warning` filters
  and journald stamps the time;
- a terminal: structlog's console format, for a person watching;
- anything else (a file, a pipe, a log shipper): JSON lines.
Every line carries the daemon's name and the node's identity so that logs of many nodes (a ring,
or a simulation of thousands) can be told apart.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, Literal, TextIO

import structlog

LogFormat = Literal["journal", "console", "json"]
IDENTITY = ("daemon", "node")

# sd-daemon(3) priorities: <7> debug ... <2> critical.
PRIORITY = {"debug": 7, "info": 6, "warning": 4, "warn": 4, "error": 3, "exception": 3, "critical": 2}


def stream_is_journal(stream: TextIO, environ: dict[str, str] | None = None) -> bool:
    """Whether `stream` is the journal's socket: JOURNAL_STREAM names its device and inode
    (systemd.exec(5)), so a daemon whose stderr was redirected elsewhere is not fooled."""
    value = (os.environ if environ is None else environ).get("JOURNAL_STREAM", "")
    dev, _, ino = value.partition(":")
    if not (dev.isdigit() and ino.isdigit()):
        return False
    try:
        st = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return (st.st_dev, st.st_ino) == (int(dev), int(ino))


def pick_format(stream: TextIO, json: bool | None = None) -> LogFormat:
    """`json` True or False forces JSON or console; None looks at the stream (module docstring)."""
    if json is not None:
        return "json" if json else "console"
    if stream_is_journal(stream):
        return "journal"
    return "console" if stream.isatty() else "json"


class JournalRenderer:
    """`<N>event=... key=value ...`: logfmt with sd-daemon's priority prefix, without the time
    and level (journald records both)."""

    def __init__(self) -> None:
        self._logfmt = structlog.processors.LogfmtRenderer(
            key_order=["event"], drop_missing=True, bool_as_flag=False
        )

    def __call__(self, logger: Any, method: str, event: dict[str, Any]) -> str:
        level = str(event.pop("level", method))
        event.pop("timestamp", None)
        for key in IDENTITY:  # who says it, after what is said
            if key in event:
                event[key] = event.pop(key)
        return f"<{PRIORITY.get(level, 6)}>{self._logfmt(logger, method, event)}"


def configure_logging(
    daemon: str,
    node: str | None = None,
    *,
    level: str = "info",
    stream: TextIO | None = None,
    json: bool | None = None,
) -> structlog.stdlib.BoundLogger:
    """Configure structlog once per process and return a logger bound to daemon and node.

    `json=None` picks the form from the stream (module docstring)."""
    form = pick_format(stream or sys.stderr, json)
    colors = form == "console" and (stream or sys.stderr).isatty()
    out: Any = stream or _Stderr()
    renderer: Any
    if form == "journal":
        renderer = JournalRenderer()
    elif form == "json":
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=colors)
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
        renderer,
    ]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_numeric(level)),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )
    identity = {"daemon": daemon} | ({"node": node} if node else {})
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(**identity)
    return structlog.get_logger()


class _Stderr:
    """Whatever sys.stderr is when a line is written (a test's capture, a redirection), not the
    stream it was when logging was configured."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def set_level(level: str) -> None:
    """Change the level of every logger (a reload), keeping the rest of the configuration."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(_numeric(level)))


def _numeric(level: str) -> int:
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    return numeric


def get_logger(**identity: Any) -> structlog.stdlib.BoundLogger:
    """A logger bound to extra identity (e.g. one simulated node among many)."""
    return structlog.get_logger().bind(**identity)

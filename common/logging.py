"""Structured logging for every daemon and tool of the suite.

JSON lines when stderr is not a terminal (journald and log shippers parse them), a readable
console format when a person is watching. Every line carries the daemon's name and the node's
identity so that logs of many nodes (a ring, or a simulation of thousands) can be told apart.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog


def configure_logging(
    daemon: str,
    node: str | None = None,
    *,
    level: str = "info",
    stream: TextIO | None = None,
    json: bool | None = None,
) -> structlog.stdlib.BoundLogger:
    """Configure structlog once per process and return a logger bound to daemon and node.

    `json=None` picks JSON unless the stream is a terminal.
    """
    stream = stream or sys.stderr
    if json is None:
        json = not stream.isatty()
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
        structlog.processors.JSONRenderer()
        if json
        else structlog.dev.ConsoleRenderer(colors=stream.isatty()),
    ]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=False,
    )
    identity = {"daemon": daemon} | ({"node": node} if node else {})
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(**identity)
    return structlog.get_logger()


def get_logger(**identity: Any) -> structlog.stdlib.BoundLogger:
    """A logger bound to extra identity (e.g. one simulated node among many)."""
    return structlog.get_logger().bind(**identity)

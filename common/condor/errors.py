"""Typed failures of the HTCondor gateway. Each carries the operation and, for errors raised by
HTCondor itself, the daemon's own message."""

from __future__ import annotations


class GatewayError(Exception):
    """Base of every gateway failure."""

    def __init__(self, op: str, message: str) -> None:
        super().__init__(f"{op}: {message}")
        self.op = op
        self.message = message


class GatewayTimeout(GatewayError):
    """The call did not finish in time; the worker was killed (it may hold a hung connection)."""


class GatewayCrashed(GatewayError):
    """The worker process died during the call; the next call starts a new one."""


class CondorError(GatewayError):
    """HTCondor refused or failed the request; `kind` is the bindings' exception type."""

    def __init__(self, op: str, kind: str, message: str) -> None:
        super().__init__(op, f"{kind}: {message}")
        self.kind = kind
        self.condor_message = message


class DaemonNotFound(CondorError):
    """The collector knows no daemon matching the reference."""


class ProtocolViolation(GatewayError):
    """The worker answered with something that is not a valid response (a bug, not a user error)."""

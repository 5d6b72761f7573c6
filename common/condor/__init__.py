"""The HTCondor gateway: the suite's only route to HTCondor (see gateway.py and worker.py)."""

from common.condor.errors import (
    CondorError,
    DaemonNotFound,
    GatewayCrashed,
    GatewayError,
    GatewayTimeout,
    ProtocolViolation,
)
from common.condor.gateway import Gateway
from common.condor.types import DaemonKind, DaemonRef, PoolLoad, ScheddLoad, SubmitResult

__all__ = [
    "CondorError",
    "DaemonKind",
    "DaemonNotFound",
    "DaemonRef",
    "Gateway",
    "GatewayCrashed",
    "GatewayError",
    "GatewayTimeout",
    "PoolLoad",
    "ProtocolViolation",
    "ScheddLoad",
    "SubmitResult",
]

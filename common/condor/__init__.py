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
from common.condor.types import (
    AuthorizationCheck,
    DaemonKind,
    DaemonRef,
    PoolLoad,
    ScheddLoad,
    ShutOut,
    SubmitResult,
    TokenInfo,
    TokenRequest,
)

__all__ = [
    "AuthorizationCheck",
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
    "ShutOut",
    "SubmitResult",
    "TokenInfo",
    "TokenRequest",
]

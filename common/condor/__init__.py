"""The HTCondor gateway: the suite's only route to HTCondor (see gateway.py and worker.py).

The names below are loaded on first use (PEP 562): the gateway's worker process imports
`common.condor.worker` and so this package, and needs none of the client side (trio, structlog,
the pydantic types); skipping them starts the worker ~0.3 s sooner, which every client waits for
on its first call."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_HOMES = {
    "common.condor.errors": (
        "CondorError",
        "DaemonNotFound",
        "GatewayCrashed",
        "GatewayError",
        "GatewayTimeout",
        "ProtocolViolation",
    ),
    "common.condor.gateway": ("Gateway",),
    "common.condor.types": (
        "AuthorizationCheck",
        "DaemonKind",
        "DaemonRef",
        "PoolLoad",
        "ScheddLoad",
        "ShutOut",
        "SubmitResult",
        "TokenInfo",
        "TokenRequest",
    ),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

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


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'common.condor' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once
    return value

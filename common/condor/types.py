"""The gateway's vocabulary: HTCondor facts in the project's own terms, not ClassAds."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict


class DaemonKind(StrEnum):
    """The HTCondor daemons the gateway can address (the worker maps each to its ad type)."""

    MASTER = "master"
    COLLECTOR = "collector"
    NEGOTIATOR = "negotiator"
    SCHEDD = "schedd"
    STARTD = "startd"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DaemonRef(_Frozen):
    """Which daemon to talk to. With `address` (a sinful string such as
    `<10.0.0.5:9618>`) the collector is not consulted, which is how a daemon is reached while its
    pool has no collector; otherwise it is looked up by `name` (or the only/first one) in the
    collector."""

    kind: DaemonKind
    name: str | None = None
    address: str | None = None
    machine: str | None = None

    def describe(self) -> str:
        """The daemon in a message or log line: its kind, then its name or address."""
        return f"{self.kind} {self.name or self.address or '(any)'}"


class ScheddLoad(_Frozen):
    """One schedd's job counts from its collector ad; `flocked`: its jobs flocked to other pools."""

    name: str
    address: str | None
    machine: str | None = None
    idle: int
    running: int
    held: int
    flocked: int = 0


class PoolLoad(_Frozen):
    """A pool's slots (as the collector sees them) and the job counts of its own schedds."""

    total_slots: int
    free_slots: int
    claimed_slots: int
    schedds: list[ScheddLoad]

    @property
    def idle_jobs(self) -> int:
        """Idle jobs summed over the pool's own schedds."""
        return sum(s.idle for s in self.schedds)

    @property
    def running_jobs(self) -> int:
        """Running jobs summed over the pool's own schedds."""
        return sum(s.running for s in self.schedds)

    @property
    def held_jobs(self) -> int:
        """Held jobs summed over the pool's own schedds."""
        return sum(s.held for s in self.schedds)

    @property
    def utilization(self) -> float:
        """The claimed fraction of the pool's slots (0.0 for a pool without slots)."""
        return self.claimed_slots / self.total_slots if self.total_slots else 0.0


class AuthorizationCheck(_Frozen):
    """What a daemon makes of this client for one authorization level or command (condor_ping):
    whether it is authorized, as which identity, by which method, with encryption and integrity.
    `error` says why no answer came: authentication failed, or the command was refused (the
    bindings tell the two apart by message only, and give no identity for either)."""

    authz: str
    authorized: bool
    identity: str | None = None
    method: str | None = None
    encryption: bool = False
    integrity: bool = False
    error: str | None = None


class TokenRequest(_Frozen):
    """A token request queued at a daemon: the id its administrator approves; HTCondor's tool
    writes the token to `token_file` once approved."""

    request_id: str
    token_file: str


class TokenInfo(_Frozen):
    """One token a client holds (condor_token_list): whom it makes the holder (`identity`, at
    daemons of trust domain `issuer`), its id (`token_id`, what SEC_TOKEN_REVOCATION_EXPR names),
    the authorizations it is bounded to (none: all the identity has), expiry (Unix time) and file."""

    identity: str
    issuer: str
    token_id: str | None = None
    authz: list[str] = []
    expires: int | None = None
    key: str | None = None
    file: str | None = None

    @classmethod
    def from_listing(cls, entry: dict[str, Any]) -> TokenInfo:
        """From the worker's decoding of one condor_token_list line (header, payload, file)."""
        payload, header = entry.get("payload", {}), entry.get("header", {})
        scopes = str(payload.get("scope", "")).split()
        return cls(
            identity=str(payload.get("sub", "")),
            issuer=str(payload.get("iss", "")),
            token_id=payload.get("jti"),
            authz=[s.removeprefix("condor:/") for s in scopes if s.startswith("condor:/")],
            expires=payload.get("exp"),
            key=header.get("kid"),
            file=entry.get("file"),
        )


class ShutOut(_Frozen):
    """What shutting another pool's schedds out did (Gateway.shut_out_schedds): the host entries
    acted on, those refused as our own schedds', how many ads left the collector, the slots
    whose claims were vacated, and the slots that could not be (why)."""

    targets: list[str] = []
    refused: list[str] = []
    invalidated: int = 0
    vacated: list[str] = []
    errors: list[str] = []


class SubmitResult(_Frozen):
    """What one submit made: a cluster and the range of its proc ids."""

    cluster: int
    first_proc: int
    num_procs: int

    @property
    def job_ids(self) -> list[str]:
        """The submitted jobs' ids, 'cluster.proc'."""
        return [f"{self.cluster}.{p}" for p in range(self.first_proc, self.first_proc + self.num_procs)]

"""The gateway's vocabulary: HTCondor facts in the project's own terms, not ClassAds."""

from __future__ import annotations

from enum import StrEnum

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


class SubmitResult(_Frozen):
    """What one submit made: a cluster and the range of its proc ids."""

    cluster: int
    first_proc: int
    num_procs: int

    @property
    def job_ids(self) -> list[str]:
        """The submitted jobs' ids, 'cluster.proc'."""
        return [f"{self.cluster}.{p}" for p in range(self.first_proc, self.first_proc + self.num_procs)]

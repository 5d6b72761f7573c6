"""What goes into `MasterCore` and what comes out of it: its events and its actions.

Events are what the driver (llic/master.py) saw happen: an agent submitted or refused by the
schedd, an agent connected, a result or a large result's announcement arrived, a connection broke,
the schedd queue read, a transfer ended. Actions are what the core decided the driver must do:
submit or remove agent jobs, send tasks, close or refuse a connection, let a large result come.
Each entry point of the core returns an `Output`: its actions, in the order they must be carried
out, and notes for the log. Plain frozen records, no behaviour (h11 keeps its events apart the
same way), so that drivers, simulations and tests can build and match them freely.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llic.taskbook import Assignment, TaskOutcome

# ----------------------------------------------------------------------------- events


@dataclass(frozen=True)
class AgentSubmitted:
    """The schedd accepted the agent's job: its id ("cluster.proc") is known."""

    agent: str
    job_id: str


@dataclass(frozen=True)
class SubmitFailed:
    agent: str
    reason: str


@dataclass(frozen=True)
class AgentConnected:
    """The agent connected and passed the handshake; the driver sends `welcome` unless the
    output refuses it."""

    agent: str
    address: str = ""  # the agent's IP address as the master sees it (its subnet, llic.netadmit)


@dataclass(frozen=True)
class ResultReceived:
    agent: str
    process: int
    attempt: int
    outcome: TaskOutcome


@dataclass(frozen=True)
class ConnectionBroken:
    """Reading or writing the agent's connection failed, or it sent something malformed."""

    agent: str
    reason: str


@dataclass(frozen=True)
class QueueSnapshot:
    """The ids of this master's agent jobs that are alive (idle or running) in the schedd queue.
    Held, removed and completed jobs are not alive: an agent held for good would otherwise keep
    its chef waiting forever."""

    alive_job_ids: frozenset[str]


@dataclass(frozen=True)
class TransferDone:
    """The files of one task (direction IN) or one result (OUT) went over the agent's connection:
    `nbytes` of blobs between `start` and `end` (master's clock). Accounting; an IN transfer also
    frees its reservation (llic.netadmit), so held tasks may go."""

    agent: str
    process: int
    direction: str
    nbytes: int
    start: float
    end: float


@dataclass(frozen=True)
class BulkReady:
    """The agent holds a result whose files (`nbytes`) exceed BULK_OUTPUT_THRESHOLD and sends it
    when granted (GrantBulk): large returns go one at a time per subnet (issue 8 item 3)."""

    agent: str
    process: int
    attempt: int
    nbytes: int


MasterEvent = (
    AgentSubmitted
    | SubmitFailed
    | AgentConnected
    | ResultReceived
    | ConnectionBroken
    | QueueSnapshot
    | TransferDone
    | BulkReady
)


# ----------------------------------------------------------------------------- actions


@dataclass(frozen=True)
class SubmitAgent:
    """Submit agent `agent` (chef `chef`, launch `launch`); `initial` tasks travel in its input
    file (INITIAL_JOBS_NUMBER). Answer with AgentSubmitted or SubmitFailed."""

    agent: str
    chef: int
    launch: int
    initial: tuple[Assignment, ...]


@dataclass(frozen=True)
class RemoveAgents:
    """condor_rm these agent jobs (a job already gone is not an error)."""

    job_ids: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class SendTasks:
    agent: str
    tasks: tuple[Assignment, ...]


@dataclass(frozen=True)
class SendNoMoreTasks:
    agent: str


@dataclass(frozen=True)
class CloseConnection:
    agent: str
    reason: str


@dataclass(frozen=True)
class RefuseAgent:
    """Answer the handshake with `refused {reason}` and close."""

    agent: str
    reason: str


@dataclass(frozen=True)
class GrantBulk:
    """Tell the agent to send its large result for (process, attempt) now (`bulk_go`), at no
    more than `rate_bps` (0: unpaced)."""

    agent: str
    process: int
    attempt: int
    rate_bps: float = 0.0


Action = SubmitAgent | RemoveAgents | SendTasks | SendNoMoreTasks | CloseConnection | RefuseAgent | GrantBulk


@dataclass
class Output:
    actions: list[Action] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # for the log: what was decided and why

    def extend(self, other: Output) -> None:
        self.actions += other.actions
        self.notes += other.notes

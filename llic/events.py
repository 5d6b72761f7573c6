"""What goes into `MasterCore` and what comes out of it: its events and its actions.

Events are what the driver (llic/master.py) saw happen: an agent submitted or refused by the
schedd, an agent connected, a result or a large result's announcement arrived, a connection broke,
the schedd queue read, the pool's matching slots counted, a transfer ended, the user asked to
release, remove or hold tasks. Actions are what the core decided the driver must do: submit or
remove agent jobs, welcome, refuse or close a connection, send tasks, cancel one, let a large
result come, write job event log events, save the state file, ask for a negotiation cycle, read
the schedd queue, count the matching slots, give finished agents time to leave. Each entry point
of the core returns an `Output`: its actions, in the order they must be carried out, notes for
the log, and when the core next wants its timer. Plain frozen records, no behaviour (h11 keeps
its events apart the same way), so that drivers, simulations and tests build and match them freely.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llic.task import TaskResult
from llic.taskbook import Assignment, TaskEvent

# ----------------------------------------------------------------------------- events


@dataclass(frozen=True)
class AgentSubmitted:
    """The schedd accepted the agent's job: its id ("cluster.proc") is known."""

    agent: str
    job_id: str


@dataclass(frozen=True)
class SubmitFailed:
    """The schedd refused the agent's job (or it could not be prepared)."""

    agent: str
    reason: str


@dataclass(frozen=True)
class AgentConnected:
    """The agent connected and passed the handshake; the output welcomes it (WelcomeAgent) or
    refuses it (RefuseAgent)."""

    agent: str
    address: str = ""  # the agent's IP address as the master sees it (its subnet, llic.netadmit)


@dataclass(frozen=True)
class ResultReceived:
    """The agent's result for one run of one task (its returned files placed, in TRANSFER
    modes, when `MasterCore.wants_result` said it counts)."""

    agent: str
    result: TaskResult

    @property
    def process(self) -> int:
        """Which task."""
        return self.result.process

    @property
    def attempt(self) -> int:
        """Which run of it."""
        return self.result.attempt


@dataclass(frozen=True)
class ConnectionBroken:
    """Reading or writing the agent's connection failed, or it sent something malformed."""

    agent: str
    reason: str


@dataclass(frozen=True)
class QueueSnapshot:
    """The answer to PollQueue: the ids of this master's agent jobs that are alive (idle or
    running) in the schedd queue. Held, removed and completed jobs are not alive: an agent held
    for good would otherwise keep its chef waiting forever."""

    alive_job_ids: frozenset[str]


@dataclass(frozen=True)
class QueuePollFailed:
    """The answer to PollQueue when the schedd could not be asked: the next poll comes later."""

    reason: str


@dataclass(frozen=True)
class SlotsCounted:
    """The answer to CountSlots: how many slots of the pool match the agents' requirements
    (None: the collector could not be asked; the next count comes later)."""

    matching: int | None


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
    attempt: int | None = None  # the run the files are of (None: unknown)


@dataclass(frozen=True)
class BulkReady:
    """The agent holds a result whose files (`nbytes`) exceed BULK_OUTPUT_THRESHOLD and sends it
    when granted (GrantBulk): large returns go one at a time per subnet (issue 8 item 3)."""

    agent: str
    process: int
    attempt: int
    nbytes: int


@dataclass(frozen=True)
class UserRequest:
    """The user asked (master_release, master_rm, master_hold) to release, remove or hold
    these tasks (None: every task the action applies to)."""

    action: str  # "release", "remove" or "hold"
    processes: tuple[int, ...] | None
    reason: str


MasterEvent = (
    AgentSubmitted
    | SubmitFailed
    | AgentConnected
    | ResultReceived
    | ConnectionBroken
    | QueueSnapshot
    | QueuePollFailed
    | SlotsCounted
    | TransferDone
    | BulkReady
    | UserRequest
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
class WelcomeAgent:
    """Answer the handshake with `welcome {window[, bulk_threshold]}` (before anything else this
    output sends the agent); `bulk_threshold` 0: every result comes at once."""

    agent: str
    window: int
    bulk_threshold: int = 0


@dataclass(frozen=True)
class SendTasks:
    """Send these runs of tasks to the agent, in order. `rates` holds the processes whose private
    inputs were admitted on a limited subnet, with the rate (bits per second) admission reserved
    for them: the driver writes those inputs no faster (llic.netadmit)."""

    agent: str
    tasks: tuple[Assignment, ...]
    rates: tuple[tuple[int, float], ...] = ()

    def rate_of(self, process: int) -> float | None:
        """The reserved rate of `process`'s inputs; None: as fast as the link goes."""
        return dict(self.rates).get(process)


@dataclass(frozen=True)
class SendNoMoreTasks:
    """Tell the agent that no more tasks come (`no_more_tasks`): it exits once its results are
    back."""

    agent: str


@dataclass(frozen=True)
class CloseConnection:
    """Deliver what is queued for the agent, then close its connection."""

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


@dataclass(frozen=True)
class CancelTask:
    """Tell the agent to stop run `attempt` of `process` (held or removed while it ran): it kills
    the process, or drops it if it has not started; its result, if any, is stale."""

    agent: str
    process: int
    attempt: int


@dataclass(frozen=True)
class WriteEvents:
    """Append these task events to the tasks' job event logs (the submit file's `log`), in order."""

    events: tuple[TaskEvent, ...]


@dataclass(frozen=True)
class SaveState:
    """Write the state file now, before the actions after it. First in an output when the save
    must precede acting (a new run number, a newly learned agent job); alone from `on_timer`
    when changes have waited STATE_SAVE_INTERVAL; last from `finish`."""


@dataclass(frozen=True)
class Reschedule:
    """Ask the schedd for a negotiation cycle (condor_reschedule): agents wait for slots."""


@dataclass(frozen=True)
class PollQueue:
    """Read which of this master's agent jobs are alive; answer with QueueSnapshot or
    QueuePollFailed."""


@dataclass(frozen=True)
class CountSlots:
    """Count the pool's slots that match the agents' requirements; answer with SlotsCounted. How
    far the master may grow its agents (seed §3.7 step 4, asked again as the pool changes)."""


@dataclass(frozen=True)
class LetAgentsLeave:
    """Wait until these agent jobs have left the queue by themselves, or `grace` seconds: agents
    told no_more_tasks exit once their results are back, and a removal before that would cut
    their output and log short. From `finish`, before its final RemoveAgents."""

    job_ids: tuple[str, ...]
    grace: float


Action = (
    SubmitAgent
    | RemoveAgents
    | WelcomeAgent
    | SendTasks
    | SendNoMoreTasks
    | CloseConnection
    | RefuseAgent
    | GrantBulk
    | SaveState
    | Reschedule
    | PollQueue
    | CountSlots
    | LetAgentsLeave
    | CancelTask
    | WriteEvents
)


@dataclass
class Output:
    """What one entry point of the core decided: actions to carry out in order, notes for the
    log, and when the core wants `on_timer` called next (None: no timer)."""

    actions: list[Action] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # for the log: what was decided and why
    wakeup: float | None = None

    def extend(self, other: Output) -> None:
        """Append another output's actions and notes (its wakeup is the caller's to set)."""
        self.actions += other.actions
        self.notes += other.notes

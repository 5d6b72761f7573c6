"""What becomes of a task when it exits and while it waits, runs or is held: HTCondor's job
policy (user_job_policy.cpp, UserPolicy::AnalyzePolicy) as the pure master core asks it.

The core hands a `TaskPolicy` the facts it knows about a task (`JobFacts`: the job ad's
dynamic attributes, JobStatus, NumJobStarts, NumJobCompletions, ExitCode...) and gets a
`Decision`; the policy that evaluates the submit file's expressions is llic/job_policy.py
(HTCondor's ClassAd library). `DefaultPolicy` is HTCondor's behaviour without any policy
command: a task that ran is done, whatever its exit code; nothing happens periodically.

The order is HTCondor's: periodically, a task that is not held is held if PeriodicHold is true,
a held one (not held by the user) released if PeriodicRelease is true, then any removed if
PeriodicRemove is true; at exit the periodic checks come first, then OnExitHold (held), then
OnExitRemove (done if true or undefined, run again if false).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

# the attributes of Task.policy that are ClassAd expressions (SubmitEventNotes is text)
EXPRESSIONS = (
    "OnExitRemove",
    "OnExitHold",
    "OnExitHoldReason",
    "OnExitHoldSubCode",
    "PeriodicHold",
    "PeriodicHoldReason",
    "PeriodicHoldSubCode",
    "PeriodicRelease",
    "PeriodicRemove",
    "JobMaxRetries",
    "JobSuccessExitCode",
)

# JobStatus values (condor's job status numbers)
IDLE = 1
RUNNING = 2
REMOVED = 3
COMPLETED = 4
HELD = 5

# HoldReasonCode values (condor_holdcodes.h)
HOLD_USER_REQUEST = 1
HOLD_JOB_POLICY = 3
HOLD_JOB_POLICY_UNDEFINED = 5
HOLD_SUBMITTED_ON_HOLD = 15


class Verdict(enum.Enum):
    """What the policy says to do with a task."""

    DONE = "done"  # it exited and leaves the queue: completed
    REQUEUE = "requeue"  # it exited and runs again (OnExitRemove false)
    HOLD = "hold"
    RELEASE = "release"
    REMOVE = "remove"  # aborted


@dataclass(frozen=True)
class Decision:
    """A verdict and, for HOLD, REMOVE and RELEASE, why (the text condor writes in HoldReason
    and the job event log), with the hold code and subcode."""

    verdict: Verdict
    reason: str = ""
    code: int = 0
    subcode: int = 0


DONE = Decision(Verdict.DONE)


@dataclass(frozen=True)
class JobFacts:
    """A task's job ad as far as llic knows it, in condor's terms (times are the master's clock,
    seconds since the epoch)."""

    cluster: int
    process: int
    status: int  # JobStatus: IDLE, RUNNING, HELD (COMPLETED/REMOVED are never asked about)
    starts: int  # NumJobStarts: runs handed to an agent
    completions: int  # NumJobCompletions: runs that exited (this one included at exit)
    qdate: float  # QDate: when the master first started
    entered: float  # EnteredCurrentStatus
    now: float  # CurrentTime
    exit_code: int | None = None  # ExitCode (at exit, unless killed by a signal)
    exit_signal: int | None = None  # ExitSignal (at exit, when killed by one)
    run_started: float | None = None  # JobCurrentStartDate
    wall_clock: float = 0.0  # RemoteWallClockTime: seconds run so far
    hold_code: int = 0  # HoldReasonCode while held
    hold_subcode: int = 0


class TaskPolicy(Protocol):
    """Decides about tasks (see the module's doc); deterministic for the same facts."""

    def on_exit(self, facts: JobFacts) -> Decision:
        """A run ended (facts.completions already counts it): done, run again, held or removed."""
        ...

    def periodic(self, facts: JobFacts) -> Decision | None:
        """Now, for a task that waits, runs or is held: HOLD, RELEASE, REMOVE, or None."""
        ...

    def has_periodic(self) -> bool:
        """Whether any task has a periodic expression (else `periodic` need not be asked)."""
        ...

    def may_requeue(self) -> bool:
        """Whether a task that exits may run again (an OnExitRemove): agents then stay until no
        task runs, rather than leaving as soon as the queue is empty."""
        ...


class DefaultPolicy:
    """HTCondor's behaviour when the submit file has no policy command."""

    def on_exit(self, facts: JobFacts) -> Decision:
        """Done, whatever the exit code."""
        return DONE

    def periodic(self, facts: JobFacts) -> Decision | None:
        """Nothing."""
        return None

    def has_periodic(self) -> bool:
        """No periodic expressions."""
        return False

    def may_requeue(self) -> bool:
        """A task that exits is done."""
        return False

"""The master's task bookkeeping (seed §3.7-3.8, §3.10), as plain data with no I/O.

Every task (a process number of the master's queue block) is in exactly one state:

- queued: waiting in the master's queue (front first);
- running: handed to one chef's agent, as run number `attempt` (each hand-out gets a new number,
  so a result from an earlier run is recognised as stale);
- done: a run ended and the job's policy let it leave (without policy commands, whatever its
  exit code: HTCondor too calls a job that exited non-zero completed); recorded once and never
  overwritten;
- held: the policy held it (on_exit_hold, periodic_hold), it was submitted on hold, or the user
  held it; it waits until released (then queued) or removed;
- removed: the policy (periodic_remove) or the user removed it; for good;
- failed: the agent could not prepare or start it `max_attempts` times; failed for good.

When a run ends, the caller's `decide` (the job's policy, llic/task_policy.py) says whether the
task is done, runs again (`max_retries`, `on_exit_remove` false: it goes back to the front of the
queue), is held or removed; `hold`, `release` and `remove` are the periodic policy's and the
user's. Every change a job event log records is kept in `events` (TaskEvent: execute,
terminated, requeued, evicted, held, released, aborted) for the master to write, when
`log_events` is set.

A run that fails goes back to the front of the queue and is not handed to an agent that already
failed it while some other agent able to take tasks has not (§3.10: "in hope that another agent
will run it successfully"). A run lost with its agent (connection broken, agent gone from the
queue) goes back to the front too, and does not count as a failure: the task is not to blame.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from llic.task import TaskResult
from llic.task_policy import DONE, Decision, Verdict


class TaskState(StrEnum):
    """Where one task is (see the module's doc)."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    HELD = "held"
    REMOVED = "removed"


FINAL = (TaskState.DONE, TaskState.FAILED, TaskState.REMOVED)  # states a task never leaves


class EventKind(StrEnum):
    """What happened to a task, as a job event log says it (the event's number in comments)."""

    EXECUTE = "execute"  # 001: handed to a running agent
    TERMINATED = "terminated"  # 005: ended, and left the queue
    REQUEUED = "requeued"  # 004 with "terminated and was requeued": ended, runs again
    EVICTED = "evicted"  # 004: the run was lost (agent gone) or could not start; runs again
    HELD = "held"  # 012
    RELEASED = "released"  # 013
    ABORTED = "aborted"  # 009: removed, or failed for good


@dataclass(frozen=True)
class TaskEvent:
    """One event of one task: what a job event log records. `result` is the run's, for
    TERMINATED and REQUEUED; `reason` the text of EVICTED, HELD, RELEASED, ABORTED (and the
    agent's address for EXECUTE); `code`/`subcode` a hold's."""

    process: int
    kind: EventKind
    time: float
    result: TaskResult | None = None
    reason: str = ""
    code: int = 0
    subcode: int = 0


@dataclass(frozen=True, order=True)
class Assignment:
    """One run of one task: what a chef sends (the driver takes the task record from the plan)."""

    process: int
    attempt: int


@dataclass(slots=True)
class TaskRecord:
    """One task's whole story; what the state file stores per task."""

    process: int
    state: TaskState = TaskState.QUEUED
    attempt: int = 0  # runs handed out so far; while running, the number of the current run
    failures: int = 0
    chef: int | None = None  # running: whose agent holds it
    # chefs whose agents failed it (a frozenset: the empty one is shared by every record, which
    # matters for a 100,000-task master)
    failed_on: frozenset[int] = frozenset()
    outcome: TaskResult | None = None  # done: its result; failed: the last failure (TaskResult.kept())
    completed: float | None = None  # master's clock when done, failed or removed for good
    # results recorded for this task (its failures and exits): `outcome` keeps only the last, so
    # this count is what shows that no result was recorded twice
    recorded: int = 0
    completions: int = 0  # runs that exited (NumJobCompletions)
    hold_reason: str | None = None  # held: why (HoldReason), with condor's code and subcode
    hold_code: int = 0
    hold_subcode: int = 0
    entered: float | None = None  # when it entered its state (EnteredCurrentStatus); None: at start
    wall_clock: float = 0.0  # seconds its runs took (RemoteWallClockTime)
    # running: when it was handed to a running agent (JobCurrentStartDate); not in the state file,
    # since a restarted master runs such a task again
    run_started: float | None = field(default=None, compare=False)

    def copy(self) -> TaskRecord:
        """A copy that shares nothing mutable with this one (for a snapshot): its fields are
        immutable values, so a field-by-field copy (dataclasses.replace ran __init__ per record,
        a fifth of the master's time per result in a flood of short tasks)."""
        new = object.__new__(TaskRecord)
        for name in _RECORD_FIELDS:
            setattr(new, name, getattr(self, name))
        return new


_RECORD_FIELDS = tuple(f.name for f in dataclasses.fields(TaskRecord))


@dataclass(frozen=True)
class TaskCounts:
    """How many tasks are in each state."""

    total: int
    queued: int
    running: int
    done: int
    failed: int
    held: int = 0
    removed: int = 0

    @property
    def unfinished(self) -> int:
        """Neither done, failed nor removed for good (held ones wait for a release)."""
        return self.queued + self.running + self.held

    def __str__(self) -> str:
        held = f", {self.held} held" if self.held else ""
        removed = f", {self.removed} removed" if self.removed else ""
        return (
            f"{self.total} tasks: {self.done} done, {self.failed} failed, {self.running} running,"
            f" {self.queued} queued{held}{removed}"
        )


Decide = Callable[[TaskRecord, TaskResult, float], Decision]
"""What becomes of a task whose run ended: (its record, the result, now) -> the policy's decision
(the record's `completions` already counts the run)."""


class TaskBook:
    """All tasks of one master. Results are accepted once, from the run that is current."""

    def __init__(self, processes: Iterable[int], max_attempts: int) -> None:
        self.max_attempts = max_attempts
        self._tasks: dict[int, TaskRecord] = {}
        self._queue: deque[int] = deque()
        self._by_chef: dict[int, set[int]] = {}
        self._counts = dict.fromkeys(TaskState, 0)
        self.retries = 0  # failed runs put back in the queue
        self.lost = 0  # runs lost with their agent
        self.ignored = 0  # results refused: duplicate, stale or unknown
        self.requeued = 0  # runs that exited and run again by the job's policy (max_retries...)
        self.log_events = False  # keep `events` (the master writes job event logs)
        self.events: list[TaskEvent] = []
        self._touched: set[int] = set()  # records changed since take_touched (every change
        # of a record goes through _move or _start)
        for process in processes:
            if process in self._tasks:
                raise ValueError(f"process {process} given twice")
            self._tasks[process] = TaskRecord(process)
            self._queue.append(process)
        self._counts[TaskState.QUEUED] = len(self._tasks)

    @classmethod
    def from_records(
        cls, records: Iterable[TaskRecord], max_attempts: int, counters: Mapping[str, int] | None = None
    ) -> TaskBook:
        """Rebuild after a master restart: done and failed tasks are kept as they were; tasks
        that were running go back to the front of the queue (their agents belong to the dead
        master and are removed), then the queued ones in their order."""
        book = cls((), max_attempts)
        back: list[int] = []
        for rec in records:
            if rec.process in book._tasks:
                raise ValueError(f"process {rec.process} given twice")
            rec = rec.copy()
            rec.chef = None
            if rec.state is TaskState.RUNNING:
                rec.state = TaskState.QUEUED
                book._queue.append(rec.process)
                book.lost += 1
            elif rec.state is TaskState.QUEUED:
                back.append(rec.process)
            book._tasks[rec.process] = rec
            book._counts[rec.state] += 1
        book._queue.extend(back)
        for name, value in (counters or {}).items():
            if name in ("retries", "lost", "ignored", "requeued"):
                setattr(book, name, getattr(book, name) + value)
        return book

    # ------------------------------------------------------------------ reading

    def __len__(self) -> int:
        return len(self._tasks)

    def __getitem__(self, process: int) -> TaskRecord:
        return self._tasks[process]

    def __contains__(self, process: object) -> bool:
        return process in self._tasks

    def records(self) -> list[TaskRecord]:
        """Every task, queued ones in queue order first (so a reload keeps the order)."""
        queued = [self._tasks[p] for p in self._queue]
        return queued + [r for r in self._tasks.values() if r.state is not TaskState.QUEUED]

    def counts(self) -> TaskCounts:
        """How many tasks are in each state, now."""
        c = self._counts
        return TaskCounts(
            len(self._tasks),
            c[TaskState.QUEUED],
            c[TaskState.RUNNING],
            c[TaskState.DONE],
            c[TaskState.FAILED],
            c[TaskState.HELD],
            c[TaskState.REMOVED],
        )

    def counters(self) -> dict[str, int]:
        """Runs retried, lost with their agent, run again by the policy, and results ignored
        (the state file keeps them)."""
        return {
            "retries": self.retries,
            "lost": self.lost,
            "ignored": self.ignored,
            "requeued": self.requeued,
        }

    def in_state(self, state: TaskState) -> list[int]:
        """The processes in `state`, in process order."""
        return sorted(p for p, rec in self._tasks.items() if rec.state is state)

    @property
    def running(self) -> int:
        """How many tasks agents hold."""
        return self._counts[TaskState.RUNNING]

    @property
    def queued(self) -> int:
        """How many tasks wait in the queue."""
        return len(self._queue)

    @property
    def finished(self) -> bool:
        """Nothing queued, running or held: every task is done, failed or removed for good."""
        return not self._queue and not self._counts[TaskState.RUNNING] and not self._counts[TaskState.HELD]

    @property
    def idle(self) -> bool:
        """Nothing queued or running (held tasks may be left): no agent is needed now."""
        return not self._queue and not self._counts[TaskState.RUNNING]

    def queue(self) -> tuple[int, ...]:
        """The queued processes, front first."""
        return tuple(self._queue)

    def running_on(self, chef: int) -> frozenset[int]:
        """The processes `chef`'s agent holds."""
        return frozenset(self._by_chef.get(chef, ()))

    def held(self, chef: int) -> int:
        """How many tasks `chef`'s agent holds (len(running_on(chef)), without the copy)."""
        return len(self._by_chef.get(chef, ()))

    def can_take(self, chef: int, others: Collection[int] = ()) -> bool:
        """Would take(chef, 1, others) give something?"""
        return any(not self._avoid(self._tasks[p], chef, others) for p in self._queue)

    # ------------------------------------------------------------------ changing

    def take(
        self,
        chef: int,
        n: int,
        others: Collection[int] = (),
        admit: Callable[[int], bool] | None = None,
        *,
        now: float | None = None,
        host: str = "",
    ) -> list[Assignment]:
        """Hand up to n queued tasks, front first, to `chef`'s agent. A task this chef's agents
        already failed is left for another chef, as long as one of `others` (the chefs that can
        still take tasks) has not failed it too. A task `admit` refuses (network admission,
        llic.netadmit) keeps its place in the queue, so it goes first once admitted. With `now`
        the agent is running and the tasks start now (on `host`); without, they wait for the
        agent (`started`)."""
        picked: list[Assignment] = []
        skipped: list[int] = []
        while self._queue and len(picked) < n:
            process = self._queue.popleft()
            rec = self._tasks[process]
            if self._avoid(rec, chef, others) or (admit is not None and not admit(process)):
                skipped.append(process)
                continue
            rec.attempt += 1
            self._move(rec, TaskState.RUNNING, chef)
            picked.append(Assignment(process, rec.attempt))
            if now is not None:
                self._start(rec, now, host)
        self._queue.extendleft(reversed(skipped))
        return picked

    def started(self, chef: int, now: float, host: str = "") -> None:
        """`chef`'s agent connected: the tasks it was given with its job start now."""
        for process in sorted(self._by_chef.get(chef, ())):
            rec = self._tasks[process]
            if rec.run_started is None:
                self._start(rec, now, host)

    def _start(self, rec: TaskRecord, now: float, host: str) -> None:
        self._touched.add(rec.process)
        rec.run_started = now
        rec.entered = now
        self._event(rec, EventKind.EXECUTE, now, reason=host)

    def check(self, chef: int, process: int, attempt: int) -> str | None:
        """Why a result from `chef` for (process, attempt) would be ignored; None: it counts."""
        rec = self._tasks.get(process)
        if rec is None:
            return f"result for unknown process {process}"
        if rec.state is TaskState.DONE:
            return f"duplicate result for process {process}: already done"
        if rec.state is TaskState.FAILED:
            return f"result for process {process}, already failed for good"
        if rec.state in (TaskState.HELD, TaskState.REMOVED):
            return f"result for process {process} run {attempt}, {rec.state} meanwhile"
        if rec.state is not TaskState.RUNNING or rec.chef != chef or rec.attempt != attempt:
            return f"stale result for process {process} run {attempt} (current run {rec.attempt})"
        return None

    def complete(self, chef: int, result: TaskResult, now: float, decide: Decide | None = None) -> bool:
        """Record a result (what TaskResult.kept() keeps of it); False (and counted in `ignored`)
        when check() refuses it. A run that ran is judged by `decide` (default: done): done,
        run again (front of the queue), held or removed. A failed run goes back to the front of
        the queue, or fails the task for good after max_attempts."""
        process = result.process
        if self.check(chef, process, result.attempt) is not None:
            self.ignored += 1
            return False
        rec = self._tasks[process]
        rec.outcome = kept = result.kept()
        rec.recorded += 1
        rec.run_started = None
        if result.ok:
            rec.completions += 1
            rec.wall_clock += result.run_time
            decision = decide(rec, result, now) if decide is not None else DONE
            self._exited(rec, result, decision, now)
            return True
        rec.failures += 1
        rec.failed_on = rec.failed_on | {chef}
        why = f"the run could not start: {result.status}: {kept.error or 'no reason given'}"
        if rec.failures >= self.max_attempts:
            rec.completed = now
            self._move(rec, TaskState.FAILED, now=now)
            self._event(rec, EventKind.ABORTED, now, reason=f"failed {rec.failures} times; {why}")
        else:
            self.retries += 1
            self._move(rec, TaskState.QUEUED, now=now)
            self._queue.appendleft(process)
            self._event(rec, EventKind.EVICTED, now, reason=why)
        return True

    def _exited(self, rec: TaskRecord, result: TaskResult, decision: Decision, now: float) -> None:
        verdict = decision.verdict
        if verdict is Verdict.REQUEUE:
            self.requeued += 1
            self._move(rec, TaskState.QUEUED, now=now)
            self._queue.appendleft(rec.process)
            self._event(rec, EventKind.REQUEUED, now, result=result)
        elif verdict is Verdict.HOLD:
            self._hold(rec, decision, now)
        elif verdict is Verdict.REMOVE:
            rec.completed = now
            self._move(rec, TaskState.REMOVED, now=now)
            self._event(rec, EventKind.ABORTED, now, reason=decision.reason)
        else:
            rec.completed = now
            self._move(rec, TaskState.DONE, now=now)
            self._event(rec, EventKind.TERMINATED, now, result=result)

    def hold(self, process: int, decision: Decision, now: float) -> int | None:
        """Hold a queued or running task (the policy or the user); returns the chef whose agent
        was running it (it must stop it), else None. A task in another state is left alone."""
        rec = self._tasks[process]
        if rec.state not in (TaskState.QUEUED, TaskState.RUNNING):
            return None
        chef = rec.chef
        if rec.state is TaskState.QUEUED:
            self._queue.remove(process)
        rec.run_started = None
        self._hold(rec, decision, now)
        return chef

    def _hold(self, rec: TaskRecord, decision: Decision, now: float) -> None:
        rec.hold_reason, rec.hold_code, rec.hold_subcode = decision.reason, decision.code, decision.subcode
        self._move(rec, TaskState.HELD, now=now)
        self._event(
            rec, EventKind.HELD, now, reason=decision.reason, code=decision.code, subcode=decision.subcode
        )

    def release(self, process: int, now: float, reason: str = "") -> bool:
        """A held task goes back to the end of the queue; False if it is not held."""
        rec = self._tasks[process]
        if rec.state is not TaskState.HELD:
            return False
        rec.hold_reason, rec.hold_code, rec.hold_subcode = None, 0, 0
        self._move(rec, TaskState.QUEUED, now=now)
        self._queue.append(process)
        self._event(rec, EventKind.RELEASED, now, reason=reason)
        return True

    def remove(self, process: int, now: float, reason: str = "") -> tuple[bool, int | None]:
        """Remove a queued, running or held task for good: (whether it was removed, the chef
        whose agent was running it)."""
        rec = self._tasks[process]
        if rec.state in FINAL:
            return False, None
        chef = rec.chef
        if rec.state is TaskState.QUEUED:
            self._queue.remove(process)
        rec.run_started = None
        rec.completed = now
        self._move(rec, TaskState.REMOVED, now=now)
        self._event(rec, EventKind.ABORTED, now, reason=reason)
        return True, chef

    def requeue_chef(self, chef: int, now: float | None = None, reason: str = "") -> list[int]:
        """Every task `chef`'s agent holds back to the front of the queue (lowest first): the
        agent is gone. Returns them."""
        processes = sorted(self._by_chef.get(chef, ()))
        for process in processes:
            rec = self._tasks[process]
            started = rec.run_started
            rec.run_started = None
            self._move(rec, TaskState.QUEUED, now=now)
            if started is not None and now is not None:
                self._event(rec, EventKind.EVICTED, now, reason=reason)
        self._queue.extendleft(reversed(processes))
        self.lost += len(processes)
        return processes

    # ------------------------------------------------------------------ internals

    @staticmethod
    def _avoid(rec: TaskRecord, chef: int, others: Collection[int]) -> bool:
        return chef in rec.failed_on and any(o not in rec.failed_on for o in others if o != chef)

    def _event(self, rec: TaskRecord, kind: EventKind, now: float, **details: object) -> None:
        if self.log_events:
            self.events.append(TaskEvent(rec.process, kind, now, **details))  # type: ignore[arg-type]

    def take_touched(self) -> set[int]:
        """The processes whose records changed since the last call (the state file's writer
        encodes only their lines again)."""
        touched, self._touched = self._touched, set()
        return touched

    def take_events(self) -> list[TaskEvent]:
        """The events since the last call, oldest first."""
        events, self.events = self.events, []
        return events

    def _move(
        self, rec: TaskRecord, state: TaskState, chef: int | None = None, now: float | None = None
    ) -> None:
        self._touched.add(rec.process)
        if now is not None:
            rec.entered = now
        if rec.chef is not None:
            held = self._by_chef[rec.chef]
            held.discard(rec.process)
            if not held:
                del self._by_chef[rec.chef]
        self._counts[rec.state] -= 1
        self._counts[state] += 1
        rec.state, rec.chef = state, chef
        if chef is not None:
            self._by_chef.setdefault(chef, set()).add(rec.process)

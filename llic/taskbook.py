"""The master's task bookkeeping (seed §3.7-3.8, §3.10), as plain data with no I/O.

Every task (a process number of the master's queue block) is in exactly one state:

- queued: waiting in the master's queue (front first);
- running: handed to one chef's agent, as run number `attempt` (each hand-out gets a new number,
  so a result from an earlier run is recognised as stale);
- done: a result came back (whatever the job's exit code: HTCondor too calls a job that exited
  non-zero completed); recorded once and never overwritten;
- failed: the agent could not prepare or start it `max_attempts` times; failed for good.

A run that fails goes back to the front of the queue and is not handed to an agent that already
failed it while some other agent able to take tasks has not (§3.10: "in hope that another agent
will run it successfully"). A run lost with its agent (connection broken, agent gone from the
queue) goes back to the front too, and does not count as a failure: the task is not to blame.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from llic.task import TaskResult


class TaskState(StrEnum):
    """Where one task is (see the module's doc)."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True, order=True)
class Assignment:
    """One run of one task: what a chef sends (the driver takes the task record from the plan)."""

    process: int
    attempt: int


@dataclass
class TaskRecord:
    """One task's whole story; what the state file stores per task."""

    process: int
    state: TaskState = TaskState.QUEUED
    attempt: int = 0  # runs handed out so far; while running, the number of the current run
    failures: int = 0
    chef: int | None = None  # running: whose agent holds it
    failed_on: set[int] = field(default_factory=set)  # chefs whose agents failed it
    outcome: TaskResult | None = None  # done: its result; failed: the last failure (TaskResult.kept())
    completed: float | None = None  # master's clock when done or failed for good
    # results recorded for this task (its failures, plus its one success when done): `outcome`
    # keeps only the last, so this count is what shows that no result was recorded twice
    recorded: int = 0

    def copy(self) -> TaskRecord:
        """A copy that shares nothing mutable with this one (for a snapshot)."""
        return TaskRecord(
            self.process,
            self.state,
            self.attempt,
            self.failures,
            self.chef,
            set(self.failed_on),
            self.outcome,
            self.completed,
            self.recorded,
        )


@dataclass(frozen=True)
class TaskCounts:
    """How many tasks are in each state."""

    total: int
    queued: int
    running: int
    done: int
    failed: int

    @property
    def unfinished(self) -> int:
        """Neither done nor failed for good."""
        return self.queued + self.running

    def __str__(self) -> str:
        return (
            f"{self.total} tasks: {self.done} done, {self.failed} failed, {self.running} running,"
            f" {self.queued} queued"
        )


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
            if name in ("retries", "lost", "ignored"):
                setattr(book, name, getattr(book, name) + value)
        return book

    # ------------------------------------------------------------------ reading

    def __len__(self) -> int:
        return len(self._tasks)

    def __getitem__(self, process: int) -> TaskRecord:
        return self._tasks[process]

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
        )

    def counters(self) -> dict[str, int]:
        """Runs retried, lost with their agent, and results ignored (the state file keeps them)."""
        return {"retries": self.retries, "lost": self.lost, "ignored": self.ignored}

    @property
    def queued(self) -> int:
        """How many tasks wait in the queue."""
        return len(self._queue)

    @property
    def finished(self) -> bool:
        """Nothing queued or running: every task is done or failed for good."""
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
    ) -> list[Assignment]:
        """Hand up to n queued tasks, front first, to `chef`'s agent. A task this chef's agents
        already failed is left for another chef, as long as one of `others` (the chefs that can
        still take tasks) has not failed it too. A task `admit` refuses (network admission,
        llic.netadmit) keeps its place in the queue, so it goes first once admitted."""
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
        self._queue.extendleft(reversed(skipped))
        return picked

    def check(self, chef: int, process: int, attempt: int) -> str | None:
        """Why a result from `chef` for (process, attempt) would be ignored; None: it counts."""
        rec = self._tasks.get(process)
        if rec is None:
            return f"result for unknown process {process}"
        if rec.state is TaskState.DONE:
            return f"duplicate result for process {process}: already done"
        if rec.state is TaskState.FAILED:
            return f"result for process {process}, already failed for good"
        if rec.state is not TaskState.RUNNING or rec.chef != chef or rec.attempt != attempt:
            return f"stale result for process {process} run {attempt} (current run {rec.attempt})"
        return None

    def complete(self, chef: int, result: TaskResult, now: float) -> bool:
        """Record a result (what TaskResult.kept() keeps of it); False (and counted in `ignored`)
        when check() refuses it. A failed run goes back to the front of the queue, or fails the
        task for good after max_attempts."""
        process = result.process
        if self.check(chef, process, result.attempt) is not None:
            self.ignored += 1
            return False
        rec = self._tasks[process]
        rec.outcome = result.kept()
        rec.recorded += 1
        if result.ok:
            rec.completed = now
            self._move(rec, TaskState.DONE)
            return True
        rec.failures += 1
        rec.failed_on.add(chef)
        if rec.failures >= self.max_attempts:
            rec.completed = now
            self._move(rec, TaskState.FAILED)
        else:
            self.retries += 1
            self._move(rec, TaskState.QUEUED)
            self._queue.appendleft(process)
        return True

    def requeue_chef(self, chef: int) -> list[int]:
        """Every task `chef`'s agent holds back to the front of the queue (lowest first): the
        agent is gone. Returns them."""
        processes = sorted(self._by_chef.get(chef, ()))
        for process in processes:
            self._move(self._tasks[process], TaskState.QUEUED)
        self._queue.extendleft(reversed(processes))
        self.lost += len(processes)
        return processes

    # ------------------------------------------------------------------ internals

    @staticmethod
    def _avoid(rec: TaskRecord, chef: int, others: Collection[int]) -> bool:
        return chef in rec.failed_on and any(o not in rec.failed_on for o in others if o != chef)

    def _move(self, rec: TaskRecord, state: TaskState, chef: int | None = None) -> None:
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

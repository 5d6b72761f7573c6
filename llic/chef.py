"""Chefs and the master's decisions over them (seed §3.7, §3.8, §3.9.4, §3.10), as pure state
machines.

A `Chef` looks after one agent at a time: created → launched (its agent job submitted) → running
(the agent connected) → terminated (it said no_more_tasks and got every result back), or, after a
failure (connection broken, agent gone from the schedd queue, too many failed tasks, submission
failed), back through created to launched with a new agent, until it has recovered
NUM_AGENT_RECOVERIES times: then unrecoverable.

`MasterCore` owns the chefs and the `TaskBook` and makes §3.7's main-loop decisions. The trio
driver (llic/master.py) is a thin loop around it: it feeds events (`MasterEvent`) and the current
time to `handle`, carries out the returned actions (submit an agent, send tasks, close a
connection, condor_rm), and saves the state when `dirty`. Nothing here reads a clock, sleeps,
touches a socket or calls HTCondor, so every interleaving can be tested directly.

Agents are named `"<run>.<chef>.<launch>"` (run: how many times this master has started, counting
restarts): each launch of a chef gets a new name, so an agent from an earlier launch or an
earlier run of the master (which the master has already given up on) is refused when it connects
and its results and errors are ignored.

What the driver must do for the guarantees to hold across master crashes: save the state when
`save_now` is set (after `start`, before carrying out its actions, so that a run number is never
used twice; and as soon as an agent's job id is learned, so that no agent job is forgotten) and
otherwise when `dirty`, at most STATE_SAVE_INTERVAL apart. An agent job whose submission was under
way when the master died is unknown to the saved state: submit agents with an attribute naming
the master and also remove by it, to catch those.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from llic.config import LlicConfig
from llic.netadmit import IN, Gate, NetAdmit, Transfer
from llic.taskbook import Assignment, TaskBook, TaskOutcome, TaskState


class ChefState(StrEnum):
    CREATED = "created"
    LAUNCHED = "launched"
    RUNNING = "running"
    TERMINATED = "terminated"
    UNRECOVERABLE = "unrecoverable"


class MasterStatus(StrEnum):
    RUNNING = "running"
    DONE = "done"  # every task done or failed for good
    GAVE_UP = "gave_up"  # tasks left, every chef unrecoverable
    STOPPED = "stopped"  # finish() before either (the master was told to stop)


def agent_name(run: int, chef: int, launch: int) -> str:
    return f"{run}.{chef}.{launch}"


def parse_agent_name(agent: str) -> tuple[int, int, int] | None:
    """(run, chef, launch), or None for anything else."""
    parts = agent.split(".")
    if len(parts) != 3 or not all(p.isdigit() and len(p) < 10 for p in parts):
        return None
    run, chef, launch = map(int, parts)
    return run, chef, launch


# ----------------------------------------------------------------------------- events


@dataclass(frozen=True)
class Launch:
    """The master launches a chef (created or terminated): submit a new agent."""

    reason: str = "start"


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
class AgentVanished:
    """The agent's job is no longer alive in the schedd queue (MasterCore derives this from a
    QueueSnapshot)."""

    agent: str


@dataclass(frozen=True)
class Terminate:
    """All done, or the master stops: close the agent's connection (MasterCore.finish removes
    every agent job)."""

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


_AgentEvent = AgentSubmitted | SubmitFailed | AgentConnected | ResultReceived | ConnectionBroken
ChefEvent = Launch | _AgentEvent | AgentVanished | Terminate
MasterEvent = _AgentEvent | QueueSnapshot | TransferDone | BulkReady


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


# ----------------------------------------------------------------------------- the chef


@dataclass
class ChefRecord:
    """A chef's persistent facts: what the state file keeps."""

    index: int
    state: ChefState = ChefState.CREATED
    launches: int = 0
    recoveries: int = 0
    failures: int = 0  # failed tasks reported by the current agent
    no_more_sent: bool = False
    job_id: str | None = None  # the current agent's job
    job_ids: list[str] = field(default_factory=list)  # every agent job it ever submitted


class Chef:
    """One chef (§3.8). `handle` changes its state and the task book and returns actions."""

    def __init__(
        self, record: ChefRecord, config: LlicConfig, run: int = 1, net: NetAdmit | None = None
    ) -> None:
        self.rec = record
        self.config = config
        self.run = run  # the master's run, part of the agent's name
        self.net = net  # network admission for tasks whose inputs travel (None: none)
        self.now = 0.0  # the time of the event being handled (for admission)

    @property
    def index(self) -> int:
        return self.rec.index

    @property
    def state(self) -> ChefState:
        return self.rec.state

    @property
    def agent(self) -> str:
        return agent_name(self.run, self.rec.index, self.rec.launches)

    @property
    def accepting(self) -> bool:
        """Its agent can still be given tasks (now, or once it connects)."""
        s = self.rec.state
        return s is ChefState.LAUNCHED or (s is ChefState.RUNNING and not self.rec.no_more_sent)

    @property
    def active(self) -> bool:
        return self.rec.state in (ChefState.LAUNCHED, ChefState.RUNNING)

    def handle(self, event: ChefEvent, now: float, book: TaskBook, others: Collection[int]) -> Output:
        """`others`: the chefs that can take tasks (see TaskBook.take; this chef is left out
        there)."""
        out = Output()
        s = self.rec.state
        self.now = now
        match event:
            case Launch():
                if s in (ChefState.CREATED, ChefState.TERMINATED):
                    self._launch(book, others, out)
                    out.notes.append(f"chef {self.index}: launching agent {self.agent} ({event.reason})")
            case AgentSubmitted(job_id=job_id):
                if job_id not in self.rec.job_ids:
                    self.rec.job_ids.append(job_id)
                if s in (ChefState.LAUNCHED, ChefState.RUNNING):
                    self.rec.job_id = job_id
                else:  # this launch failed or ended before the schedd answered
                    out.actions.append(RemoveAgents((job_id,), f"agent {event.agent}'s chef is {s}"))
            case SubmitFailed(reason=reason):
                if s is ChefState.LAUNCHED and self.rec.job_id is None:
                    self._recover(f"submission failed: {reason}", book, others, out)
            case AgentConnected():
                if s is ChefState.LAUNCHED:
                    self.rec.state = ChefState.RUNNING
                    out.notes.append(f"chef {self.index}: agent {self.agent} connected")
                    self.fill(book, others, out)
                else:
                    reason = "already connected" if s is ChefState.RUNNING else f"chef is {s}"
                    out.actions.append(RefuseAgent(event.agent, reason))
            case ResultReceived(process=process, attempt=attempt, outcome=outcome):
                if s is not ChefState.RUNNING:
                    out.notes.append(f"chef {self.index}: result for {process} while {s}: ignored")
                    return out
                why = book.check(self.index, process, attempt)
                if why is not None:
                    book.complete(self.index, process, attempt, outcome, now)  # counts it as ignored
                    out.notes.append(f"chef {self.index}: {why}: ignored")
                    return out
                book.complete(self.index, process, attempt, outcome, now)
                if not outcome.ok:
                    self.rec.failures += 1
                    state = book[process].state
                    out.notes.append(
                        f"chef {self.index}: process {process} run {attempt} {outcome.status}"
                        f" on {outcome.host or '?'}: {outcome.error or 'no reason given'};"
                        f" {'failed for good' if state is TaskState.FAILED else 'queued again'}"
                    )
                    if self.rec.failures >= self.config.max_task_failures:
                        self._recover(f"{self.rec.failures} failed tasks", book, others, out)
                        return out
                self.fill(book, others, out)
            case ConnectionBroken(reason=reason):
                if s is ChefState.RUNNING:
                    self._recover(f"connection broken: {reason}", book, others, out)
            case AgentVanished():
                if s in (ChefState.LAUNCHED, ChefState.RUNNING):
                    self._recover("agent job left the schedd queue", book, others, out)
            case Terminate(reason=reason):
                if s is ChefState.RUNNING:
                    out.actions.append(CloseConnection(self.agent, reason))
                if s in (ChefState.LAUNCHED, ChefState.RUNNING, ChefState.CREATED):
                    book.requeue_chef(self.index)
                    self.rec.state = ChefState.TERMINATED
        return out

    def fill(self, book: TaskBook, others: Collection[int], out: Output) -> None:
        """Keep WINDOW_SIZE tasks at the running agent (§3.9.4); when the queue cannot fill the
        window, send no_more_tasks (§3.8 4.b); when that is said and every result is back,
        terminate."""
        rec = self.rec
        if rec.state is not ChefState.RUNNING:
            return
        if not rec.no_more_sent:
            space = self.config.window_size - book.held(rec.index)
            if space > 0:
                gate = None if self.net is None else Gate(self.net, self.agent, self.now)
                tasks = book.take(rec.index, space, others, gate)
                if tasks:
                    out.actions.append(SendTasks(self.agent, tuple(tasks)))
                if gate is not None and gate.waiting:
                    pass  # tasks held for network capacity: more comes when a transfer ends
                elif len(tasks) < space:
                    rec.no_more_sent = True
                    out.actions.append(SendNoMoreTasks(self.agent))
        if rec.no_more_sent and not book.held(rec.index):
            rec.state = ChefState.TERMINATED
            out.actions.append(CloseConnection(self.agent, "no more tasks for this agent"))
            out.notes.append(f"chef {rec.index}: agent {self.agent} finished its tasks")

    def _launch(self, book: TaskBook, others: Collection[int], out: Output) -> None:
        rec = self.rec
        rec.launches += 1
        rec.state = ChefState.LAUNCHED
        rec.failures = 0
        rec.no_more_sent = False
        rec.job_id = None
        initial = book.take(rec.index, self.config.initial_jobs_number, others)
        out.actions.append(SubmitAgent(self.agent, rec.index, rec.launches, tuple(initial)))

    def _recover(self, reason: str, book: TaskBook, others: Collection[int], out: Output) -> None:
        """§3.8 4.e: tasks back to the queue, connection closed, agent removed, resubmitted unless
        this chef has recovered NUM_AGENT_RECOVERIES times already."""
        rec = self.rec
        requeued = book.requeue_chef(rec.index)
        if rec.state is ChefState.RUNNING:
            out.actions.append(CloseConnection(self.agent, reason))
        if rec.job_id is not None:
            out.actions.append(RemoveAgents((rec.job_id,), f"agent {self.agent} failed: {reason}"))
        failed = self.agent
        rec.recoveries += 1
        rec.job_id = None
        note = f"chef {rec.index}: agent {failed} failed ({reason}); {len(requeued)} tasks queued again"
        if rec.recoveries > self.config.num_agent_recoveries:
            rec.state = ChefState.UNRECOVERABLE
            out.notes.append(f"{note}; unrecoverable after {rec.recoveries - 1} recoveries")
            return
        rec.state = ChefState.CREATED
        if book.finished:
            rec.state = ChefState.TERMINATED
            out.notes.append(f"{note}; nothing left to do")
            return
        self._launch(book, others, out)
        out.notes.append(
            f"{note}; recovery {rec.recoveries} of {self.config.num_agent_recoveries}: agent {self.agent}"
        )


# ----------------------------------------------------------------------------- the master


class MasterCore:
    """The master's decisions (§3.7): how many chefs, routing events to them, relaunching when
    tasks are left and no chef can take them, giving up, and the final removal of every agent
    job ever submitted (no zombies)."""

    def __init__(
        self,
        book: TaskBook,
        config: LlicConfig,
        chefs: Iterable[ChefRecord] = (),
        started: float | None = None,
        run: int = 0,
        net: NetAdmit | None = None,
    ) -> None:
        self.book = book
        self.config = config
        self.run = run  # starts so far; start() counts one more
        self.net = net if net is not None else NetAdmit()  # accounting always; limits if configured
        self.chefs = [Chef(rec, config, run, self.net) for rec in chefs]
        self._accepting = _Accepting(self.chefs)
        if [c.index for c in self.chefs] != list(range(len(self.chefs))):
            raise ValueError("chef records must be numbered 0, 1, ... in order")
        self.started = started
        self.stopped = False
        self.dirty = True  # something changed since the last save (the driver clears it)
        self.save_now = False  # save before acting on the last output (the driver clears it)

    @classmethod
    def new(cls, processes: Iterable[int], config: LlicConfig) -> MasterCore:
        return cls(TaskBook(processes, config.max_task_attempts), config)

    # ------------------------------------------------------------------ status

    @property
    def finished(self) -> bool:
        return self.book.finished

    @property
    def gave_up(self) -> bool:
        """Tasks left and every chef unrecoverable (§3.7): nothing can run them."""
        return (
            not self.book.finished
            and bool(self.chefs)
            and all(c.state is ChefState.UNRECOVERABLE for c in self.chefs)
        )

    @property
    def over(self) -> bool:
        """The driver's loop ends: call finish()."""
        return self.finished or self.gave_up or self.stopped

    @property
    def status(self) -> MasterStatus:
        if self.finished:
            return MasterStatus.DONE
        if self.gave_up:
            return MasterStatus.GAVE_UP
        return MasterStatus.STOPPED if self.stopped else MasterStatus.RUNNING

    def agent_job_ids(self) -> list[str]:
        """Every agent job any chef ever submitted, in submission order per chef."""
        return [job for chef in self.chefs for job in chef.rec.job_ids]

    def agents_by_state(self) -> dict[str, int]:
        counts = dict.fromkeys((s.value for s in ChefState), 0)
        for chef in self.chefs:
            counts[chef.state.value] += 1
        return counts

    def chef_records(self) -> list[ChefRecord]:
        return [c.rec for c in self.chefs]

    # ------------------------------------------------------------------ entry points

    def start(self, matching_slots: int, now: float) -> Output:
        """Begin, or go on after a restart. Fresh: min(matching slots, MAX_CHEFS_NUMBER, tasks)
        chefs (at least one while tasks are queued: a busy pool frees a slot eventually), all
        launched. After a restart: every agent job of the previous run is removed (its
        connection died with the old master) and the chefs that were active are launched again,
        without counting a recovery."""
        out = Output()
        if self.started is None:
            self.started = now
        self.dirty = self.save_now = True
        self.run += 1
        for chef in self.chefs:
            chef.run = self.run
        if not self.chefs:
            wanted = min(max(matching_slots, 1), self.config.max_chefs_number, self.book.queued)
            self.chefs[:] = [Chef(ChefRecord(i), self.config, self.run, self.net) for i in range(wanted)]
            out.notes.append(
                f"{len(self.book)} tasks, {self.book.queued} to run, {matching_slots} matching slots:"
                f" {wanted} agents"
            )
            for chef in self.chefs:
                out.extend(self._to_chef(chef, Launch("start"), now))
        else:
            old = self.agent_job_ids()
            if old:
                out.actions.append(RemoveAgents(tuple(old), "left by the previous run of this master"))
            again = 0
            for chef in self.chefs:
                if chef.state in (ChefState.LAUNCHED, ChefState.RUNNING, ChefState.CREATED):
                    chef.rec.state = ChefState.CREATED
                    chef.rec.job_id = None
                    if again < self.book.queued:
                        again += 1
                        out.extend(self._to_chef(chef, Launch("master restarted"), now))
            out.notes.append(f"resumed: {self.book.counts()}, {again} agents launched again")
        out.extend(self._balance(now))
        return out

    def use_net(self, net: NetAdmit) -> None:
        """Network admission and accounting from now on (the driver sets it up after restore)."""
        self.net = net
        for chef in self.chefs:
            chef.net = net

    def handle(self, event: MasterEvent, now: float) -> Output:
        if isinstance(event, TransferDone):
            subnet = self.net.agents.get(event.agent) or self.net.stats.agent_subnet.get(
                event.agent, "unknown"
            )
            transfer = Transfer(event.agent, subnet, event.direction, event.nbytes, event.start, event.end)
            self.net.transfer_done(transfer, event.process if event.direction == IN else None)
            self.dirty = True
            if event.direction == IN:
                return self._balance(now)  # its reservation ended: room for inputs or a large return
            self.net.bulk_done(event.agent, event.process, now)  # its result is in: the next one's turn
            return self._grants(Output(), now)
        if isinstance(event, BulkReady):
            if not self._current(event.agent):
                return Output()  # a superseded agent: its connection is being closed
            self.net.bulk_ready(event.agent, event.process, event.attempt, event.nbytes, now)
            self.dirty = True
            return self._grants(Output(), now)
        if isinstance(event, QueueSnapshot):
            out = Output()
            for chef in self.chefs:
                job = chef.rec.job_id
                if chef.active and job is not None and job not in event.alive_job_ids:
                    out.extend(self._to_chef(chef, AgentVanished(chef.agent), now))
            out.extend(self._balance(now))
            self.dirty = self.dirty or bool(out.actions)  # a quiet poll changes nothing
            return out
        self.dirty = True
        out = Output()
        if isinstance(event, AgentSubmitted):
            self.save_now = True
        chef, current = self._chef_of(event.agent)
        if chef is None or not current:
            return self._stale(chef, event)
        match event:
            case AgentConnected(address=address) if address:
                self.net.connect(event.agent, address)
            case ConnectionBroken():
                self.net.forget(event.agent, now)
            case ResultReceived(process=process):
                self.net.release(process)  # its inputs arrived, or it never started
                self.net.bulk_done(event.agent, process, now)
        out.extend(self._to_chef(chef, event, now))
        out.extend(self._balance(now))
        return out

    def finish(self, now: float, reason: str = "all tasks done") -> Output:
        """The end (all done, gave up, or told to stop): close every connection, put unfinished
        tasks back in the queue (a restarted master runs them), and remove every agent job ever
        submitted. Events after this only get refusals and removals."""
        out = Output()
        self.stopped = True
        self.dirty = True
        for chef in self.chefs:
            out.extend(chef.handle(Terminate(reason), now, self.book, ()))
        jobs = self.agent_job_ids()
        if jobs:
            out.actions.append(RemoveAgents(tuple(jobs), f"final cleanup: {reason}"))
        out.notes.append(f"finished ({self.status}): {self.book.counts()}; removing {len(jobs)} agent jobs")
        return out

    # ------------------------------------------------------------------ internals

    def _to_chef(self, chef: Chef, event: ChefEvent, now: float) -> Output:
        return chef.handle(event, now, self.book, self._accepting)

    def _chef_of(self, agent: str) -> tuple[Chef | None, bool]:
        """The chef an agent's name points to (None: not one of ours), and whether the agent is
        that chef's latest launch in this run (else its events are stale)."""
        parsed = parse_agent_name(agent)
        if parsed is None or parsed[1] >= len(self.chefs):
            return None, False
        chef = self.chefs[parsed[1]]
        return chef, parsed[0] == self.run and parsed[2] == chef.rec.launches and not self.stopped

    def _current(self, agent: str) -> bool:
        """`agent` is the running launch of its chef in this run."""
        chef, current = self._chef_of(agent)
        return chef is not None and current and chef.state is ChefState.RUNNING

    def _grants(self, out: Output, now: float) -> Output:
        """Bulk returns granted since the last look (and any that capacity freed just now for)
        become messages to their agents."""
        self.net.bulk.retry(now)
        for g in self.net.bulk.take_grants():
            out.actions.append(GrantBulk(g.agent, g.process, g.attempt, g.bps))
            out.notes.append(f"agent {g.agent}: large result of {g.process} ({g.nbytes} bytes) may go now")
        return out

    def _stale(self, chef: Chef | None, event: MasterEvent) -> Output:
        """An event from an agent of an earlier launch (or an unknown one, or after finish)."""
        out = Output()
        assert not isinstance(event, QueueSnapshot | TransferDone | BulkReady)
        match event:
            case AgentConnected():
                out.actions.append(RefuseAgent(event.agent, "unknown or superseded agent"))
            case AgentSubmitted(job_id=job_id):
                if chef is not None and job_id not in chef.rec.job_ids:
                    chef.rec.job_ids.append(job_id)
                out.actions.append(RemoveAgents((job_id,), f"agent {event.agent} is superseded"))
            case ResultReceived():
                self.book.ignored += 1
                out.notes.append(f"result from superseded agent {event.agent}: ignored")
            case _:
                pass
        return out

    def _balance(self, now: float) -> Output:
        """After every event: running agents with room get queued tasks; if tasks are queued but
        no chef can take them, launch created or terminated chefs again (§3.7)."""
        out = Output()
        if self.over:
            return out
        net = self.net
        net.keep_only((c.agent for c in self.chefs if c.state is ChefState.RUNNING), now)
        if net.heads:
            net.settle(self.book.queue())
        if self.book.queued:
            # issue 8 item 4: agents on the subnet with the most spare capacity choose first; among
            # equals, the one holding fewest tasks (else the lowest-numbered free agent would take
            # every transfer capacity frees, and the others on its subnet would idle)
            ready = [c for c in self.chefs if c.state is ChefState.RUNNING and c.accepting]
            ready.sort(key=lambda c: (-net.spare_of_agent(c.agent), self.book.held(c.index)))
            for chef in ready:
                chef.now = now
                chef.fill(self.book, self._accepting, out)
        queued = self.book.queued
        if queued and not any(c.accepting for c in self.chefs):
            for chef in self._relaunchable():
                if queued <= 0:
                    break
                queued -= 1
                out.extend(self._to_chef(chef, Launch("tasks left and no agent to take them"), now))
        return self._grants(out, now)

    def _relaunchable(self) -> Iterator[Chef]:
        """Created chefs, then terminated ones, those whose agents did not fail the queued tasks
        first (a new agent of the same chef may well land on the same machine)."""
        everyone = [c.index for c in self.chefs]
        yield from (c for c in self.chefs if c.state is ChefState.CREATED)
        done = [c for c in self.chefs if c.state is ChefState.TERMINATED]
        yield from sorted(done, key=lambda c: not self.book.can_take(c.index, everyone))


class _Accepting(Collection[int]):
    """The chefs that can take tasks, as of the moment it is read (TaskBook.take reads it only
    for a task the taking chef has failed, which is rare, so it is not kept up to date)."""

    def __init__(self, chefs: Sequence[Chef]) -> None:
        self._chefs = chefs

    def __iter__(self) -> Iterator[int]:
        return (c.index for c in self._chefs if c.accepting)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, index: object) -> bool:
        return any(i == index for i in self)


def unfinished(book: TaskBook) -> list[int]:
    """Processes neither done nor failed for good (for the give-up report)."""
    return [r.process for r in book.records() if r.state in (TaskState.QUEUED, TaskState.RUNNING)]

"""One chef (seed §3.8), as a pure state machine: it looks after one agent at a time.

A `Chef` goes created → launched (its agent job submitted) → running (the agent connected) →
terminated (it said no_more_tasks and got every result back, or the master dismissed its agent
before it connected: nothing left in the queue for it), or, after a failure (connection
broken, agent gone from the schedd queue, too many failed tasks, submission failed), back through
created to launched with a new agent, until it has recovered NUM_AGENT_RECOVERIES times: then
unrecoverable. `MasterCore` (llic/master_core.py) owns the chefs and routes events to them.

Agents are named `"<run>.<chef>.<launch>"` (run: how many times this master has started, counting
restarts): each launch of a chef gets a new name, so an agent from an earlier launch or an
earlier run of the master (which the master has already given up on) is refused when it connects
and its results and errors are ignored.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from enum import StrEnum

from llic.config import LlicConfig
from llic.events import (
    AgentConnected,
    AgentSubmitted,
    CloseConnection,
    ConnectionBroken,
    Output,
    RefuseAgent,
    RemoveAgents,
    ResultReceived,
    SendNoMoreTasks,
    SendTasks,
    SubmitAgent,
    SubmitFailed,
    WelcomeAgent,
)
from llic.netadmit import Gate, NetAdmit
from llic.taskbook import Assignment, Decide, TaskBook, TaskState

# Work (seconds of the tasks' estimated run time) a window grown past WINDOW_SIZE holds at most:
# about what a master's last agent can still have to run after the others ran out
SHORT_QUEUE_S = 0.05
# The run-time estimate follows a shorter run by this fraction of the difference (a longer one
# at once: a long task takes the window back to WINDOW_SIZE with its first result)
ESTIMATE_FOLLOW = 0.1


class AgentWindow:
    """How many tasks each agent holds (§3.9.4): WINDOW_SIZE, grown up to MAX_WINDOW_SIZE while
    the master's tasks are short. Why: with /bin/true-like tasks each agent's `results` message
    carries ~3 results at a window of 6, and the master's per-message cost (its event loop, the
    socket calls, the core's batch) was a third of its CPU per task; a window of ~30 carries ~20.
    Never at long tasks' cost: the window grows past WINDOW_SIZE only to as many tasks as hold
    at most SHORT_QUEUE_S of work by the run-time estimate, which jumps to any longer run at once
    (so a long task's first result takes the window back) and follows shorter ones slowly; and
    only after `most` results (one queue statement's tasks are alike, but the first may not be
    typical). The agent is told `most` in its welcome: it never holds more."""

    def __init__(self, config: LlicConfig) -> None:
        self.base = config.window_size
        self.most = max(config.window_size, config.max_window_size)
        self.now = self.base  # the window the chefs fill to
        self._estimate = 0.0  # seconds a task runs, by the results so far (0: none yet)
        self._seen = 0

    def saw(self, run_time: float) -> None:
        """A result with this measured run time (<= 0: not measured, not counted)."""
        if self.most == self.base or not run_time > 0:
            return
        estimate = self._estimate
        if run_time >= estimate:
            estimate = run_time
        else:
            estimate += (run_time - estimate) * ESTIMATE_FOLLOW
        self._estimate = estimate
        self._seen += 1
        if self._seen < self.most:
            return
        fit = int(SHORT_QUEUE_S / estimate)
        self.now = self.base if fit <= self.base else min(self.most, fit)


class ChefState(StrEnum):
    """Where a chef is in its agent's life (seed §3.8)."""

    CREATED = "created"
    LAUNCHED = "launched"
    RUNNING = "running"
    TERMINATED = "terminated"
    UNRECOVERABLE = "unrecoverable"


def agent_name(run: int, chef: int, launch: int) -> str:
    """The name of launch `launch` of chef `chef` in run `run` of the master: `run.chef.launch`."""
    return f"{run}.{chef}.{launch}"


def parse_agent_name(agent: str) -> tuple[int, int, int] | None:
    """(run, chef, launch), or None for anything else."""
    parts = agent.split(".")
    if len(parts) != 3 or not all(p.isdigit() and len(p) < 10 for p in parts):
        return None
    run, chef, launch = map(int, parts)
    return run, chef, launch


# ----------------------------------------------------------------------------- the chef's own events


@dataclass(frozen=True)
class Launch:
    """The master launches a chef (created or terminated): submit a new agent, with
    INITIAL_JOBS_NUMBER tasks in its input file unless `initial` is False."""

    reason: str = "start"
    initial: bool = True


@dataclass(frozen=True)
class AgentVanished:
    """The agent's job is no longer alive in the schedd queue (MasterCore derives this from a
    QueueSnapshot)."""

    agent: str


@dataclass(frozen=True)
class Dismiss:
    """The queue has nothing for an agent that has not connected yet: its job is removed and the
    chef terminates (it is launched again if tasks come back). A chef whose agent holds tasks
    (INITIAL_JOBS_NUMBER) ignores it."""

    reason: str


@dataclass(frozen=True)
class Terminate:
    """All done, or the master stops: close the agent's connection (MasterCore.finish removes
    every agent job)."""

    reason: str


ChefEvent = (
    Launch
    | AgentSubmitted
    | SubmitFailed
    | AgentConnected
    | ResultReceived
    | ConnectionBroken
    | AgentVanished
    | Dismiss
    | Terminate
)


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
        self,
        record: ChefRecord,
        config: LlicConfig,
        run: int = 1,
        net: NetAdmit | None = None,
        window: AgentWindow | None = None,
    ) -> None:
        self.rec = record
        self.config = config
        self.window = window if window is not None else AgentWindow(config)  # the master's, shared
        self.run = run  # the master's run, part of the agent's name
        self.net = net  # network admission for tasks whose inputs travel (None: none)
        self.now = 0.0  # the time of the event being handled (for admission)
        self.decide: Decide | None = None  # the job policy's judgment of an ended run (MasterCore's)
        self.wait_for_requeues = False  # a run that ends may go back to the queue (max_retries...)
        self.host = ""  # the running agent's address (the job event log's execute host)
        self._agent_key: tuple[int, int, int] | None = None
        self._agent_name = ""

    @property
    def index(self) -> int:
        """The chef's number, 0 up."""
        return self.rec.index

    @property
    def state(self) -> ChefState:
        """Where the chef is now."""
        return self.rec.state

    @property
    def agent(self) -> str:
        """The name of its current (or last) agent."""
        key = (self.run, self.rec.index, self.rec.launches)
        if key != self._agent_key:  # asked several times per event: formatted once per launch
            self._agent_key, self._agent_name = key, agent_name(*key)
        return self._agent_name

    @property
    def accepting(self) -> bool:
        """Its agent can still be given tasks (now, or once it connects)."""
        s = self.rec.state
        return s is ChefState.LAUNCHED or (s is ChefState.RUNNING and not self.rec.no_more_sent)

    @property
    def active(self) -> bool:
        """Its agent is submitted or connected."""
        return self.rec.state in (ChefState.LAUNCHED, ChefState.RUNNING)

    def handle(
        self, event: ChefEvent, now: float, book: TaskBook, others: Collection[int], *, refill: bool = True
    ) -> Output:
        """`others`: the chefs that can take tasks (see TaskBook.take; this chef is left out
        there). `refill` False: a result does not refill the agent's window; the caller calls
        `fill` once after a batch of results."""
        out = Output()
        s = self.rec.state
        self.now = now
        match event:
            case Launch():
                if s in (ChefState.CREATED, ChefState.TERMINATED):
                    self._launch(book, others, out, event.initial)
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
            case AgentConnected(address=address):
                if s is ChefState.LAUNCHED:
                    self.rec.state = ChefState.RUNNING
                    self.host = address
                    book.started(self.index, now, address)
                    threshold = self.net.bulk_threshold if self.net is not None else 0
                    out.actions.append(WelcomeAgent(self.agent, self.window.most, threshold))
                    out.notes.append(f"chef {self.index}: agent {self.agent} connected")
                    self.fill(book, others, out)
                else:
                    reason = "already connected" if s is ChefState.RUNNING else f"chef is {s}"
                    out.actions.append(RefuseAgent(event.agent, reason))
            case ResultReceived(result=outcome):
                process, attempt = outcome.key
                if s is not ChefState.RUNNING:
                    out.notes.append(f"chef {self.index}: result for {process} while {s}: ignored")
                    return out
                why = book.check(self.index, process, attempt)
                if why is not None:
                    book.complete(self.index, outcome, now)  # counts it as ignored
                    out.notes.append(f"chef {self.index}: {why}: ignored")
                    return out
                book.complete(self.index, outcome, now, self.decide)
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
                if refill:
                    self.fill(book, others, out)
            case ConnectionBroken(reason=reason):
                if s is ChefState.RUNNING:
                    self._recover(f"connection broken: {reason}", book, others, out)
            case AgentVanished():
                if s in (ChefState.LAUNCHED, ChefState.RUNNING):
                    self._recover("agent job left the schedd queue", book, others, out)
            case Dismiss(reason=reason):
                if s is ChefState.LAUNCHED and not book.held(self.index):
                    self.rec.state = ChefState.TERMINATED
                    if self.rec.job_id is not None:
                        out.actions.append(RemoveAgents((self.rec.job_id,), f"agent {self.agent}: {reason}"))
                        self.rec.job_id = None  # gone: not an agent that leaves by itself
                    out.notes.append(
                        f"chef {self.index}: agent {self.agent} dismissed before it connected ({reason})"
                    )
            case Terminate(reason=reason):
                if s is ChefState.RUNNING:
                    out.actions.append(CloseConnection(self.agent, reason))
                if s in (ChefState.LAUNCHED, ChefState.RUNNING, ChefState.CREATED):
                    book.requeue_chef(self.index, now, f"llic master: {reason}")
                    self.rec.state = ChefState.TERMINATED
        return out

    def fill(self, book: TaskBook, others: Collection[int], out: Output) -> None:
        """Keep the window's tasks at the running agent (§3.9.4, `AgentWindow`: WINDOW_SIZE, more
        while tasks are short); when the queue cannot fill the
        window, send no_more_tasks (§3.8 4.b) (with `wait_for_requeues`, only once no task runs
        anywhere: one may come back); when that is said and every result is back, terminate."""
        rec = self.rec
        if rec.state is not ChefState.RUNNING:
            return
        if not rec.no_more_sent:
            space = self.window.now - book.held(rec.index)
            if space > 0:
                gate = None if self.net is None else Gate(self.net, self.agent, self.now)
                tasks = book.take(rec.index, space, others, gate, now=self.now, host=self.host)
                if tasks:
                    out.actions.append(SendTasks(self.agent, tuple(tasks), self._rates(tasks)))
                if gate is not None and gate.waiting:
                    pass  # tasks held for network capacity: more comes when a transfer ends
                elif len(tasks) < space and self.wait_for_requeues and book.running:
                    pass  # a run still under way may come back to the queue: keep the agent
                elif len(tasks) < space:
                    rec.no_more_sent = True
                    out.actions.append(SendNoMoreTasks(self.agent))
        if rec.no_more_sent and not book.held(rec.index):
            rec.state = ChefState.TERMINATED
            out.actions.append(CloseConnection(self.agent, "no more tasks for this agent"))
            out.notes.append(f"chef {rec.index}: agent {self.agent} finished its tasks")

    def _rates(self, tasks: list[Assignment]) -> tuple[tuple[int, float], ...]:
        """The paced ones among `tasks`: admission reserved a rate for their inputs."""
        if self.net is None:
            return ()
        paced = ((a.process, self.net.pace(a.process)) for a in tasks)
        return tuple((process, bps) for process, bps in paced if bps is not None)

    def _launch(
        self, book: TaskBook, others: Collection[int], out: Output, with_initial: bool = True
    ) -> None:
        rec = self.rec
        rec.launches += 1
        rec.state = ChefState.LAUNCHED
        rec.failures = 0
        rec.no_more_sent = False
        rec.job_id = None
        initial = book.take(rec.index, self.config.initial_jobs_number, others) if with_initial else []
        out.actions.append(SubmitAgent(self.agent, rec.index, rec.launches, tuple(initial)))

    def _recover(self, reason: str, book: TaskBook, others: Collection[int], out: Output) -> None:
        """§3.8 4.e: tasks back to the queue, connection closed, agent removed, resubmitted unless
        this chef has recovered NUM_AGENT_RECOVERIES times already."""
        rec = self.rec
        requeued = book.requeue_chef(rec.index, self.now, f"llic: agent {self.agent} failed: {reason}")
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

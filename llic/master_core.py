"""The master's decisions (seed §3.7, §3.10), as a pure state machine: `MasterCore`.

It owns the chefs (llic/chef.py), the `TaskBook` and the network admission (llic/netadmit.py)
and makes §3.7's main-loop decisions: how many agents, which chef gets which event, growing the
agents as matching slots appear and the queued work is worth another agent's start-up,
dismissing agents that have not connected as soon as nothing is queued (running ones are told
no_more_tasks and leave by themselves), giving up, the final removal of every agent job ever
submitted (after the agents that finished had a moment to leave), and when to save the state
file, ask for a negotiation cycle, read the schedd queue or count the pool's matching slots.
The trio driver (llic/master.py) is a thin loop around it: it feeds events (llic/events.py)
with the current time to `handle`, calls `on_timer` when the last output's `wakeup` comes, and
carries out the returned actions in order. Nothing here reads a clock,
sleeps, touches a socket or calls HTCondor, so every interleaving can be tested directly.

Saving, for the guarantees to hold across master crashes: the core puts `SaveState` first in
an output when the save must come before acting (after `start`, so that a run number is never
used twice; as soon as an agent's job id is learned, so that no agent job is forgotten), and
otherwise asks for its timer so that changes wait at most STATE_SAVE_INTERVAL. An agent job
whose submission was under way when the master died is unknown to the saved state: the driver
submits agents with an attribute naming the master and also removes by it, to catch those.

Agents launched before the master's first run (`prelaunch`, what master_submitter does so that
agents negotiate for slots while the scheduler-universe master is still being started) belong to
run 1: its `start` adopts them (they are in the state file master_submitter saved before the
master could start), unless the driver says they cannot reach this run (`adopt=False`: they
were told another port), which is handled as a restart.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from enum import StrEnum

from llic.chef import (
    AgentVanished,
    AgentWindow,
    Chef,
    ChefEvent,
    ChefRecord,
    ChefState,
    Dismiss,
    Launch,
    Terminate,
    parse_agent_name,
)
from llic.config import LlicConfig
from llic.events import (
    AgentConnected,
    AgentSubmitted,
    BulkReady,
    CancelTask,
    ConnectionBroken,
    CountSlots,
    GrantBulk,
    LetAgentsLeave,
    MasterEvent,
    Output,
    PollQueue,
    QueuePollFailed,
    QueueSnapshot,
    RefuseAgent,
    RemoveAgents,
    Reschedule,
    ResultReceived,
    SaveState,
    SlotsCounted,
    SubmitAgent,
    TransferDone,
    UserRequest,
    WriteEvents,
)
from llic.netadmit import IN, NetAdmit, Transfer
from llic.protocol import MAX_RESULT_BYTES
from llic.task import TaskResult
from llic.task_policy import (
    HELD,
    HOLD_USER_REQUEST,
    IDLE,
    RUNNING,
    Decision,
    DefaultPolicy,
    JobFacts,
    TaskPolicy,
    Verdict,
)
from llic.taskbook import TaskBook, TaskCounts, TaskRecord, TaskState

_NAMES_KEPT = 4096  # agent names whose parse the core remembers (one per launch), at most
RESCHEDULE_FOLLOW_UP = 2.0  # seconds from the reschedule after a submission to the next one
AGENT_STARTUP_GUESS = 10.0  # seconds from submitting an agent to its connection, until one is seen
AGENT_EXIT_GRACE = 10.0  # seconds finished agents get to leave the queue before the final removal


class MasterStatus(StrEnum):
    """How far the master has got, as its state file and master_q say it."""

    RUNNING = "running"
    DONE = "done"  # every task done or failed for good
    GAVE_UP = "gave_up"  # tasks left, every chef unrecoverable
    STOPPED = "stopped"  # finish() before either (the master was told to stop)


class MasterCore:
    """The master's decisions (§3.7). Entry points, each returning an `Output`: `start` (once per
    run), `handle` (an event), `on_timer` (the wakeup came), `finish` (the end). The driver
    reads it only through its properties and query methods; it never sets its fields."""

    def __init__(
        self,
        book: TaskBook,
        config: LlicConfig,
        chefs: Iterable[ChefRecord] = (),
        started: float | None = None,
        run: int = 0,
        net: NetAdmit | None = None,
        policy: TaskPolicy | None = None,
        cluster: int = 0,
        log_events: bool = False,
    ) -> None:
        self.book = book
        self.config = config
        self._run = run  # starts so far; start() counts one more
        self._net = net if net is not None else NetAdmit()  # accounting always; limits if configured
        self._policy: TaskPolicy = policy if policy is not None else DefaultPolicy()
        self._cluster = cluster  # the tasks' ClusterId, for the policy's ads
        book.log_events = log_events
        self._window = AgentWindow(config)  # every chef's: WINDOW_SIZE, more while tasks are short
        self.chefs = [self._new_chef(rec, run) for rec in chefs]
        self._accepting = _Accepting(self.chefs)
        if [c.index for c in self.chefs] != list(range(len(self.chefs))):
            raise ValueError("chef records must be numbered 0, 1, ... in order")
        self._started = started
        self._stopped = False
        self._dirty = True  # something changed since the last SaveState
        self._last_save = -math.inf
        self._next_reschedule: float | None = None  # set by start()
        self._next_poll: float | None = None  # None while a PollQueue is unanswered
        self._poll_known: frozenset[str] | None = None  # agent jobs known when PollQueue went out
        self._matching: int | None = None  # the pool's slots matching the agents, last counted
        self._next_count: float | None = None  # None while a CountSlots is unanswered
        self._launched_at: dict[str, float] = {}  # agent -> when its SubmitAgent went out
        self._startup = AGENT_STARTUP_GUESS  # seconds from SubmitAgent to the agent's connection
        self._run_time = (0.0, 0)  # sum and count of the run times of tasks that ran
        self._next_periodic: float | None = None  # the next periodic policy evaluation
        self._last_now = 0.0  # the time of the entry point being handled
        self._names: dict[str, tuple[int, int, int] | None] = {}  # parse_agent_name, remembered
        # agent -> its runs cancelled (held, removed) whose results have not come back: it still
        # holds them, and may announce their large results (bulk_ready)
        self._cancelled: dict[str, set[tuple[int, int]]] = {}

    def _new_chef(self, rec: ChefRecord, run: int) -> Chef:
        """A chef that asks the job policy about ended runs (and so may wait for requeues);
        HTCondor's default policy (every run that ends is done) needs no asking."""
        chef = Chef(rec, self.config, run, self._net, self._window)
        chef.decide = None if type(self._policy) is DefaultPolicy else self._decide
        chef.wait_for_requeues = self._policy.may_requeue()
        return chef

    @classmethod
    def new(cls, processes: Iterable[int], config: LlicConfig, net: NetAdmit | None = None) -> MasterCore:
        """A core for a master that has not started yet: every task queued, no chef."""
        return cls(TaskBook(processes, config.max_task_attempts), config, net=net)

    # ------------------------------------------------------------------ status

    @property
    def run(self) -> int:
        """How many times this master has started (part of its agents' names)."""
        return self._run

    @property
    def started(self) -> float | None:
        """When the master first started (None: not yet)."""
        return self._started

    @property
    def stopped(self) -> bool:
        """`finish` was called: actions still under way for the driver are moot."""
        return self._stopped

    @property
    def finished(self) -> bool:
        """Every task is done, failed or removed for good (none held, none left to run)."""
        return self.book.finished

    @property
    def gave_up(self) -> bool:
        """Tasks left to run and every chef unrecoverable (§3.7): nothing can run them. (Held
        tasks alone keep the master waiting for a release or a removal, as HTCondor keeps them.)"""
        if self.book.idle or not self.chefs:
            return False
        for chef in self.chefs:  # asked after every event: the first chef usually answers
            if chef.rec.state is not ChefState.UNRECOVERABLE:
                return False
        return True

    @property
    def over(self) -> bool:
        """The driver's loop ends: call finish()."""
        return self.finished or self.gave_up or self._stopped

    @property
    def status(self) -> MasterStatus:
        """RUNNING, or how it ended."""
        if self.finished:
            return MasterStatus.DONE
        if self.gave_up:
            return MasterStatus.GAVE_UP
        return MasterStatus.STOPPED if self._stopped else MasterStatus.RUNNING

    def counts(self) -> TaskCounts:
        """How many tasks are in each state."""
        return self.book.counts()

    def unfinished(self) -> list[int]:
        """Processes neither done nor failed for good (for the give-up report)."""
        return [r.process for r in self.book.records() if r.state in (TaskState.QUEUED, TaskState.RUNNING)]

    def agent_job_ids(self) -> list[str]:
        """Every agent job any chef ever submitted, in submission order per chef."""
        return [job for chef in self.chefs for job in chef.rec.job_ids]

    def exiting_agent_jobs(self) -> list[str]:
        """The jobs of agents that finished their tasks: they exit by themselves."""
        return [c.rec.job_id for c in self.chefs if c.state is ChefState.TERMINATED and c.rec.job_id]

    def agents_by_state(self) -> dict[str, int]:
        """How many chefs are in each ChefState."""
        counts = dict.fromkeys((s.value for s in ChefState), 0)
        for chef in self.chefs:
            counts[chef.state.value] += 1
        return counts

    def chef_records(self) -> list[ChefRecord]:
        """The chefs' persistent facts (what the state file keeps)."""
        return [c.rec for c in self.chefs]

    def take_changed(self) -> set[int]:
        """The processes whose task records changed since the last call (for the state file's
        writer: the other records' lines stay as they were)."""
        return self.book.take_touched()

    def net_figures(self, now: float) -> dict[str, object]:
        """The network accounting as the state file's `extra.net` and master_q show it."""
        return self._net.snapshot(now)

    def wants_result(self, agent: str, process: int, attempt: int) -> bool:
        """Would `agent`'s result for (process, attempt) be recorded now? The driver asks before
        placing the files a result returns: those of a stale or duplicate result must not
        overwrite the ones already placed."""
        chef, current = self._chef_of(agent)
        return (
            chef is not None
            and current
            and chef.state is ChefState.RUNNING
            and self.book.check(chef.index, process, attempt) is None
        )

    # ------------------------------------------------------------------ entry points

    def prelaunch(self, matching_slots: int, now: float) -> Output:
        """Before the master's first run: the agents master_submitter submits next to the master
        job, min(matching slots, MAX_CHEFS_NUMBER, tasks) of them (at least one), for run 1 and
        without initial tasks (tasks a master has not handed out are all queued when it starts).
        Answer each SubmitAgent with AgentSubmitted before saving: the state file must name
        every agent job before the master can start."""
        if self._run or self.chefs:
            raise ValueError("prelaunch is for a master that has not started and has no agents")
        self._matching = matching_slots
        out = Output()
        wanted = min(max(matching_slots, 1), self.config.max_chefs_number, self.book.queued)
        self.chefs[:] = [self._new_chef(ChefRecord(i), 1) for i in range(wanted)]
        out.notes.append(f"{len(self.book)} tasks, {matching_slots} matching slots: {wanted} agents")
        for chef in self.chefs:
            out.extend(self._to_chef(chef, Launch("submitted with the master", initial=False), now))
        return self._done(out, now)

    def start(
        self,
        matching_slots: int | None,
        now: float,
        input_sizes: Mapping[int, int] | None = None,
        *,
        adopt: bool = True,
    ) -> Output:
        """Begin, or go on after a restart. Fresh: min(matching slots, MAX_CHEFS_NUMBER, tasks)
        chefs (at least one while tasks are queued: a busy pool frees a slot eventually), all
        launched. With agents master_submitter launched (`prelaunch`): they are adopted as they
        are, unless `adopt` is False (the driver could not listen where they look for it).
        After a restart: every agent job of the previous run is removed (its connection died
        with the old master) and the chefs that were active are launched again, without counting
        a recovery. `matching_slots` None: not counted yet (a CountSlots comes first).
        `input_sizes`: bytes of each task's private inputs (what admission must fit on an
        agent's subnet), as the driver measured them."""
        out = Output()
        if input_sizes is not None:
            self._net.sizes = dict(input_sizes)
        if self._started is None:
            self._started = now
        self._dirty = True
        self._run += 1
        self._next_reschedule = now + self.config.reschedule_interval
        self._next_poll = now + self.config.queue_poll_interval
        if matching_slots is not None:
            self._matching = matching_slots
        self._next_count = now + (self.config.queue_poll_interval if matching_slots is not None else 0.0)
        if self._policy.has_periodic():
            self._next_periodic = now + self.config.periodic_expr_interval
        for chef in self.chefs:
            chef.run = self._run
        if not self.chefs:
            slots = 1 if matching_slots is None else matching_slots
            wanted = min(max(slots, 1), self.config.max_chefs_number, self.book.queued)
            self.chefs[:] = [self._new_chef(ChefRecord(i), self._run) for i in range(wanted)]
            out.notes.append(
                f"{len(self.book)} tasks, {self.book.queued} to run, {matching_slots} matching slots:"
                f" {wanted} agents"
            )
            for chef in self.chefs:
                out.extend(self._to_chef(chef, Launch("start"), now))
        elif self._run == 1 and adopt:
            on_way = [c.rec.job_id for c in self.chefs if c.state is ChefState.LAUNCHED]
            out.notes.append(f"{self.book.counts()}; {len(on_way)} agents submitted with the master")
            # the agents may still wait for a slot: the cycles master_submitter asked for at their
            # release often miss some (the submitter ad's race), and the next periodic cycle, or
            # this master's after RESCHEDULE_INTERVAL, would come seconds later; so as after a
            # submission of its own: a cycle now and one RESCHEDULE_FOLLOW_UP later
            self._submitted(out, now)
        else:
            old = self.agent_job_ids()
            if old:
                why = "left by the previous run of this master" if self._run > 1 else "told another port"
                out.actions.append(RemoveAgents(tuple(old), why))
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
        return self._done(out, now, save_first=True)

    def handle(self, event: MasterEvent, now: float) -> Output:
        """One event, at `now` (the master's clock)."""
        if isinstance(event, TransferDone):
            return self._done(self._transfer_done(event, now), now)
        if isinstance(event, BulkReady):
            return self._done(self._bulk_ready(event, now), now)
        if isinstance(event, QueueSnapshot | QueuePollFailed):
            return self._done(self._queue_read(event, now), now)
        if isinstance(event, SlotsCounted):
            return self._done(self._slots_counted(event, now), now)
        if isinstance(event, UserRequest):
            return self._done(self._user_request(event, now), now, save_first=True)
        self._dirty = True
        out = Output()
        chef, current = self._chef_of(event.agent)
        if chef is None or not current:
            out = self._stale(chef, event)
        else:
            match event:
                case AgentConnected(address=address):
                    if address:
                        self._net.connect(event.agent, address)
                    self._connected(event.agent, now)
                case ConnectionBroken():
                    self._net.forget(event.agent, now)
                case ResultReceived():
                    self._account_result(chef, event, now)
            out.extend(self._to_chef(chef, event, now))
            out.extend(self._balance(now))
        if isinstance(event, AgentSubmitted):
            self._submitted(out, now)
        # a job id must be in the state file before anything else happens (no agent job forgotten)
        return self._done(out, now, save_first=isinstance(event, AgentSubmitted))

    def handle_results(self, events: Sequence[ResultReceived], now: float) -> Output:
        """The results of one `results` message, each as `handle` would take it, with the
        balancing and sealing done once for the batch (per result they were most of the
        master's own time in a flood of short tasks)."""
        if len(events) == 1:
            return self.handle(events[0], now)
        self._dirty = True
        out = Output()
        refill: dict[int, Chef] = {}  # the chefs whose agents sent results, in order
        for event in events:
            chef, current = self._chef_of(event.agent)
            if chef is None or not current:
                out.extend(self._stale(chef, event))
                continue
            self._account_result(chef, event, now)
            out.extend(chef.handle(event, now, self.book, self._accepting, refill=False))
            refill[chef.index] = chef
        # each agent's window refilled once for its results: one SendTasks (one message) for
        # the batch rather than one per result
        for chef in refill.values():
            chef.now = now
            chef.fill(self.book, self._accepting, out)
        out.extend(self._balance(now))
        return self._done(out, now)

    def _bulk_ready(self, event: BulkReady, now: float) -> Output:
        """A large result waits for its subnet's turn, if its agent holds that run: one it was
        given and has not reported (running, or cancelled meanwhile). Any other would take its
        subnet's turn for good (its result never comes, and the honest agents' large results
        wait behind it), and a flood of them would grow the queue without bound: ignored, with
        a note naming the agent. So each agent has at most the runs it holds waiting."""
        out = Output()
        chef, current = self._chef_of(event.agent)
        if chef is None or not current or chef.state is not ChefState.RUNNING:
            return out  # a superseded agent: its connection is being closed
        run = (event.process, event.attempt)
        if event.nbytes > MAX_RESULT_BYTES:
            out.notes.append(
                f"agent {event.agent}: bulk_ready for {event.process}.{event.attempt} of {event.nbytes} "
                f"bytes, more than a result carries ({MAX_RESULT_BYTES}): ignored"
            )
            return out
        if self.book.check(chef.index, *run) is not None and run not in self._cancelled.get(event.agent, ()):
            out.notes.append(
                f"agent {event.agent}: bulk_ready for {event.process}.{event.attempt}, "
                "a run it does not hold: ignored"
            )
            return out
        self._net.bulk_ready(event.agent, event.process, event.attempt, event.nbytes, now)
        self._dirty = True
        return self._grants(out, now)

    def _account_result(self, chef: Chef, event: ResultReceived, now: float) -> None:
        """What a result tells the master beside its record, before its chef takes it: its large
        return is over; the input reservation its agent holds for the process ends, unless the
        process runs again there under a later attempt (whose inputs it is for): a result comes
        back for a run cancelled meanwhile (held, removed) too; and only if it is the running
        attempt's own (not a duplicate or a stale attempt's), its run time counts for the mean
        and the window. A repeated result counted twice grew the window (and refilled the agent
        past what it was sent), and one of another agent's could free the reservation of the
        task's next attempt."""
        result, book = event.result, self.book
        self._net.bulk_done(event.agent, event.process, now, result.attempt)
        cancelled = self._cancelled.get(event.agent)
        if cancelled is not None:
            cancelled.discard(result.key)
            if not cancelled:
                del self._cancelled[event.agent]
        self._end_reservation(event.agent, event.process, result.attempt)  # its inputs arrived, or never will
        if chef.state is not ChefState.RUNNING or book.check(chef.index, *result.key) is not None:
            return
        if result.ok:
            total, n = self._run_time
            self._run_time = (total + max(0.0, result.run_time), n + 1)
        self._window.saw(result.run_time)

    def _end_reservation(self, agent: str, process: int, attempt: int | None) -> None:
        """The input reservation `agent` holds for `process` ends (its transfer is over, or a
        result of its run came back), unless the process runs on that agent again under
        another attempt than `attempt` (None: not known), whose inputs it is for."""
        chef, current = self._chef_of(agent)
        rec = self.book[process] if process in self.book else None
        if (
            attempt is not None
            and chef is not None
            and current
            and rec is not None
            and rec.state is TaskState.RUNNING
            and rec.chef == chef.index
            and rec.attempt != attempt
        ):
            return
        self._net.release(process, agent=agent)

    def on_timer(self, now: float) -> Output:
        """The wakeup came: a save that is due, a negotiation cycle while agents wait for slots,
        a read of the schedd queue, a large return whose time is up."""
        out = Output()
        late = self._net.bulk.expire(now)
        for g in late:
            out.notes.append(
                f"agent {g.agent}: large result of {g.process}.{g.attempt} ({g.nbytes} bytes) not "
                f"returned within {g.due - g.granted_at:.0f} s of its grant: its subnet's turn passes on"
            )
        if late:
            self._dirty = True
            self._grants(out, now)
        if not self.over:
            if self._next_reschedule is not None and now >= self._next_reschedule:
                if self._waiting_for_slots():
                    out.actions.append(Reschedule())
                self._next_reschedule = now + self.config.reschedule_interval
            if self._next_poll is not None and now >= self._next_poll:
                out.actions.append(PollQueue())
                self._poll_known = frozenset(self.agent_job_ids())
                self._next_poll = None
            if self._next_count is not None and now >= self._next_count:
                out.actions.append(CountSlots())
                self._next_count = None
            if self._next_periodic is not None and now >= self._next_periodic:
                self._next_periodic = now + self.config.periodic_expr_interval
                out.extend(self._periodic(now))
        save = self._dirty and (
            now >= self._last_save + self.config.state_save_interval or now < self._last_save
        )
        return self._done(out, now, save_first=save)

    def finish(self, now: float, reason: str = "all tasks done") -> Output:
        """The end (all done, gave up, or told to stop): close every connection, put unfinished
        tasks back in the queue (a restarted master runs them), remove every agent job ever
        submitted, and save, last. When all tasks are done, agents that finished their tasks get
        AGENT_EXIT_GRACE seconds to leave by themselves (LetAgentsLeave) before they are
        removed with the rest. Events after this only get refusals and removals."""
        out = Output()
        done = self.finished and not self._stopped
        leaving = self.exiting_agent_jobs() if done else []
        self._stopped = True
        self._dirty = True
        for chef in self.chefs:
            out.extend(chef.handle(Terminate(reason), now, self.book, ()))
        jobs = self.agent_job_ids()
        rest = tuple(j for j in jobs if j not in leaving)
        if rest:
            out.actions.append(RemoveAgents(rest, f"final cleanup: {reason}"))
        if leaving:
            out.actions.append(LetAgentsLeave(tuple(leaving), AGENT_EXIT_GRACE))
            out.actions.append(RemoveAgents(tuple(leaving), f"final cleanup: {reason}"))
        out.notes.append(f"finished ({self.status}): {self.book.counts()}; removing {len(jobs)} agent jobs")
        events = self.book.take_events()
        if events:
            out.actions.append(WriteEvents(tuple(events)))
        out.actions.append(SaveState())
        self._saved(now)
        out.wakeup = self._wakeup()
        return out

    def still_launching(self, agent: str) -> bool:
        """Is `agent` the launch its chef waits for (so the driver should still submit it)? A
        chef dismissed, recovered or stopped meanwhile does not want it any more."""
        chef, current = self._chef_of(agent)
        return chef is not None and current and chef.state is ChefState.LAUNCHED and chef.rec.job_id is None

    @property
    def matching_slots(self) -> int | None:
        """The pool's slots matching the agents, as last counted (None: not yet)."""
        return self._matching

    @property
    def agent_startup(self) -> float:
        """Seconds from submitting an agent to its connection (estimate; the guess until seen)."""
        return self._startup

    # ------------------------------------------------------------------ internals

    def _done(self, out: Output, now: float, *, save_first: bool = False) -> Output:
        """Seal an entry point's output: the job event log's events of what it changed, a save
        first when it must precede acting, and the time the core next wants its timer."""
        events = self.book.take_events()
        if events:
            out.actions.append(WriteEvents(tuple(events)))
        if save_first:
            out.actions.insert(0, SaveState())
            self._saved(now)
        for action in out.actions:
            if isinstance(action, SubmitAgent):
                self._launched_at[action.agent] = now
        out.wakeup = self._wakeup()
        return out

    def _saved(self, now: float) -> None:
        self._dirty = False
        self._last_save = now

    def _wakeup(self) -> float | None:
        """The earliest of: a save of changes not saved yet, the next negotiation cycle, the next
        queue read (none once the master is over, but for a save), a large return's time."""
        times = []
        due = self._net.bulk.next_due()
        if due is not None:
            times.append(due)
        if self._dirty:
            times.append(self._last_save + self.config.state_save_interval)
        if not self.over:
            pending = (self._next_reschedule, self._next_poll, self._next_count, self._next_periodic)
            times += [t for t in pending if t is not None]
        return min(times) if times else None

    def _facts(self, rec: TaskRecord, status: int, now: float, result: TaskResult | None = None) -> JobFacts:
        """A task's job ad facts for the policy (llic/task_policy.py)."""
        return JobFacts(
            cluster=self._cluster,
            process=rec.process,
            status=status,
            starts=rec.attempt,
            completions=rec.completions,
            qdate=self._started if self._started is not None else now,
            entered=rec.entered if rec.entered is not None else (self._started or now),
            now=now,
            exit_code=None if result is None else result.exit_code,
            exit_signal=None if result is None else result.signal,
            run_started=rec.run_started,
            wall_clock=rec.wall_clock,
            hold_code=rec.hold_code,
            hold_subcode=rec.hold_subcode,
        )

    def _decide(self, rec: TaskRecord, result: TaskResult, now: float) -> Decision:
        """The job policy's judgment of a run that ended (TaskBook.complete's `decide`)."""
        return self._policy.on_exit(self._facts(rec, RUNNING, now, result))

    def _periodic(self, now: float) -> Output:
        """HTCondor's periodic policy over every task that waits, runs or is held."""
        out = Output()
        self._last_now = now
        statuses = {TaskState.QUEUED: IDLE, TaskState.RUNNING: RUNNING, TaskState.HELD: HELD}
        for rec in self.book.records():
            status = statuses.get(rec.state)
            if status is None:
                continue
            decision = self._policy.periodic(self._facts(rec, status, now))
            if decision is not None:
                self._apply(rec.process, decision, now, out)
        if out.actions or out.notes:
            self._dirty = True
            out.extend(self._balance(now))
        return out

    def _apply(self, process: int, decision: Decision, now: float, out: Output) -> None:
        """Hold, release or remove one task (the periodic policy or the user)."""
        rec = self.book[process]
        attempt = rec.attempt
        chef: int | None = None
        verdict = decision.verdict
        if verdict is Verdict.HOLD:
            chef = self.book.hold(process, decision, now)
            done = rec.state is TaskState.HELD
        elif verdict is Verdict.RELEASE:
            done = self.book.release(process, now, decision.reason)
        elif verdict is Verdict.REMOVE:
            done, chef = self.book.remove(process, now, decision.reason)
        else:
            return
        if done:
            out.notes.append(f"process {process}: {verdict.value}: {decision.reason or 'no reason'}")
        if chef is not None:
            self._stop_running(chef, process, attempt, out)

    def _stop_running(self, index: int, process: int, attempt: int, out: Output) -> None:
        """A task its agent runs was held or removed: the agent stops it; its chef may be done."""
        chef = self.chefs[index]
        if chef.state is ChefState.RUNNING:
            out.actions.append(CancelTask(chef.agent, process, attempt))
            self._cancelled.setdefault(chef.agent, set()).add((process, attempt))
            chef.now = self._last_now
            chef.fill(self.book, self._accepting, out)

    def _user_request(self, event: UserRequest, now: float) -> Output:
        """master_release / master_rm / master_hold: as condor_release, condor_rm, condor_hold."""
        out = Output()
        self._dirty = True
        applies = {
            "release": (TaskState.HELD,),
            "remove": (TaskState.QUEUED, TaskState.RUNNING, TaskState.HELD),
            "hold": (TaskState.QUEUED, TaskState.RUNNING),
        }.get(event.action)
        if applies is None or self._stopped:
            out.notes.append(f"user request {event.action!r} ignored")
            return out
        processes = event.processes
        if processes is None:
            processes = tuple(p for state in applies for p in self.book.in_state(state))
        verdict = {"release": Verdict.RELEASE, "remove": Verdict.REMOVE, "hold": Verdict.HOLD}[event.action]
        code = HOLD_USER_REQUEST if verdict is Verdict.HOLD else 0
        reason = event.reason or f"via master_{'rm' if event.action == 'remove' else event.action}"
        self._last_now = now
        for process in processes:
            if process in self.book:
                self._apply(process, Decision(verdict, reason, code), now, out)
        out.extend(self._balance(now))
        return out

    def _waiting_for_slots(self) -> bool:
        """Some agent is submitted and has not connected yet: negotiation cycles help it start."""
        return any(c.state is ChefState.LAUNCHED for c in self.chefs)

    def _submitted(self, out: Output, now: float) -> None:
        """An agent job was accepted: once no other submission is under way, ask for a
        negotiation cycle at once and once more RESCHEDULE_FOLLOW_UP later (the first cycle often
        starts before the schedd's submitter ad shows the new idle jobs)."""
        if self._stopped or any(c.state is ChefState.LAUNCHED and c.rec.job_id is None for c in self.chefs):
            return
        if self._waiting_for_slots():
            out.actions.append(Reschedule())
        self._next_reschedule = now + min(RESCHEDULE_FOLLOW_UP, self.config.reschedule_interval)

    def _transfer_done(self, event: TransferDone, now: float) -> Output:
        """Accounting; an input's end frees its reservation, a result's end its subnet's turn
        for large returns."""
        net = self._net
        subnet = net.agents.get(event.agent) or net.stats.agent_subnet.get(event.agent, "unknown")
        transfer = Transfer(event.agent, subnet, event.direction, event.nbytes, event.start, event.end)
        net.transfer_done(transfer)
        self._dirty = True
        if event.direction == IN:
            self._end_reservation(event.agent, event.process, event.attempt)
            return self._balance(now)  # its reservation ended: room for inputs or a large return
        net.bulk_done(event.agent, event.process, now, event.attempt)  # its result is in: the next one's turn
        return self._grants(Output(), now)

    def _queue_read(self, event: QueueSnapshot | QueuePollFailed, now: float) -> Output:
        """The answer to PollQueue. Jobs learned while the query ran count as alive (the answer
        may predate them)."""
        out = Output()
        known, self._poll_known = self._poll_known, None
        if not self.over:
            self._next_poll = now + self.config.queue_poll_interval
        if isinstance(event, QueuePollFailed):
            out.notes.append(f"queue poll failed: {event.reason}")
            return out
        alive = event.alive_job_ids
        if known is not None:
            alive = alive | (set(self.agent_job_ids()) - known)
        for chef in self.chefs:
            job = chef.rec.job_id
            if chef.active and job is not None and job not in alive:
                out.extend(self._to_chef(chef, AgentVanished(chef.agent), now))
        out.extend(self._balance(now))
        self._dirty = self._dirty or bool(out.actions)  # a quiet poll changes nothing
        return out

    def _to_chef(self, chef: Chef, event: ChefEvent, now: float) -> Output:
        return chef.handle(event, now, self.book, self._accepting)

    def _chef_of(self, agent: str) -> tuple[Chef | None, bool]:
        """The chef an agent's name points to (None: not one of ours), and whether the agent is
        that chef's latest launch in this run (else its events are stale)."""
        names = self._names
        if agent in names:
            parsed = names[agent]
        else:
            if len(names) >= _NAMES_KEPT:
                names.clear()
            parsed = names[agent] = parse_agent_name(agent)
        if parsed is None or parsed[1] >= len(self.chefs):
            return None, False
        chef = self.chefs[parsed[1]]
        run = self._run or 1  # agents launched before the first start belong to the first run
        return chef, parsed[0] == run and parsed[2] == chef.rec.launches and not self._stopped

    def _grants(self, out: Output, now: float) -> Output:
        """Bulk returns granted since the last look (and any that capacity freed just now for)
        become messages to their agents."""
        self._net.bulk.retry(now)
        for g in self._net.bulk.take_grants():
            out.actions.append(GrantBulk(g.agent, g.process, g.attempt, g.bps))
            out.notes.append(f"agent {g.agent}: large result of {g.process} ({g.nbytes} bytes) may go now")
        return out

    def _stale(self, chef: Chef | None, event: MasterEvent) -> Output:
        """An event from an agent of an earlier launch (or an unknown one, or after finish)."""
        out = Output()
        assert not isinstance(event, QueueSnapshot | QueuePollFailed | TransferDone | BulkReady)
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
        """After every event: running agents with room get queued tasks; then, while tasks are
        queued, the agents may grow (`_grow`)."""
        out = Output()
        if self.over or not self._run:
            return out
        net = self._net
        net.keep_only((c.agent for c in self.chefs if c.state is ChefState.RUNNING), now)
        if self._cancelled:  # the runs of agents gone are nobody's
            running = {c.agent for c in self.chefs if c.state is ChefState.RUNNING}
            for agent in self._cancelled.keys() - running:
                del self._cancelled[agent]
        if net.heads:
            net.settle(self.book.queue())
        if self.book.queued:
            # issue 8 item 4: agents on the subnet with the most spare capacity choose first; among
            # equals, the one holding fewest tasks (else the lowest-numbered free agent would take
            # every transfer capacity frees, and the others on its subnet would idle)
            # (only agents with room: after a result, its own chef has refilled its agent, and
            # the others are full, so usually none; sorting and filling them all per result
            # was a fifth of the master's time in a flood of short tasks)
            book, window = self.book, self._window.now
            ready = [
                c
                for c in self.chefs
                if c.state is ChefState.RUNNING and c.accepting and book.held(c.index) < window
            ]
            if len(ready) > 1:
                ready.sort(key=lambda c: (-net.spare_of_agent(c.agent), book.held(c.index)))
            for chef in ready:
                chef.now = now
                chef.fill(self.book, self._accepting, out)
        if self.book.queued:
            self._grow(out, now)
        elif self._waiting_for_slots():
            self._dismiss_waiting(out, now)
        return self._grants(out, now)

    def _dismiss_waiting(self, out: Output, now: float) -> None:
        """Nothing is queued: the agents still waiting for a slot (or starting) would only take
        one to be told no_more_tasks, so they are removed now, not at the next queue read: a
        slot freed meanwhile (an agent that finished, a plain job that ended) would start one
        (the schedd reuses its claim at once). Those holding initial tasks stay."""
        for chef in self.chefs:
            if chef.state is ChefState.LAUNCHED:
                out.extend(self._to_chef(chef, Dismiss("nothing queued for it"), now))

    def _grow(self, out: Output, now: float) -> None:
        """Launch agents while the pool has more matching slots than agents that can take tasks
        (MAX_CHEFS_NUMBER at most), each new one with a queued task beyond those the agents still
        on their way will take, and only while the queued work would outlast a new agent's
        start-up on the agents running now (known once tasks have run) and no task waits for
        network capacity (llic.netadmit: the limit, not the agents, holds those back). With no agent able to
        take tasks, at least one is launched: a busy pool frees a slot eventually (§3.7).
        Terminated and created chefs are launched again first; new chefs come after, unless some
        chef is unrecoverable (a pool where agents keep failing gets no more of them)."""
        queued = self.book.queued
        accepting = [c for c in self.chefs if c.accepting]
        waiting = sum(1 for c in accepting if c.state is ChefState.LAUNCHED)
        ceiling = self._matching if self._matching is not None else len(accepting)
        limit = min(self.config.max_chefs_number, max(ceiling, 1))
        new = min(limit - len(accepting), queued - waiting)
        if not accepting:
            new = max(new, 1)
        elif new <= 0 or self._net.heads or not self._worth_an_agent(queued):
            # the common case, after every result: every agent there is can take tasks; or
            # tasks wait for network capacity, which another agent would not give them
            return
        others = [c.index for c in accepting]
        for chef in self._relaunchable():
            if new <= 0:
                return
            if accepting and not self.book.can_take(chef.index, others):
                continue  # its agents failed what is queued, and agents that did not are there
            new -= 1
            out.extend(self._to_chef(chef, Launch("tasks queued and room for another agent"), now))
        if any(c.state is ChefState.UNRECOVERABLE for c in self.chefs):
            return
        while new > 0 and len(self.chefs) < self.config.max_chefs_number:
            new -= 1
            chef = self._new_chef(ChefRecord(len(self.chefs)), self._run)
            self.chefs.append(chef)
            out.extend(self._to_chef(chef, Launch("more matching slots than agents"), now))

    def _worth_an_agent(self, queued: int) -> bool:
        """Would the queued tasks keep the running agents busy longer than a new agent takes to
        start? Unknown (no task has run yet, or no agent runs): yes."""
        total, n = self._run_time
        running = sum(1 for c in self.chefs if c.state is ChefState.RUNNING and c.accepting)
        if not n or not running:
            return True
        return queued * (total / n) / running > self._startup

    def _connected(self, agent: str, now: float) -> None:
        """An agent connected: how long agents take to start, for `_worth_an_agent`."""
        launched = self._launched_at.pop(agent, None)
        if launched is not None and now >= launched:
            seen = now - launched
            self._startup = seen if self._startup == AGENT_STARTUP_GUESS else (self._startup + seen) / 2

    def _slots_counted(self, event: SlotsCounted, now: float) -> Output:
        """The answer to CountSlots: the ceiling for growing the agents."""
        if not self.over:
            self._next_count = now + self.config.queue_poll_interval
        if event.matching is None:
            return Output(notes=["could not count the matching slots"])
        grew = event.matching != self._matching
        self._matching = event.matching
        out = self._balance(now) if grew else Output()
        self._dirty = self._dirty or bool(out.actions)
        return out

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

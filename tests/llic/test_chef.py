"""llic.chef: the chef state machine (seed §3.8) and the master's decisions (§3.7, §3.10).

The property test at the end drives MasterCore through arbitrary interleavings of agent
submissions, connections, results (failed, duplicated, stale), broken connections, agents
vanishing from the schedd queue and master restarts, then lets the run finish, and checks that
no task is lost, no result is recorded twice and no agent job is left behind."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from llic.chef import SHORT_QUEUE_S, AgentWindow, ChefState, parse_agent_name
from llic.config import LlicConfig
from llic.events import (
    Action,
    AgentConnected,
    AgentSubmitted,
    BulkReady,
    CloseConnection,
    ConnectionBroken,
    CountSlots,
    GrantBulk,
    LetAgentsLeave,
    Output,
    PollQueue,
    QueuePollFailed,
    QueueSnapshot,
    RefuseAgent,
    RemoveAgents,
    Reschedule,
    ResultReceived,
    SaveState,
    SendNoMoreTasks,
    SendTasks,
    SlotsCounted,
    SubmitAgent,
    SubmitFailed,
    TransferDone,
    UserRequest,
    WelcomeAgent,
)
from llic.master_core import AGENT_EXIT_GRACE, AGENT_STARTUP_GUESS, MasterCore, MasterStatus
from llic.master_q import render_net
from llic.netadmit import GRANT_GRACE, GRANT_SLACK, IN, OUT, Capacity, NetAdmit
from llic.state import MasterInfo, restore, snapshot
from llic.task import TaskResult
from llic.taskbook import Assignment, TaskState


def ok_result(process: int, attempt: int) -> TaskResult:
    return TaskResult(process, attempt, "ok", exit_code=0, host="n1")


def bad_result(process: int, attempt: int) -> TaskResult:
    return TaskResult(process, attempt, "prepare_failed", error="input missing", host="n1")


def of(out: Output, kind: type) -> list:
    return [a for a in out.actions if isinstance(a, kind)]


def tasks_sent(out: Output, agent: str) -> list[Assignment]:
    return [t for a in of(out, SendTasks) if a.agent == agent for t in a.tasks]


def started(n_tasks: int, slots: int, **cfg: int) -> tuple[MasterCore, list[SubmitAgent]]:
    core = MasterCore.new(range(n_tasks), LlicConfig(**cfg))
    out = core.start(slots, now=0.0)
    return core, of(out, SubmitAgent)


def test_agent_names() -> None:
    assert parse_agent_name("1.2.3") == (1, 2, 3)
    for bad in ("1.2", "a.b.c", "1.2.3.4", "", "1..2", "-1.2.3"):
        assert parse_agent_name(bad) is None


def test_as_many_chefs_as_slots_capped() -> None:
    assert len(started(100, 7)[1]) == 7
    assert len(started(100, 500, max_chefs_number=20)[1]) == 20
    assert len(started(3, 50)[1]) == 3  # never more agents than tasks
    assert len(started(10, 0)[1]) == 1  # a busy pool frees a slot eventually
    core, submits = started(0, 10)
    assert submits == [] and core.over and core.status is MasterStatus.DONE


def test_chef_life_with_window_and_initial_tasks() -> None:
    core, [sub] = started(10, 1, window_size=3, initial_jobs_number=2)
    assert sub.agent == "1.0.1" and sub.initial == (Assignment(0, 1), Assignment(1, 1))
    assert core.chefs[0].state is ChefState.LAUNCHED
    core.handle(AgentSubmitted(sub.agent, "40.0"), 1.0)
    out = core.handle(AgentConnected(sub.agent), 2.0)
    assert core.chefs[0].state is ChefState.RUNNING
    assert tasks_sent(out, sub.agent) == [Assignment(2, 1)]  # window 3, 2 already there
    out = core.handle(ResultReceived(sub.agent, ok_result(0, 1)), 3.0)
    assert tasks_sent(out, sub.agent) == [Assignment(3, 1)]
    no_more = []
    for p in range(1, 9):
        out = core.handle(ResultReceived(sub.agent, ok_result(p, 1)), 4.0)
        no_more += [p for _ in of(out, SendNoMoreTasks)]
    # once the queue cannot fill the window (at result 7; task 9 was the last): no_more_tasks, once
    assert no_more == [7]
    out = core.handle(ResultReceived(sub.agent, ok_result(9, 1)), 5.0)
    assert of(out, SendNoMoreTasks) == [] and of(out, CloseConnection) == [
        CloseConnection(sub.agent, "no more tasks for this agent")
    ]
    assert core.chefs[0].state is ChefState.TERMINATED and core.over and core.status is MasterStatus.DONE
    out = core.finish(6.0)
    assert of(out, RemoveAgents) == [RemoveAgents(("40.0",), "final cleanup: all tasks done")]


def test_a_batch_of_results_ends_where_the_same_results_one_by_one_end() -> None:
    """handle_results (a `results` message) balances once per batch: the tasks sent, the
    no_more_tasks and the book come out as when every result is handled by itself."""
    cores = []
    for batched in (False, True):
        core, subs = started(20, 2, window_size=4)
        sent: dict[str, list[Assignment]] = {s.agent: [] for s in subs}
        for i, sub in enumerate(subs):
            core.handle(AgentSubmitted(sub.agent, f"{i}.0"), 1.0)
            sent[sub.agent] += tasks_sent(core.handle(AgentConnected(sub.agent), 1.0), sub.agent)
        no_more: list[str] = []
        while not core.over:
            for agent, held in sent.items():
                results = [ResultReceived(agent, ok_result(a.process, a.attempt)) for a in held[:3]]
                del held[:3]
                if not results:
                    continue
                outs = (
                    [core.handle_results(results, 2.0)] if batched else [core.handle(r, 2.0) for r in results]
                )
                for out in outs:
                    held += tasks_sent(out, agent)
                    no_more += [a.agent for a in of(out, SendNoMoreTasks)]
        cores.append((core.book.counts(), sorted(no_more), [c.state for c in core.chefs]))
    assert cores[0] == cores[1] and cores[0][0].done == 20


def test_a_batch_with_duplicates_and_reorders_records_each_result_once_and_refills_once() -> None:
    """One `results` message holding a result twice, results out of order and one of an earlier
    batch: each run is recorded once, the duplicates are counted as ignored, and the agent's
    window is refilled by one SendTasks for the whole batch."""
    core, [sub] = started(12, 1, window_size=4)
    core.handle(AgentSubmitted(sub.agent, "1.0"), 1.0)
    held = tasks_sent(core.handle(AgentConnected(sub.agent), 1.0), sub.agent)
    assert len(held) == 4
    first = [ok_result(a.process, a.attempt) for a in held[:2]]
    out = core.handle_results([ResultReceived(sub.agent, r) for r in first], 2.0)
    assert len(of(out, SendTasks)) == 1 and len(tasks_sent(out, sub.agent)) == 2
    again = [ok_result(a.process, a.attempt) for a in reversed(held[2:])]
    batch = [*again, again[0], first[1], again[1]]  # reversed, twice, and one of the first batch
    out = core.handle_results([ResultReceived(sub.agent, r) for r in batch], 3.0)
    [refill] = of(out, SendTasks)
    assert len(refill.tasks) == 2 and core.book.held(0) == 4
    assert core.book.counts().done == 4 and core.book.ignored == 3
    assert all(core.book[a.process].recorded == 1 for a in held)


def test_connect_with_empty_queue_says_no_more_and_terminates() -> None:
    assert len(started(1, 2)[1]) == 1
    core2 = MasterCore.new(range(2), LlicConfig(window_size=5))
    a, b = of(core2.start(2, 0.0), SubmitAgent)
    out = core2.handle(AgentConnected(a.agent), 1.0)
    assert tasks_sent(out, a.agent) == [Assignment(0, 1), Assignment(1, 1)]
    assert core2.chefs[1].state is ChefState.TERMINATED  # b waited for a slot: dismissed at once
    assert of(core2.handle(AgentConnected(b.agent), 1.0), RefuseAgent)
    # an agent that connects holding its initial task only: no_more_tasks, and it ends with it
    core3 = MasterCore.new(range(2), LlicConfig(window_size=5, initial_jobs_number=1))
    a, b = of(core3.start(2, 0.0), SubmitAgent)
    assert core3.book.queued == 0 and core3.chefs[1].state is ChefState.LAUNCHED  # it holds task 1
    out = core3.handle(AgentConnected(b.agent), 1.0)
    assert of(out, SendNoMoreTasks) == [SendNoMoreTasks(b.agent)] and not of(out, CloseConnection)
    out = core3.handle(ResultReceived(b.agent, ok_result(1, 1)), 2.0)
    assert of(out, CloseConnection) and core3.chefs[1].state is ChefState.TERMINATED


def test_broken_connection_requeues_removes_and_resubmits_until_unrecoverable() -> None:
    core, [sub] = started(4, 1, window_size=2, num_agent_recoveries=2)
    agent = sub.agent
    for recovery in range(1, 4):
        core.handle(AgentSubmitted(agent, f"50.{recovery}"), 1.0)
        out = core.handle(AgentConnected(agent), 1.0)
        held = tasks_sent(out, agent)
        assert len(held) == 2
        out = core.handle(ConnectionBroken(agent, "reset by peer"), 2.0)
        assert CloseConnection(agent, "connection broken: reset by peer") in out.actions
        assert of(out, RemoveAgents)[0].job_ids == (f"50.{recovery}",)
        assert core.book.queued == 4 and core.chefs[0].rec.recoveries == recovery
        if recovery <= 2:
            [sub] = of(out, SubmitAgent)
            assert sub.launch == recovery + 1
            agent = sub.agent
        else:
            assert of(out, SubmitAgent) == []
    assert core.chefs[0].state is ChefState.UNRECOVERABLE
    assert core.gave_up and core.over and core.status is MasterStatus.GAVE_UP
    out = core.finish(3.0, "gave up")
    assert of(out, RemoveAgents)[0].job_ids == ("50.1", "50.2", "50.3")


def test_vanished_agent_is_recovered_and_others_are_not() -> None:
    core, subs = started(10, 2, window_size=2)
    core.handle(AgentSubmitted(subs[0].agent, "60.0"), 1.0)
    core.handle(AgentSubmitted(subs[1].agent, "61.0"), 1.0)
    core.handle(AgentConnected(subs[1].agent), 1.0)
    out = core.handle(QueueSnapshot(frozenset({"61.0"})), 2.0)  # 60.0 left the queue before connecting
    [resub] = of(out, SubmitAgent)
    assert resub.chef == 0 and resub.launch == 2 and of(out, RemoveAgents)[0].job_ids == ("60.0",)
    assert core.chefs[1].state is ChefState.RUNNING
    # a chef whose job id is not known yet is left alone
    out = core.handle(QueueSnapshot(frozenset({"61.0"})), 3.0)
    assert out.actions == []


def test_submit_failure_counts_as_agent_failure() -> None:
    core, [sub] = started(3, 1, num_agent_recoveries=0)
    out = core.handle(SubmitFailed(sub.agent, "schedd unreachable"), 1.0)
    assert core.chefs[0].state is ChefState.UNRECOVERABLE and core.gave_up and out.actions == []


def test_too_many_failed_tasks_fail_the_agent_and_tasks_go_elsewhere() -> None:
    core, (a, b) = started(6, 2, window_size=3, max_task_failures=2)
    out_a = core.handle(AgentConnected(a.agent), 1.0)
    held = tasks_sent(out_a, a.agent)
    out = core.handle(ResultReceived(a.agent, bad_result(held[0].process, held[0].attempt)), 2.0)
    assert core.chefs[0].state is ChefState.RUNNING and core.chefs[0].rec.failures == 1
    # chef 0 failed process 0, and chef 1 (launched) can take tasks: chef 0 gets another one
    assert [t.process for t in tasks_sent(out, a.agent)] == [3]
    out = core.handle(ResultReceived(a.agent, bad_result(held[1].process, held[1].attempt)), 3.0)
    assert core.chefs[0].rec.recoveries == 1 and core.chefs[0].state is ChefState.LAUNCHED
    assert CloseConnection(a.agent, "connection broken: x") not in out.actions
    assert any(isinstance(x, CloseConnection) and x.agent == a.agent for x in out.actions)
    out = core.handle(AgentConnected(b.agent), 4.0)
    # the failed agent's tasks come back first: those it held (2, 3), then the failed ones (1, 0)
    assert [t.process for t in tasks_sent(out, b.agent)] == [2, 3, 1]
    assert core.book.take(0, 10, others=[1]) == [Assignment(4, 1), Assignment(5, 1)]  # 0 and 1 wait for b


def test_stale_agents_are_refused_and_their_events_ignored() -> None:
    core, [sub] = started(4, 1, window_size=2)
    core.handle(AgentSubmitted(sub.agent, "70.0"), 1.0)
    sent = tasks_sent(core.handle(AgentConnected(sub.agent), 1.0), sub.agent)
    out = core.handle(AgentConnected(sub.agent), 1.5)
    assert of(out, RefuseAgent) == [RefuseAgent(sub.agent, "already connected")]
    [new] = of(core.handle(ConnectionBroken(sub.agent, "eof"), 2.0), SubmitAgent)
    assert of(core.handle(AgentConnected(sub.agent), 3.0), RefuseAgent)
    assert of(core.handle(AgentConnected("9.0.1"), 3.0), RefuseAgent)
    assert of(core.handle(AgentConnected("garbage"), 3.0), RefuseAgent)
    before = core.book.counts()
    out = core.handle(ResultReceived(sub.agent, ok_result(sent[0].process, sent[0].attempt)), 3.0)
    assert core.book.counts() == before and core.book.ignored == 1 and out.actions == []
    assert core.handle(ConnectionBroken(sub.agent, "late"), 3.0).actions == []
    # the old launch's job id arriving late is removed at once and remembered
    out = core.handle(AgentSubmitted(sub.agent, "70.9"), 4.0)
    assert of(out, RemoveAgents) == [RemoveAgents(("70.9",), f"agent {sub.agent} is superseded")]
    assert "70.9" in core.agent_job_ids()
    assert new.agent != sub.agent


def test_terminated_chefs_relaunched_when_tasks_come_back() -> None:
    core, (a, b) = started(4, 2, window_size=2, max_task_failures=5)
    sa = tasks_sent(core.handle(AgentConnected(a.agent), 1.0), a.agent)
    out = core.handle(AgentConnected(b.agent), 1.0)
    sb = tasks_sent(out, b.agent)
    for t in sb:
        out = core.handle(ResultReceived(b.agent, ok_result(t.process, t.attempt)), 2.0)
    assert core.chefs[1].state is ChefState.TERMINATED  # queue was empty: no_more_tasks, done
    out = core.handle(ResultReceived(a.agent, ok_result(sa[0].process, sa[0].attempt)), 3.0)
    assert core.chefs[0].rec.no_more_sent
    # a's last task fails: it goes back to the queue, nobody is accepting -> chef 1 launched again
    out = core.handle(ResultReceived(a.agent, bad_result(sa[1].process, sa[1].attempt)), 4.0)
    assert core.chefs[0].state is ChefState.TERMINATED
    [again] = of(out, SubmitAgent)
    assert again.chef == 1 and again.launch == 2
    out = core.handle(AgentConnected(again.agent), 5.0)
    assert tasks_sent(out, again.agent) == [Assignment(sa[1].process, 2)]


def test_result_after_finish_is_ignored_and_late_submissions_removed() -> None:
    core, [sub] = started(3, 1)
    core.handle(AgentConnected(sub.agent), 1.0)
    out = core.finish(2.0, "master removed")
    assert core.status is MasterStatus.STOPPED and core.book.counts().running == 0
    assert of(out, CloseConnection) == [CloseConnection(sub.agent, "master removed")]
    out = core.handle(AgentSubmitted(sub.agent, "80.0"), 3.0)
    assert of(out, RemoveAgents) == [RemoveAgents(("80.0",), f"agent {sub.agent} is superseded")]


def test_restart_removes_old_agents_and_relaunches_without_counting_a_recovery() -> None:
    core, subs = started(6, 2, window_size=2)
    core.handle(AgentSubmitted(subs[0].agent, "90.0"), 1.0)
    core.handle(AgentSubmitted(subs[1].agent, "91.0"), 1.0)
    sent = tasks_sent(core.handle(AgentConnected(subs[0].agent), 1.0), subs[0].agent)
    core.handle(ResultReceived(subs[0].agent, ok_result(sent[0].process, sent[0].attempt)), 2.0)
    state = snapshot(core, MasterInfo("m1", "alice", 5, "job.sub", 0), 3.0)
    again = restore(state)
    assert again.book.counts().running == 0 and again.book[sent[0].process].state is TaskState.DONE
    out = again.start(2, 4.0)
    assert out.actions[0] == SaveState() and again.run == 2  # saved before anything is done
    assert of(out, RemoveAgents)[0].job_ids == ("90.0", "91.0")
    assert [(s.chef, s.launch, s.agent) for s in of(out, SubmitAgent)] == [(0, 2, "2.0.2"), (1, 2, "2.1.2")]
    assert [c.rec.recoveries for c in again.chefs] == [0, 0]
    assert of(again.handle(AgentConnected(subs[0].agent), 5.0), RefuseAgent)  # the old run's agent


# ----------------------------------------------------------------------------- simulation


@dataclass
class SimAgent:
    name: str
    job: str | None = None
    connected: bool = False
    ever_connected: bool = False
    held: list[Assignment] = field(default_factory=list)
    sent_results: list[tuple[Assignment, TaskResult]] = field(default_factory=list)


@dataclass
class Sim:
    """HTCondor, the agents and the master's process around a MasterCore."""

    core: MasterCore
    info: MasterInfo
    restart_via: object = None  # callable(MasterState) -> MasterState: how a restart reads the state
    jobs: int = 0
    agents: dict[str, SimAgent] = field(default_factory=dict)
    pending: list[str] = field(default_factory=list)  # SubmitAgent not yet answered
    alive: set[str] = field(default_factory=set)  # agent jobs in the schedd queue
    submitted: set[str] = field(default_factory=set)  # every job id the schedd ever accepted
    removed: set[str] = field(default_factory=set)
    saved: object = None
    ledger: dict[int, TaskResult] = field(default_factory=dict)  # accepted successful results
    saved_ledger: dict[int, TaskResult] = field(default_factory=dict)
    now: float = 0.0

    def apply(self, out: Output) -> None:
        for action in out.actions:
            self.act(action)

    def act(self, action: Action) -> None:
        match action:
            case SubmitAgent(agent=name, initial=initial):
                self.agents[name] = SimAgent(name, held=list(initial))
                self.pending.append(name)
            case RemoveAgents(job_ids=ids):
                self.removed.update(ids)
                self.alive.difference_update(ids)
            case SendTasks(agent=name, tasks=tasks):
                assert self.agents[name].connected
                self.agents[name].held += tasks
                assert len(self.agents[name].held) <= self.most_held()
            case SendNoMoreTasks():
                pass
            case SaveState():
                self.save()
            case CloseConnection(agent=name) | RefuseAgent(agent=name):
                if name in self.agents:
                    self.agents[name].connected = False

    def most_held(self) -> int:
        """What an agent may hold: the welcome's window (the most the window grows to), or the
        initial tasks of its input file."""
        config = self.core.config
        return max(config.window_size, config.max_window_size, config.initial_jobs_number)

    def save(self) -> None:
        self.saved = snapshot(self.core, self.info, self.now)
        self.saved_ledger = dict(self.ledger)

    def feed(self, event: object, check: bool = True) -> None:
        self.now += 1.0
        self.apply(self.core.handle(event, self.now))  # type: ignore[arg-type]
        if check:
            self.check()

    def check(self) -> None:
        book = self.core.book
        counts = book.counts()
        assert counts.queued + counts.running + counts.done + counts.failed == counts.total
        for chef in self.core.chefs:
            if chef.state not in (ChefState.LAUNCHED, ChefState.RUNNING):
                assert not book.running_on(chef.index)
            if chef.state is ChefState.RUNNING and not chef.rec.no_more_sent:
                assert len(book.running_on(chef.index)) <= self.most_held()
        for process, outcome in self.ledger.items():
            assert book[process].state is TaskState.DONE and book[process].outcome == outcome
        assert {r.process for r in book.records() if r.state is TaskState.DONE} == set(self.ledger)

    # --- what the outside world does

    def answer_submission(self, index: int, ok: bool) -> None:
        name = self.pending.pop(index % len(self.pending))
        if not ok:
            return self.feed(SubmitFailed(name, "schedd said no"))
        self.jobs += 1
        job = f"{self.jobs}.0"
        self.agents[name].job = job
        self.alive.add(job)
        self.submitted.add(job)
        self.feed(AgentSubmitted(name, job))

    def startable(self) -> list[SimAgent]:
        return [a for a in self.agents.values() if a.job in self.alive and not a.ever_connected]

    def connect(self, agent: SimAgent) -> None:
        agent.connected = agent.ever_connected = True
        self.feed(AgentConnected(agent.name))

    def connected(self) -> list[SimAgent]:
        return [a for a in self.agents.values() if a.connected]

    def result(self, agent: SimAgent, index: int, ok: bool) -> None:
        task = agent.held.pop(index % len(agent.held))
        outcome = sim_result(task, agent.name) if ok else bad_result(task.process, task.attempt)
        before = self.core.book[task.process]
        current = before.state is TaskState.RUNNING and before.attempt == task.attempt
        agent.sent_results.append((task, outcome))
        self.feed(ResultReceived(agent.name, outcome), check=False)
        if ok and current and self.core.book[task.process].state is TaskState.DONE:
            assert task.process not in self.ledger, "a result recorded twice"
            self.ledger[task.process] = outcome
        self.check()

    def batch(self, agent: SimAgent, picks: list[tuple[int, bool]], dups: list[int], turn: int) -> None:
        """A `results` message: results of tasks the agent holds (ok or failed), results it sent
        before and some of these again, in any order, handled as one batch."""
        results: list[TaskResult] = []
        for index, ok in picks:
            if not agent.held:
                break
            task = agent.held.pop(index % len(agent.held))
            outcome = sim_result(task, agent.name) if ok else bad_result(task.process, task.attempt)
            agent.sent_results.append((task, outcome))
            results.append(outcome)
        results += [agent.sent_results[d % len(agent.sent_results)][1] for d in dups if agent.sent_results]
        if not results:
            return
        turn %= len(results)
        results = results[turn:] + results[:turn]
        book = self.core.book
        current = {
            (r.process, r.attempt)
            for r in results
            if book[r.process].state is TaskState.RUNNING and book[r.process].attempt == r.attempt
        }
        self.now += 1.0
        self.apply(self.core.handle_results([ResultReceived(agent.name, r) for r in results], self.now))
        for r in results:
            if r.ok and (r.process, r.attempt) in current and book[r.process].state is TaskState.DONE:
                assert self.ledger.get(r.process, r) == r, "a result recorded twice"
                self.ledger[r.process] = r
        self.check()

    def duplicate(self, agent: SimAgent, index: int) -> None:
        _, outcome = agent.sent_results[index % len(agent.sent_results)]
        before = self.core.book.counts()
        self.feed(ResultReceived(agent.name, outcome))
        assert self.core.book.counts() == before

    def kill(self, agent: SimAgent) -> None:
        """The agent dies: its job leaves the queue, its connection breaks."""
        self.alive.discard(agent.job or "")
        if agent.connected:
            agent.connected = False
            self.feed(ConnectionBroken(agent.name, "killed"))

    def restart(self, slots: int) -> None:
        """The master crashes; HTCondor starts it again from the last saved state."""
        for a in self.agents.values():
            a.connected = False
        self.pending.clear()  # submissions under way died with the master (before the schedd saw them)
        state = self.saved if self.restart_via is None else self.restart_via(self.saved)  # type: ignore[operator]
        self.core = restore(state)
        self.ledger = dict(self.saved_ledger)
        self.now += 1.0
        self.apply(self.core.start(slots, self.now))
        self.check()

    def run_to_the_end(self) -> None:
        """A fair world: submissions succeed, agents connect and return good results."""
        for _ in range(10_000):
            if self.core.over:
                break
            if self.pending:
                self.answer_submission(0, True)
            elif self.startable():
                self.connect(self.startable()[0])
            elif any(a.held for a in self.connected()):
                agent = next(a for a in self.connected() if a.held)
                self.result(agent, 0, True)
            else:
                self.feed(QueueSnapshot(frozenset(self.alive)))
                # agents that were told no_more_tasks and hold nothing exit
                for a in list(self.agents.values()):
                    if not a.connected and a.ever_connected and not a.held:
                        self.alive.discard(a.job or "")
        assert self.core.over
        self.now += 1.0
        self.apply(self.core.finish(self.now))
        self.save()


def sim_result(task: Assignment, host: str) -> TaskResult:
    """A successful run: mostly short (the window grows), every fourth process long (it shrinks)."""
    run_time = 1.0 if task.process % 4 == 3 else 0.001
    return TaskResult(
        task.process, task.attempt, "ok", exit_code=task.process % 5, host=host, run_time=run_time
    )


STEPS = [
    "count",
    "submit",
    "submit_fail",
    "connect",
    "ok",
    "fail",
    "dup",
    "batch",
    "break",
    "kill",
    "snapshot",
    "save",
    "restart",
]


def simulate(data: st.DataObject, restart_via: object = None) -> Sim:
    n = data.draw(st.integers(0, 15), label="tasks")
    slots = data.draw(st.integers(0, 4), label="slots")
    config = LlicConfig(
        window_size=data.draw(st.integers(1, 3), label="window"),
        max_window_size=data.draw(st.integers(1, 5), label="most window"),
        initial_jobs_number=data.draw(st.integers(0, 2), label="initial"),
        num_agent_recoveries=data.draw(st.integers(0, 3), label="recoveries"),
        max_task_failures=data.draw(st.integers(1, 3), label="max failures"),
        max_task_attempts=data.draw(st.integers(1, 3), label="max attempts"),
    )
    core = MasterCore.new(range(n), config)
    sim = Sim(core, MasterInfo("sim", "tester", 1, "job.sub", 0), restart_via)
    sim.save()
    begin = data.draw(st.sampled_from(["fresh", "adopt", "moved"]), label="begin")
    if begin == "fresh":
        sim.apply(core.start(slots, 0.0))
    else:  # master_submitter prelaunches agents; the master's first run adopts or replaces them
        sim.apply(core.prelaunch(slots, 0.0))
        while sim.pending:
            sim.answer_submission(0, True)
        sim.save()
        sim.core = restore(sim.saved)  # type: ignore[arg-type]
        sim.apply(sim.core.start(None, 1.0, adopt=begin == "adopt"))
        sim.check()
    for step in data.draw(st.lists(st.sampled_from(STEPS), max_size=120), label="steps"):
        k = data.draw(st.integers(0, 100))
        if sim.core.over:
            break
        if step == "count":
            sim.feed(SlotsCounted(k % 7 if k % 7 < 6 else None))
        elif step in ("submit", "submit_fail") and sim.pending:
            sim.answer_submission(k, step == "submit")
        elif step == "connect" and sim.startable():
            sim.connect(sim.startable()[k % len(sim.startable())])
        elif step in ("ok", "fail") and any(a.held for a in sim.connected()):
            agents = [a for a in sim.connected() if a.held]
            sim.result(agents[k % len(agents)], k, step == "ok")
        elif step == "batch" and any(a.held for a in sim.connected()):
            agents = [a for a in sim.connected() if a.held]
            picks = data.draw(st.lists(st.tuples(st.integers(0, 9), st.booleans()), min_size=1, max_size=4))
            dups = data.draw(st.lists(st.integers(0, 99), max_size=3))
            sim.batch(agents[k % len(agents)], picks, dups, k)
        elif step == "dup" and any(a.sent_results for a in sim.agents.values()):
            agents = [a for a in sim.agents.values() if a.sent_results]
            sim.duplicate(agents[k % len(agents)], k)
        elif step == "break" and sim.connected():
            agent = sim.connected()[k % len(sim.connected())]
            agent.connected = False
            sim.feed(ConnectionBroken(agent.name, "reset"))
        elif step == "kill" and sim.alive:
            agents = [a for a in sim.agents.values() if a.job in sim.alive]
            sim.kill(agents[k % len(agents)])
        elif step == "snapshot":
            sim.feed(QueueSnapshot(frozenset(sim.alive)))
        elif step == "save":
            sim.save()
        elif step == "restart":
            sim.restart(slots)
    sim.run_to_the_end()
    return sim


def check_end(sim: Sim) -> None:
    core = sim.core
    assert core.over
    if core.status is MasterStatus.DONE:
        assert all(r.state in (TaskState.DONE, TaskState.FAILED) for r in core.book.records())
    else:
        assert core.status is MasterStatus.GAVE_UP
        assert all(c.state is ChefState.UNRECOVERABLE for c in core.chefs)
    # no zombies: every agent job the schedd ever accepted was removed at the end
    assert sim.submitted <= set(core.agent_job_ids())
    assert sim.submitted <= sim.removed
    assert not sim.alive
    # every result recorded exactly once, and only those
    done = {r.process: r.outcome for r in core.book.records() if r.state is TaskState.DONE}
    assert done == sim.ledger
    assert all(r.recorded == r.failures + (r.state is TaskState.DONE) for r in core.book.records())


@settings(max_examples=500, deadline=None)
@given(data=st.data())
def test_any_interleaving_finishes_with_nothing_lost_nothing_twice_no_zombies(data: st.DataObject) -> None:
    check_end(simulate(data))


# ----------------------------------------------------------------------------- timers and answers


def test_saves_come_first_when_they_must_and_otherwise_within_the_save_interval() -> None:
    core = MasterCore.new(range(4), LlicConfig(state_save_interval=1.0))
    out = core.start(1, now=10.0)
    assert out.actions[0] == SaveState()  # a new run number is saved before any agent is submitted
    [sub] = of(out, SubmitAgent)
    out = core.handle(AgentSubmitted(sub.agent, "7.0"), 10.5)
    assert out.actions[0] == SaveState()  # so is a job id, as soon as it is known
    out = core.handle(AgentConnected(sub.agent), 11.0)
    assert SaveState() not in out.actions and out.wakeup == 11.5  # 1 s after the last save
    assert SaveState() not in core.on_timer(11.4).actions
    assert core.on_timer(11.5).actions[0] == SaveState()
    assert SaveState() not in core.on_timer(15.0).actions  # nothing changed since
    core.handle(ResultReceived(sub.agent, ok_result(0, 1)), 16.0)
    assert core.on_timer(17.0).actions[0] == SaveState()
    core.handle(ResultReceived(sub.agent, ok_result(1, 1)), 19.0)
    assert core.on_timer(16.0).actions[0] == SaveState()  # the clock went back: no waiting for it
    out = core.finish(20.0, "stop")
    assert out.actions[-1] == SaveState()  # after the removals


def test_negotiation_cycles_while_agents_wait_and_right_after_submissions() -> None:
    core = MasterCore.new(range(4), LlicConfig(reschedule_interval=10.0, queue_poll_interval=100.0))
    a, b = of(core.start(2, now=0.0), SubmitAgent)
    out = core.handle(AgentSubmitted(a.agent, "1.0"), 1.0)
    assert of(out, Reschedule) == []  # b's submission is still under way
    out = core.handle(AgentSubmitted(b.agent, "2.0"), 2.0)
    assert of(out, Reschedule) == [Reschedule()] and out.wakeup == 4.0  # and again 2 s later
    assert of(core.on_timer(4.0), Reschedule) == [Reschedule()]
    assert of(core.on_timer(13.0), Reschedule) == []  # not yet: every 10 s now
    assert of(core.on_timer(14.0), Reschedule) == [Reschedule()]
    core.handle(AgentConnected(a.agent), 15.0)
    core.handle(AgentConnected(b.agent), 15.0)
    assert of(core.on_timer(24.0), Reschedule) == []  # nobody waits for a slot


def test_queue_polls_one_at_a_time_and_jobs_learned_meanwhile_count_as_alive() -> None:
    core = MasterCore.new(range(6), LlicConfig(queue_poll_interval=15.0, window_size=1))
    a, b = of(core.start(2, now=0.0), SubmitAgent)
    core.handle(AgentSubmitted(a.agent, "1.0"), 1.0)
    out = core.on_timer(15.0)
    assert of(out, PollQueue) == [PollQueue()]
    assert of(core.on_timer(40.0), PollQueue) == []  # the first is not answered yet
    core.handle(AgentSubmitted(b.agent, "2.0"), 16.0)  # while the schedd was being asked
    out = core.handle(QueueSnapshot(frozenset({"1.0"})), 17.0)
    assert of(out, RemoveAgents) == [] and core.chefs[1].state is ChefState.LAUNCHED
    assert out.wakeup is not None and out.wakeup <= 32.0
    assert of(core.on_timer(32.0), PollQueue) == [PollQueue()]
    out = core.handle(QueueSnapshot(frozenset({"1.0"})), 33.0)
    assert of(out, RemoveAgents) == [
        RemoveAgents(("2.0",), f"agent {b.agent} failed: agent job left the schedd queue")
    ]
    assert of(core.on_timer(48.0), PollQueue) == [PollQueue()]
    core.handle(QueuePollFailed("schedd restarting"), 49.0)
    assert of(core.on_timer(64.0), PollQueue) == [PollQueue()]  # tried again a poll interval later


def test_the_window_grows_only_after_enough_short_runs_and_a_long_one_takes_it_back() -> None:
    window = AgentWindow(LlicConfig(window_size=4, max_window_size=16))
    assert (window.base, window.most, window.now) == (4, 16, 4)
    for _ in range(15):
        window.saw(0.001)
    assert window.now == 4  # 15 results: fewer than the most the window may hold
    window.saw(0.0)  # not measured: not counted
    assert window.now == 4
    window.saw(0.001)
    assert window.now == 16  # 0.05 s of work would be 50 tasks: the most, 16
    window.saw(SHORT_QUEUE_S / 10)
    assert window.now == 10  # a longer run counts at once: 10 of them hold SHORT_QUEUE_S
    window.saw(1.0)
    assert window.now == 4  # a long task: WINDOW_SIZE again with its first result
    window.saw(0.001)
    assert window.now == 4  # shorter runs are followed slowly (the estimate ~0.9 s)
    for _ in range(100):
        window.saw(0.001)
    assert window.now == 16


def test_a_most_window_at_or_below_window_size_keeps_window_size() -> None:
    for most in (1, 4):
        window = AgentWindow(LlicConfig(window_size=4, max_window_size=most))
        for _ in range(50):
            window.saw(0.001)
        assert (window.most, window.now) == (4, 4)


def test_short_tasks_fill_agents_to_the_grown_window_and_every_result_counts_once() -> None:
    core, [a, b] = started(400, 2, window_size=2, max_window_size=8)
    held: dict[str, list[Assignment]] = {}
    for sub in (a, b):
        out = core.handle(AgentConnected(sub.agent), 1.0)
        assert WelcomeAgent(sub.agent, 8, 0) in out.actions  # the most; it sends WINDOW_SIZE's
        held[sub.agent] = tasks_sent(out, sub.agent)
        assert len(held[sub.agent]) == 2
    now, fills, recorded = 1.0, [], []

    def answer(agent: str, run_time: float) -> None:
        """Every held task's result in one `results` message; what comes back is the refill."""
        nonlocal now
        now += 0.01
        results = [
            TaskResult(t.process, t.attempt, "ok", exit_code=0, run_time=run_time) for t in held[agent]
        ]
        recorded.extend(r.process for r in results)
        held[agent] = []
        out = core.handle_results([ResultReceived(agent, r) for r in results], now)
        for name in held:  # the balancing may fill the other agent too
            held[name] += tasks_sent(out, name)
        fills.append(len(held[agent]))

    for _ in range(3):
        answer(a.agent, 0.001)
        answer(b.agent, 0.001)
    assert fills[:4] == [2, 2, 2, 8]  # grown once 8 results were seen (and a filled up too)
    assert len(held[a.agent]) == 8
    answer(a.agent, 1.0)  # a long one: its agent is refilled to WINDOW_SIZE only
    assert fills[-1] == 2
    while core.book.queued or any(held.values()):
        for agent in (a.agent, b.agent):
            if held[agent]:
                answer(agent, 0.001)
    assert max(fills) == 8
    # every task ran once, and each result was recorded once
    assert sorted(recorded) == list(range(400))
    assert all(r.state is TaskState.DONE and r.recorded == 1 for r in core.book.records())


def test_a_repeated_or_stale_result_moves_neither_the_window_nor_the_next_attempts_reservation() -> None:
    """A result counts for the window and ends its inputs' reservation once, and only as the
    running attempt's own. Hypothesis found the repeat: a duplicate counted as a second short
    run grew the window, and the agent was sent a task no result had made room for."""
    core, [sub] = started(3, 1, window_size=1, max_window_size=2)
    core.handle(AgentConnected(sub.agent), 1.0)
    first = TaskResult(0, 1, "ok", exit_code=0, host="n1", run_time=0.001)
    out = core.handle(ResultReceived(sub.agent, first), 2.0)
    assert tasks_sent(out, sub.agent) == [Assignment(1, 1)]  # one short run seen: window still 1
    before = core.book.counts()
    out = core.handle(ResultReceived(sub.agent, first), 3.0)
    assert not tasks_sent(out, sub.agent) and core.book.counts() == before

    net = NetAdmit(Capacity.parse("10.1.0.0/16:100Mbps"), sizes=dict.fromkeys(range(2), 10))
    core = MasterCore.new(range(2), LlicConfig(window_size=1, max_task_failures=3), net)
    [a, b] = of(core.start(2, now=0.0), SubmitAgent)
    core.handle(AgentConnected(a.agent, "10.1.0.5"), 1.0)
    assert 0 in net.reservations  # process 0's inputs are on their way to a
    core.handle(ResultReceived(a.agent, bad_result(0, 1)), 2.0)  # failed: queued again
    out = core.handle(AgentConnected(b.agent, "10.1.0.6"), 3.0)
    assert (b.agent, 0, 2) in {(x.agent, t.process, t.attempt) for x in of(out, SendTasks) for t in x.tasks}
    assert 0 in net.reservations  # the second attempt's inputs, to b
    core.handle(ResultReceived(a.agent, bad_result(0, 1)), 4.0)  # the first attempt's, again
    assert 0 in net.reservations


def test_a_late_copy_of_an_earlier_runs_result_leaves_the_next_runs_large_return_its_turn() -> None:
    net = NetAdmit(Capacity.parse("10.1.0.0/16:100Mbps"), sizes=dict.fromkeys(range(2), 0))
    core = MasterCore.new(range(2), LlicConfig(window_size=1, max_task_failures=3), net)
    [a] = of(core.start(1, now=0.0), SubmitAgent)
    core.handle(AgentConnected(a.agent, "10.1.0.5"), 1.0)
    out = core.handle(ResultReceived(a.agent, bad_result(0, 1)), 2.0)
    assert tasks_sent(out, a.agent) == [Assignment(0, 2)]  # failed: run again, on the same agent
    core.handle(BulkReady(a.agent, 0, 2, 50_000_000), 3.0)
    assert (net.bulk.granted["10.1.0.0/16"].process, net.bulk.granted["10.1.0.0/16"].attempt) == (0, 2)
    core.handle(ResultReceived(a.agent, bad_result(0, 1)), 4.0)  # the first run's, again
    assert "10.1.0.0/16" in net.bulk.granted


def test_what_an_earlier_run_of_a_task_sends_leaves_its_rerun_on_the_same_agent_alone() -> None:
    """Held while its inputs travelled, released, and sent to the same agent again as run 2:
    run 1's cancelled result, and the end of run 1's input transfer, leave run 2's reservation
    (as the attempt says); run 1's large result, when its turn comes, leaves run 2's waiting
    request in line, which is granted next (else its agent would keep the result for good)."""
    net = NetAdmit(Capacity.parse("10.1.0.0/16:100Mbps"), sizes=dict.fromkeys(range(3), 10))
    core = MasterCore.new(range(3), LlicConfig(window_size=1), net)
    [a] = of(core.start(1, now=0.0), SubmitAgent)
    core.handle(AgentConnected(a.agent, "10.1.0.5"), 1.0)
    core.handle(UserRequest("hold", (0,), "user"), 2.0)
    core.handle(UserRequest("release", (0,), "user"), 2.1)
    assert (core.book[0].state, core.book[0].attempt) == (TaskState.RUNNING, 2) and 0 in net.reservations
    cancelled = TaskResult(0, 1, "prepare_failed", error="cancelled", host="n1")
    core.handle(ResultReceived(a.agent, cancelled), 3.0)
    core.handle(TransferDone(a.agent, 0, IN, 10, 1.0, 3.1, attempt=1), 3.1)
    assert net.reservations[0].since == 2.1  # run 2's
    core.handle(TransferDone(a.agent, 0, IN, 10, 2.1, 3.2, attempt=2), 3.2)
    assert 0 not in net.reservations

    net = NetAdmit(Capacity.parse("10.1.0.0/16:100Mbps"), sizes=dict.fromkeys(range(3), 0))
    core = MasterCore.new(range(3), LlicConfig(window_size=1), net)
    a, b = of(core.start(2, now=0.0), SubmitAgent)
    core.handle(AgentConnected(a.agent, "10.1.0.5"), 1.0)
    core.handle(AgentConnected(b.agent, "10.1.0.6"), 1.0)
    core.handle(BulkReady(b.agent, 1, 1, 50_000_000), 2.0)  # b's return has the subnet's turn
    core.handle(BulkReady(a.agent, 0, 1, 50_000_000), 2.1)  # a's run 1 waits
    core.handle(UserRequest("hold", (0,), "user"), 2.2)
    core.handle(UserRequest("release", (0,), "user"), 2.3)
    out = core.handle(ResultReceived(a.agent, ok_result(2, 1)), 2.4)
    assert tasks_sent(out, a.agent) == [Assignment(0, 2)]
    core.handle(BulkReady(a.agent, 0, 2, 50_000_000), 3.0)  # run 2's waits too
    core.handle(TransferDone(b.agent, 1, OUT, 50_000_000, 3.0, 4.0, attempt=1), 4.0)
    core.handle(ResultReceived(b.agent, ok_result(1, 1)), 4.0)
    core.handle(TransferDone(a.agent, 0, OUT, 50_000_000, 4.0, 5.0, attempt=1), 5.0)  # run 1's, in
    core.handle(ResultReceived(a.agent, ok_result(0, 1)), 5.0)
    granted = net.bulk.granted["10.1.0.0/16"]
    assert (granted.agent, granted.process, granted.attempt) == (a.agent, 0, 2)


def test_the_result_of_a_run_cancelled_meanwhile_ends_its_input_reservation() -> None:
    """A task held while its inputs were on their way (none had arrived: no transfer ended):
    the agent's result for the cancelled run is stale, yet the reservation is its, and would
    keep the agent's one paced transfer busy for good, its other tasks waiting."""
    net = NetAdmit(Capacity.parse("10.1.0.0/16:100Mbps"), sizes=dict.fromkeys(range(3), 10))
    core = MasterCore.new(range(3), LlicConfig(window_size=1), net)
    [a] = of(core.start(1, now=0.0), SubmitAgent)
    core.handle(AgentConnected(a.agent, "10.1.0.5"), 1.0)
    assert 0 in net.reservations
    core.handle(UserRequest("hold", (0,), "user"), 2.0)
    cancelled = TaskResult(0, 1, "prepare_failed", error="cancelled", host="n1")
    out = core.handle(ResultReceived(a.agent, cancelled), 3.0)
    assert 0 not in net.reservations and tasks_sent(out, a.agent) == [Assignment(1, 1)]


def test_bulk_ready_counts_only_for_a_run_its_agent_holds() -> None:
    """A bulk_ready for a run the agent was never given (or has reported) would take its
    subnet's turn for good, the honest agents' large results waiting behind it, and a flood of
    them would grow the waiting queue: ignored, with a note naming the agent. A run cancelled
    meanwhile is still the agent's: its large result gets its turn (the agent waits for it)."""
    net = NetAdmit(Capacity.parse("10.1.0.0/16:100Mbps"), sizes=dict.fromkeys(range(6), 0))
    core = MasterCore.new(range(6), LlicConfig(window_size=2), net)
    a, b = of(core.start(2, now=0.0), SubmitAgent)
    assert tasks_sent(core.handle(AgentConnected(a.agent, "10.1.0.5"), 1.0), a.agent) == [
        Assignment(0, 1),
        Assignment(1, 1),
    ]
    assert tasks_sent(core.handle(AgentConnected(b.agent, "10.1.0.6"), 1.0), b.agent)[0] == Assignment(2, 1)
    core.handle(ResultReceived(a.agent, ok_result(1, 1)), 1.5)  # a now holds 0.1 and 4.1
    for process, attempt in ((9999, 1), (2, 1), (0, 2), (1, 1)):  # never given, b's, no such run, reported
        out = core.handle(BulkReady(a.agent, process, attempt, 50_000_000), 2.0)
        assert not of(out, GrantBulk) and a.agent in out.notes[0] and "does not hold" in out.notes[0]
    for n in range(1000):
        core.handle(BulkReady(a.agent, 10_000 + n, 1, 1), 2.0)
    assert not net.bulk.granted and not net.bulk.waiting
    out = core.handle(BulkReady(b.agent, 2, 1, 50_000_000), 3.0)
    assert [(g.agent, g.process) for g in of(out, GrantBulk)] == [(b.agent, 2)]
    core.handle(UserRequest("hold", (0,), "user"), 4.0)  # a's run 0.1 is cancelled
    core.handle(BulkReady(a.agent, 0, 1, 50_000_000), 4.1)
    out = core.handle(TransferDone(b.agent, 2, OUT, 50_000_000, 3.0, 5.0, attempt=1), 5.0)
    assert [(g.agent, g.process, g.attempt) for g in of(out, GrantBulk)] == [(a.agent, 0, 1)]
    core.handle(ResultReceived(a.agent, TaskResult(0, 1, "ok", exit_code=0)), 6.0)
    assert not of(core.handle(BulkReady(a.agent, 0, 1, 50_000_000), 6.1), GrantBulk)  # reported


def test_a_granted_large_return_that_never_comes_passes_its_subnets_turn_on() -> None:
    """An agent that holds a run, is granted its large return and never sends it (hung, or
    lying) kept its subnet's turn as long as it kept the run: every honest agent's large result
    on the subnet waited behind it. The grant now has a time (twice the expected transfer at the
    granted rate, plus a grace); when it is up the next return goes, the late one gets no second
    turn, and its result is still taken when it comes."""
    net = NetAdmit(
        Capacity.parse("10.1.0.0/16:80Mbps"), sizes=dict.fromkeys(range(4), 0), bulk_threshold=1 << 24
    )
    core = MasterCore.new(range(4), LlicConfig(window_size=1), net)
    a, b = of(core.start(2, now=0.0), SubmitAgent)
    core.handle(AgentConnected(a.agent, "10.1.0.5"), 1.0)
    core.handle(AgentConnected(b.agent, "10.1.0.6"), 1.0)
    out = core.handle(BulkReady(a.agent, 0, 1, 100_000_000), 2.0)
    [grant] = of(out, GrantBulk)
    assert (grant.agent, grant.rate_bps) == (a.agent, 20e6)  # a quarter of the limit
    assert not of(core.handle(BulkReady(b.agent, 1, 1, 1_000_000_000), 3.0), GrantBulk)  # behind a's
    due = 2.0 + GRANT_GRACE + GRANT_SLACK * 8 * 100_000_000 / 20e6
    assert core.on_timer(due - 1).wakeup == due  # the core asks to be woken when a's time is up
    out = core.on_timer(due)
    assert [(g.agent, g.process) for g in of(out, GrantBulk)] == [(b.agent, 1)]
    assert any(a.agent in n and "turn passes on" in n for n in out.notes)
    assert net.bulk.snapshot()["expired"] == 1
    row = {"master_id": "m", "net": core.net_figures(due)}
    assert "0 waiting now, 1 not returned in their time" in render_net([row], "t")  # master_q -net
    assert not of(core.handle(BulkReady(a.agent, 0, 1, 100_000_000), due + 1), GrantBulk)
    assert net.bulk.duplicates == 1 and list(net.bulk.waiting) == []  # no second turn
    out = core.handle(ResultReceived(a.agent, ok_result(0, 1)), due + 2)
    assert core.book[0].state is TaskState.DONE and not net.bulk.overdue
    assert net.bulk.granted["10.1.0.0/16"].agent == b.agent  # b's return goes on


def test_a_grants_time_cannot_be_stretched_by_a_lie_and_counts_the_input_it_waits_behind() -> None:
    """A bulk_ready announcing 2**63 - 1 bytes set its grant's time 234,000 years ahead (the
    expiry undone): more than a result carries is ignored. A grant sent to an agent whose
    connection is still sending it a paced input waits behind that input: its time starts after."""
    net = NetAdmit(
        Capacity.parse("10.1.0.0/16:80Mbps"), sizes={0: 0, 1: 0, 2: 100_000_000}, bulk_threshold=1 << 24
    )
    core = MasterCore.new(range(3), LlicConfig(window_size=2), net)
    [a] = of(core.start(1, now=0.0), SubmitAgent)
    core.handle(AgentConnected(a.agent, "10.1.0.5"), 1.0)
    out = core.handle(BulkReady(a.agent, 0, 1, 2**63 - 1), 2.0)
    assert not of(out, GrantBulk) and "more than a result carries" in out.notes[0]
    assert not net.bulk.waiting and not net.bulk.granted
    core.handle(ResultReceived(a.agent, ok_result(0, 1)), 3.0)  # 2.1 (100 MB of input) goes out now
    assert net.pace(2) == 20e6
    assert len(of(core.handle(BulkReady(a.agent, 1, 1, 20_000_000), 4.0), GrantBulk)) == 1
    alone = 4.0 + GRANT_GRACE + GRANT_SLACK * 8 * 20_000_000 / 20e6
    assert net.bulk.next_due() == alone + 8 * 100_000_000 / 20e6  # after the 40 s of input


def test_connecting_agent_is_welcomed_before_its_tasks_and_results_are_answered() -> None:
    core, [sub] = started(3, 1, window_size=2)
    out = core.handle(AgentConnected(sub.agent), 1.0)
    welcome, tasks = out.actions[:2]
    # the welcome names the most the master may send (MAX_WINDOW_SIZE); it sends WINDOW_SIZE's
    assert welcome == WelcomeAgent(sub.agent, 32, 0) and isinstance(tasks, SendTasks)
    assert len(tasks.tasks) == 2
    assert tasks.rates == () and tasks.rate_of(0) is None  # no limits configured
    assert core.wants_result(sub.agent, 0, 1) and not core.wants_result(sub.agent, 0, 2)
    core.handle(ResultReceived(sub.agent, ok_result(0, 1)), 2.0)
    assert not core.wants_result(sub.agent, 0, 1)  # a duplicate: its files must not be placed again
    assert not core.wants_result("9.0.1", 1, 1)  # not one of ours


# ----------------------------------------------------------------------------- growing and shrinking


def connect_all(core: MasterCore, subs: list[SubmitAgent], now: float, first_job: int = 1) -> None:
    for i, sub in enumerate(subs):
        core.handle(AgentSubmitted(sub.agent, f"{first_job + i}.0"), now)
        core.handle(AgentConnected(sub.agent), now)


def test_agents_grow_when_more_slots_match_and_the_queue_is_worth_it() -> None:
    core, subs = started(100, 2, window_size=2, queue_poll_interval=5.0)
    assert [s.agent for s in subs] == ["1.0.1", "1.1.1"]
    connect_all(core, subs, 1.0)
    assert of(core.on_timer(5.0), CountSlots) == [CountSlots()]
    assert of(core.on_timer(6.0), CountSlots) == []  # one count at a time
    out = core.handle(SlotsCounted(5), 7.0)
    grown = of(out, SubmitAgent)
    assert [(s.chef, s.agent) for s in grown] == [(2, "1.2.1"), (3, "1.3.1"), (4, "1.4.1")]
    assert core.matching_slots == 5 and len(core.chefs) == 5
    assert of(core.handle(SlotsCounted(5), 8.0), SubmitAgent) == []  # nothing new
    assert of(core.on_timer(12.9), CountSlots) == []
    assert of(core.on_timer(13.0), CountSlots) == [CountSlots()]  # counted again an interval later


def test_growth_stops_at_max_chefs_and_at_the_queue() -> None:
    core, subs = started(100, 1, window_size=2, max_chefs_number=3)
    connect_all(core, subs, 1.0)
    assert len(of(core.handle(SlotsCounted(50), 2.0), SubmitAgent)) == 2
    core2, subs2 = started(3, 1, window_size=2)
    connect_all(core2, subs2, 1.0)  # holds 2 of 3: one task left in the queue
    assert len(of(core2.handle(SlotsCounted(50), 2.0), SubmitAgent)) == 1  # one agent, not 49


def test_no_growth_when_the_running_agents_drain_the_queue_before_a_new_one_could_start() -> None:
    core, [sub] = started(30, 1, window_size=2)
    core.handle(AgentSubmitted(sub.agent, "1.0"), 0.0)
    core.handle(AgentConnected(sub.agent), 4.0)
    assert core.agent_startup == 4.0  # submitted at 0, connected at 4
    for p in range(2):  # 2 tasks of 10 ms: 28 queued x 10 ms on one agent is 0.28 s, well under 4 s
        core.handle(ResultReceived(sub.agent, TaskResult(p, 1, "ok", exit_code=0, run_time=0.01)), 5.0)
    assert core.book.queued == 26
    assert of(core.handle(SlotsCounted(10), 6.0), SubmitAgent) == []
    core2, [sub2] = started(30, 1, window_size=2)
    core2.handle(AgentSubmitted(sub2.agent, "1.0"), 0.0)
    core2.handle(AgentConnected(sub2.agent), 4.0)
    for p in range(2):  # the same with tasks of 10 s: 26 x 10 s is worth more agents
        core2.handle(ResultReceived(sub2.agent, TaskResult(p, 1, "ok", exit_code=0, run_time=10.0)), 25.0)
    assert len(of(core2.handle(SlotsCounted(10), 26.0), SubmitAgent)) == 9


def test_agents_waiting_for_a_slot_are_dismissed_as_soon_as_nothing_is_queued() -> None:
    """Not at the next queue read (QUEUE_POLL_INTERVAL later): a slot freed meanwhile would start
    an agent only to tell it no_more_tasks (seen on real HTCondor: the schedd reuses the claim of
    an agent that finished for one still waiting, at once)."""
    core, subs = started(4, 3, window_size=2, queue_poll_interval=5.0)
    a, b, c = subs
    core.handle(AgentSubmitted(c.agent, "3.0"), 0.5)  # waits for a slot
    connect_all(core, [a], 1.0)  # holds 2 of 4
    assert core.chefs[2].state is ChefState.LAUNCHED
    core.handle(AgentSubmitted(b.agent, "2.0"), 1.0)
    out = core.handle(AgentConnected(b.agent), 1.5)  # takes the last 2: nothing queued
    assert core.book.queued == 0
    assert of(out, RemoveAgents) == [RemoveAgents(("3.0",), f"agent {c.agent}: nothing queued for it")]
    assert core.chefs[2].state is ChefState.TERMINATED and core.chefs[2].rec.recoveries == 0
    assert of(core.handle(AgentConnected(c.agent), 2.0), RefuseAgent)  # too late: it was let go
    out = core.handle(ConnectionBroken(a.agent, "reset"), 3.0)  # its 2 tasks come back
    relaunched = [s.chef for s in of(out, SubmitAgent)]
    assert sorted(relaunched) == [0, 2]  # the broken one's chef, and the dismissed one again
    out = core.finish(4.0, "stop")
    assert "3.0" in {j for r in of(out, RemoveAgents) for j in r.job_ids}


def test_an_agent_dismissed_before_its_job_id_is_known_is_removed_when_it_is() -> None:
    core, subs = started(2, 2, window_size=2)
    a, b = subs
    connect_all(core, [a], 1.0)  # takes both tasks; b's submission is still under way
    assert core.chefs[1].state is ChefState.TERMINATED
    assert not core.still_launching(b.agent)  # the driver drops it if it has not submitted yet
    out = core.handle(AgentSubmitted(b.agent, "2.0"), 1.5)  # else its job goes as soon as known
    assert [r.job_ids for r in of(out, RemoveAgents)] == [("2.0",)]
    assert of(core.handle(QueueSnapshot(frozenset({"1.0"})), 2.0), SubmitAgent) == []  # no recovery


def test_finish_gives_agents_that_finished_time_to_leave_before_removing_them() -> None:
    core, subs = started(3, 3, window_size=2)
    a, b, c = subs
    connect_all(core, [a, b], 1.0)  # a holds 0 and 1, b holds 2
    core.handle(AgentSubmitted(c.agent, "3.0"), 1.0)  # still waiting for a slot
    for process, agent in ((0, a), (1, a), (2, b)):
        core.handle(ResultReceived(agent.agent, ok_result(process, 1)), 2.0)
    assert core.over and core.status is MasterStatus.DONE
    out = core.finish(3.0)
    kinds = [type(x) for x in out.actions]
    assert kinds == [RemoveAgents, LetAgentsLeave, RemoveAgents, SaveState]
    first, leave, last, _ = out.actions
    assert first.job_ids == ("3.0",)  # the one still waiting goes at once
    assert leave == LetAgentsLeave(("1.0", "2.0"), AGENT_EXIT_GRACE)
    assert last.job_ids == ("1.0", "2.0")
    stopped, [s] = started(5, 1)
    connect_all(stopped, [s], 1.0)
    out = stopped.finish(2.0, "stopped by signal SIGTERM")  # not done: no grace for anyone
    assert of(out, LetAgentsLeave) == [] and of(out, RemoveAgents)[0].job_ids == ("1.0",)


def test_prelaunched_agents_are_adopted_by_the_first_run() -> None:
    config = LlicConfig(window_size=2, initial_jobs_number=2)
    core = MasterCore.new(range(10), config)
    out = core.prelaunch(3, 0.0)
    subs = of(out, SubmitAgent)
    assert [(s.agent, s.initial) for s in subs] == [("1.0.1", ()), ("1.1.1", ()), ("1.2.1", ())]
    for i, sub in enumerate(subs):
        core.handle(AgentSubmitted(sub.agent, f"70.{i}"), 0.5)
    info = MasterInfo("m", "tester", 1, "job.sub", 0)
    saved = snapshot(core, info, 1.0)
    assert saved.run == 0 and saved.status is MasterStatus.RUNNING and core.book.queued == 10
    master = restore(saved)
    out = master.start(None, 5.0)
    assert out.actions[0] == SaveState() and of(out, SubmitAgent) == [] and of(out, RemoveAgents) == []
    assert master.run == 1 and [c.rec.job_id for c in master.chefs] == ["70.0", "70.1", "70.2"]
    assert of(master.on_timer(5.0), CountSlots) == [CountSlots()]  # not counted yet: at once
    out = master.handle(AgentConnected("1.1.1"), 6.0)
    assert WelcomeAgent("1.1.1", 32, 0) in out.actions and len(tasks_sent(out, "1.1.1")) == 2
    try:
        master.prelaunch(3, 7.0)
        raise AssertionError("prelaunch after a start")
    except ValueError:
        pass


def test_prelaunched_agents_still_waiting_get_a_negotiation_cycle_when_the_master_starts() -> None:
    # not one RESCHEDULE_INTERVAL later: the cycles asked for at their release often miss some
    config = LlicConfig(reschedule_interval=10.0, queue_poll_interval=100.0)
    core = MasterCore.new(range(10), config)
    subs = of(core.prelaunch(2, 0.0), SubmitAgent)
    for i, sub in enumerate(subs):
        core.handle(AgentSubmitted(sub.agent, f"70.{i}"), 0.5)
    master = restore(snapshot(core, MasterInfo("m", "tester", 1, "job.sub", 0), 1.0), config)
    out = master.start(None, 5.0)
    assert of(out, Reschedule) == [Reschedule()] and of(out, SubmitAgent) == []
    assert of(master.on_timer(7.0), Reschedule) == [Reschedule()]  # and once more 2 s later
    assert of(master.on_timer(16.0), Reschedule) == []  # then every RESCHEDULE_INTERVAL
    assert of(master.on_timer(17.0), Reschedule) == [Reschedule()]
    for sub in subs:
        master.handle(AgentConnected(sub.agent), 18.0)
    assert of(master.on_timer(27.0), Reschedule) == []  # nobody waits for a slot


def test_prelaunched_agents_that_cannot_reach_the_master_are_replaced_without_a_recovery() -> None:
    core = MasterCore.new(range(10), LlicConfig())
    subs = of(core.prelaunch(2, 0.0), SubmitAgent)
    for i, sub in enumerate(subs):
        core.handle(AgentSubmitted(sub.agent, f"70.{i}"), 0.5)
    master = restore(snapshot(core, MasterInfo("m", "tester", 1, "job.sub", 0), 1.0))
    out = master.start(None, 5.0, adopt=False)
    assert of(out, RemoveAgents) == [RemoveAgents(("70.0", "70.1"), "told another port")]
    assert [s.agent for s in of(out, SubmitAgent)] == ["1.0.2", "1.1.2"]
    assert [c.rec.recoveries for c in master.chefs] == [0, 0]
    assert of(master.handle(AgentConnected("1.0.1"), 6.0), RefuseAgent)


def test_agent_startup_is_learned_from_submission_to_connection() -> None:
    core, [a, b] = started(20, 2)
    assert core.agent_startup == AGENT_STARTUP_GUESS
    core.handle(AgentSubmitted(a.agent, "1.0"), 0.2)
    core.handle(AgentConnected(a.agent), 3.0)
    assert core.agent_startup == 3.0
    core.handle(AgentSubmitted(b.agent, "2.0"), 0.2)
    core.handle(AgentConnected(b.agent), 5.0)
    assert core.agent_startup == 4.0

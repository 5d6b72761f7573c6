"""The master's decisions (seed §3.7, §3.10), as a pure state machine: `MasterCore`.

It owns the chefs (llic/chef.py) and the `TaskBook` and makes §3.7's main-loop decisions. The
trio driver (llic/master.py) is a thin loop around it: it feeds events (llic/events.py) and the
current time to `handle`, carries out the returned actions (submit an agent, send tasks, close a
connection, condor_rm), and saves the state when `dirty`. Nothing here reads a clock, sleeps,
touches a socket or calls HTCondor, so every interleaving can be tested directly.

What the driver must do for the guarantees to hold across master crashes: save the state when
`save_now` is set (after `start`, before carrying out its actions, so that a run number is never
used twice; and as soon as an agent's job id is learned, so that no agent job is forgotten) and
otherwise when `dirty`, at most STATE_SAVE_INTERVAL apart. An agent job whose submission was under
way when the master died is unknown to the saved state: submit agents with an attribute naming
the master and also remove by it, to catch those.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Sequence
from enum import StrEnum

from llic.chef import (
    AgentVanished,
    Chef,
    ChefEvent,
    ChefRecord,
    ChefState,
    Launch,
    Terminate,
    parse_agent_name,
)
from llic.config import LlicConfig
from llic.events import (
    AgentConnected,
    AgentSubmitted,
    BulkReady,
    ConnectionBroken,
    GrantBulk,
    MasterEvent,
    Output,
    QueueSnapshot,
    RefuseAgent,
    RemoveAgents,
    ResultReceived,
    TransferDone,
)
from llic.netadmit import IN, NetAdmit, Transfer
from llic.taskbook import TaskBook, TaskState


class MasterStatus(StrEnum):
    RUNNING = "running"
    DONE = "done"  # every task done or failed for good
    GAVE_UP = "gave_up"  # tasks left, every chef unrecoverable
    STOPPED = "stopped"  # finish() before either (the master was told to stop)


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

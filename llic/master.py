"""llic's master (seed §3.7-3.8, §3.10): the trio driver around `MasterCore`.

    python -m llic.master STATE_FILE [--host ADDR] [--agent-python PATH] [--local-agents]
    (installed as `llic-master`)

master_submitter submits this in the scheduler universe, one per queue statement; HTCondor
re-runs it when it is killed or exits non-zero, and it resumes from STATE_FILE. What it does:

1. Loads the state file (`llic.state`) and the queue block's submit description next to it
   (`MasterInfo.submit_file`), and resolves the tasks with `$(Cluster)` = `MasterInfo.cluster`.
   An unusable state file or description is one line on stderr and exit status 2, with nothing
   deleted or rewritten (master_submitter's `on_exit_hold` then holds the job, so HTCondor does
   not re-run a master that cannot start).
2. Opens its TCP server on INITIAL_MASTER_PORT_NUMBER or, if taken, any free port, removes agent
   jobs a previous run may have left (by the `LlicMaster` job attribute: an agent submitted just
   before a crash is in no state file), and starts the core (`MasterCore.start`); it builds the
   agent zipapp into its output directory (the state file's directory) meanwhile, serving the
   agents submitted with it, and submits agents of its own once the zipapp is there.
3. Carries out the core's actions: agents are submitted through an `AgentRunner` (llic/runners.py;
   HTCondor jobs described by llic/agent_job.py); their connections are authenticated and served
   by llic/connection.py, whose events go to the core; a result counts only through
   `ResultReceived` (the core records each task once).
4. Asks the schedd for a negotiation cycle (`Reschedule`), reads which agent jobs are still idle
   or running (`PollQueue`, answered with `QueueSnapshot`: an agent that died before connecting,
   or was held, or removed, is noticed) and saves the state file (`SaveState`) when the core
   says so; the core's timer (`on_timer`, at each output's `wakeup`) is where those come from.
5. At the end removes every agent job it ever submitted (and, by attribute, any other of this
   master's), saves, and exits 0 (all done) or 3 (gave up: every chef unrecoverable;
   master_submitter's `on_exit_hold` holds it with that reason).

This module only feeds the core and carries out its output: every decision (how many agents,
which tasks go where, when to save, reschedule or poll, when to give up) is `MasterCore`'s
(llic/master_core.py), so that the same decisions can be tested without a network or a clock.
What a master works from is its `Plan` (llic/plan.py). The driver's own counters (connections,
malformed messages, refusals, failed submissions...) go into the state file's `extra`.

The agents' address for the master (HOST): `--host`, else the IP address of the schedd the
master runs next to (from `_condor_SCHEDD_ADDRESS_FILE`, which HTCondor gives scheduler-universe
jobs, else from the schedd's ad), else the local address of the route to the collector, else
the host name's address. The schedd listens where execute machines reach it (NETWORK_INTERFACE),
which is what agents need too. The master listens there too (MASTER_LISTEN_ADDRESS overrides
it; `*` is every address), not on every interface of the submit host.

Before an agent has authenticated, it costs the master little: llic/connection.py caps how many
connections may be unauthenticated at once (the oldest is dropped for a new one), what each may
send before the handshake completes (a few kB) and how long it may take.

`--local-agents` runs agents as local processes instead of HTCondor jobs (llic/runners.py's LocalAgents):
for tests and the dispatch benchmark; no HTCondor is involved then.
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import signal
import socket
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog
import trio

from common.condor import Gateway, GatewayError
from common.timer import Wakeup
from llic import protocol
from llic.agent_build import build_agent
from llic.agent_job import AGENT_PYTHON, PORT_SPAN, AgentSetup, prepare_agent, read_secret
from llic.connection import HANDSHAKE_TIMEOUT, Connections
from llic.eventlog import append_events, format_event
from llic.events import (
    Action,
    AgentSubmitted,
    CancelTask,
    CloseConnection,
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
    SendNoMoreTasks,
    SendTasks,
    SlotsCounted,
    SubmitAgent,
    SubmitFailed,
    UserRequest,
    WelcomeAgent,
    WriteEvents,
)
from llic.master_core import MasterStatus
from llic.master_q import master_ad, summarize
from llic.master_token import held_token_dir, remove_token
from llic.plan import Plan, PlanError, load_plan
from llic.runners import AgentRunner, GatewayAgents, LocalAgents, usable_ip
from llic.state import MasterState, StateFileError, StateWriter, restore, snapshot
from llic.user_requests import read_requests, remove_request

log = structlog.get_logger("llic.master")

EXIT_DONE = 0
EXIT_FAILED = 1  # anything unexpected: HTCondor re-runs the master, which resumes
EXIT_UNUSABLE = 2  # state file or submit description unusable: held, not re-run
EXIT_GAVE_UP = 3  # every chef unrecoverable: held, not re-run
SUBMIT_BACKOFF_MAX = 30.0  # seconds between agent submissions that keep failing, at most
PUBLISH_INTERVAL = 5.0  # seconds between updates of the progress in the master's job ad, at least
REQUEST_POLL_INTERVAL = 1.0  # seconds between looks for master_release / master_rm requests
EVENTS_FLUSH_TIMEOUT = 10.0  # seconds the end waits for the job event logs to catch up, at most
_UNSET = object()


class Master:
    """One run of one master. `run()` returns the exit status."""

    def __init__(
        self,
        plan: Plan,
        state: MasterState,
        runner: AgentRunner,
        *,
        host: str | None = None,
        port: int | None = None,
        agent_python: str = AGENT_PYTHON,
        handshake_timeout: float = HANDSHAKE_TIMEOUT,
    ) -> None:
        self.plan = plan
        self.state_file = StateWriter(plan.state_path)
        self.config = plan.config
        self.logs = plan.logs()  # process -> its job event log (tasks with a `log` only)
        self.core = restore(
            state,
            plan.config,
            plan.net_admission(state.extra.get("net")),
            policy=plan.policy(),
            log_events=bool(self.logs),
        )
        self.runner = runner
        self.extra: dict[str, Any] = dict(state.extra)
        self.counters: Counter[str] = Counter()
        # agents master_submitter submitted with the master job (prelaunched) know its secret
        # and look for it on a range of ports; a restarted master has removed them
        self.prelaunched = state.run == 0 and bool(state.chefs)
        secret = read_secret(plan.outdir) if self.prelaunched else None
        self.secret = secret if secret is not None else protocol.make_secret()
        self.prelaunch_ok = secret is not None
        self.host = host
        self.port = plan.config.initial_master_port_number if port is None else port
        self.ports = _port_range(self.extra.get("prelaunch"), self.port)
        self.agent_python = agent_python
        self.log = log.bind(master=plan.info.master_id)
        self.links = Connections(
            plan,
            self.secret,
            self.feed,
            self.core.wants_result,
            self.counters,
            feed_results=self.feed_results,
            handshake_timeout=handshake_timeout,
            log=self.log,
        )
        self.setup: AgentSetup | None = None  # known once the zipapp is built and the port open
        self._setup_ready = trio.Event()
        self.stop_reason: str | None = None
        self.exit_signal: int | None = None
        self._over = trio.Event()
        self._wakeup = Wakeup()  # the core's timer, on trio's clock
        self._wakes_at: float | None = math.nan  # the core's last wakeup (epoch), set on _wakeup
        self._applied = 0  # outputs carried out so far
        self._reschedule_wanted = trio.Event()
        self._poll_wanted = trio.Event()
        self._count_wanted = trio.Event()
        self._submit_send, self._submit_recv = trio.open_memory_channel[SubmitAgent](math.inf)
        self._remove_send, self._remove_recv = trio.open_memory_channel[RemoveAgents](math.inf)
        self._published: dict[str, object] = {}  # what the job ad says of our progress
        self._publish_failed = False
        self._events_send, self._events_recv = trio.open_memory_channel[WriteEvents | None](math.inf)
        self._events_queued = 0  # WriteEvents sent to _event_writer, and how many it has written
        self._events_written = 0

    # ------------------------------------------------------------------ the core

    def feed(self, event: MasterEvent) -> None:
        """An event for the core, now; its output is carried out at once."""
        self.apply(self.core.handle(event, time.time()))

    def feed_results(self, events: list[ResultReceived]) -> None:
        """The results of one `results` message for the core, now, as one batch."""
        self.apply(self.core.handle_results(events, time.time()))

    def apply(self, out: Output) -> None:
        """Carry out the core's output in order: saves at once, every other action queued where
        it belongs (nothing here waits, so events are handled in the order they happened)."""
        self._applied += 1
        for note in out.notes:
            self.log.info(note)
        deliver = self.links.deliver
        for action in out.actions:
            if type(action) is SendTasks:  # most of them, in a flood of short tasks
                deliver(action)
            else:
                self.execute(action)
        if out.wakeup != self._wakes_at:  # most events leave it where it was
            self._wakes_at = out.wakeup
            delay = math.inf if out.wakeup is None else max(0.0, out.wakeup - time.time())
            self._wakeup.set(trio.current_time() + delay)
        if self.core.over:
            self._over.set()

    def execute(self, action: Action) -> None:
        """One action, without waiting: what takes time goes to the task that does it."""
        match action:
            case SaveState():
                if self.core.over and self._events_written < self._events_queued:
                    pass  # the end: _finish saves it once the job event logs are written
                else:
                    self.save()
            case SubmitAgent():
                self._submit_send.send_nowait(action)
            case RemoveAgents():
                self._remove_send.send_nowait(action)
            case Reschedule():
                self._reschedule_wanted.set()
            case PollQueue():
                self._poll_wanted.set()
            case CountSlots():
                self._count_wanted.set()
            case LetAgentsLeave():
                pass  # only `finish` gives it, and _finish waits for it there
            case WelcomeAgent() | SendTasks() | SendNoMoreTasks() | GrantBulk() | CancelTask():
                self.links.deliver(action)
            case WriteEvents():
                self._events_queued += 1
                self._events_send.send_nowait(action)
            case CloseConnection(agent=agent, reason=reason):
                self.links.close(agent, reason)
            case RefuseAgent(agent=agent, reason=reason):
                self.links.refuse(agent, reason)

    def save(self) -> None:
        """Write the state file now (atomic; StateFileError propagates: the master exits and
        HTCondor re-runs it from the last good save)."""
        self.state_file.write(self._encode_state())

    def _encode_state(self) -> tuple[int, bytes]:
        now = time.time()
        self.extra["counters"] = dict(self.counters)
        self.extra["agent_host"] = self.host
        self.extra["port"] = self.port
        self.extra["net"] = self.core.net_figures(now)
        state = snapshot(self.core, self.plan.info, now, self.extra, copy=False)
        return self.state_file.encode(state, self.core.take_changed())

    # ------------------------------------------------------------------ the run

    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> int:
        """The whole run, to its exit status; `task_status.started(port)` once agents can connect.

        Agents master_submitter submitted with the master (prelaunched) may be running already
        and trying to connect: the address and port come first (the schedd's address is read
        from the file HTCondor names), then only what the core needs before it answers them; the
        pool's slots are counted once it runs (CountSlots)."""
        info = self.plan.info
        if self.host is None:
            self.host = await self._find_host()
        listeners = await self._listen()
        self.port = listeners[0].socket.getsockname()[1]
        adopt = self.prelaunched and self.prelaunch_ok and self.port in self.ports
        if self.prelaunched and not adopt:
            why = "no secret file" if not self.prelaunch_ok else f"port {self.port} not in {self.ports}"
            self.log.warning("agents submitted with the master cannot reach this run: replaced", why=why)
        sizes = await trio.to_thread.run_sync(self.plan.input_sizes)
        self.log.info(
            "master starting",
            run=self.core.run + 1,
            tasks=str(self.core.counts()),
            mode=self.plan.mode,
            agents_connect_to=f"{self.host}:{self.port}",
            adopted=adopt,
        )
        if not self.prelaunched:  # agents of an earlier run, also ones no state file knows
            try:
                await self.runner.remove_all(info.master_id, "llic master starting: agents of an earlier run")
            except GatewayError as e:
                self.log.warning("could not remove earlier agents", error=str(e))
        slots: int | None = None
        if not self.core.chefs:  # a fresh start sizes its agents by the slots
            try:
                slots = await self.runner.slots(self.plan)
            except GatewayError as e:
                self.log.warning("could not count the pool's slots; starting one agent", error=str(e))
                slots = 1
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.links.serve, listeners, nursery)
            # the zipapp (a child Python compiles its bytecode) is only needed for the agents
            # this master submits itself: agents submitted with it are served meanwhile
            nursery.start_soon(self._build_setup)
            nursery.start_soon(self._submitter)
            nursery.start_soon(self._remover)
            nursery.start_soon(self._wakeup.run, self._on_timer)
            nursery.start_soon(self._rescheduler)
            nursery.start_soon(self._poller)
            nursery.start_soon(self._counter)
            nursery.start_soon(self._signals)
            nursery.start_soon(self._publisher)
            nursery.start_soon(self._requests)
            events_done = trio.Event()
            nursery.start_soon(self._event_writer, events_done)
            self.apply(self.core.start(slots, time.time(), input_sizes=sizes, adopt=adopt))
            task_status.started(self.port)
            await self._over.wait()
            await self._finish()
            self._events_send.send_nowait(None)
            with trio.move_on_after(30):
                await events_done.wait()  # the last events (removals, the end) are in the logs
            nursery.cancel_scope.cancel()
        status = self.core.status
        counts = self.core.counts()
        self.log.info("master finished", status=str(status), tasks=str(counts), counters=dict(self.counters))
        if status is MasterStatus.DONE:
            return EXIT_DONE
        if status is MasterStatus.GAVE_UP:
            left = self.core.unfinished()
            print(
                f"llic-master: gave up: every agent failed {self.config.num_agent_recoveries} recoveries;"
                f" {len(left)} tasks unfinished (processes {left[:20]}{'...' if len(left) > 20 else ''})",
                file=sys.stderr,
            )
            return EXIT_GAVE_UP
        return 128 + (self.exit_signal or 0) if self.exit_signal else EXIT_FAILED

    async def _finish(self) -> None:
        """The core's `finish`, carried out to its end here (not by the submitter and remover
        tasks, which would remove at once what must first get its grace): the state saved (how
        the run ended is known), connections closed, agents that are not leaving removed, those
        that finished given the core's grace to leave by themselves, then removed, every agent
        of this master removed by attribute, the state saved again, and the progress put into the
        job ad, last."""
        reason = self.stop_reason or ("all tasks done" if self.core.finished else "gave up")
        out = self.core.finish(time.time(), reason)
        for note in out.notes:
            self.log.info(note)
        await self._events_flushed()  # the state says done only once the logs say so too
        self.save()  # how it ended is known now: master_q and --wait need not wait for the grace
        with trio.move_on_after(60) as scope:
            scope.shield = True
            for action in out.actions:
                match action:
                    case RemoveAgents(job_ids=job_ids, reason=why):
                        await self._remove_quietly(job_ids, why)
                    case LetAgentsLeave(job_ids=job_ids, grace=grace):
                        if self.stop_reason is None:
                            await self._let_agents_leave(set(job_ids), grace)
                    case SaveState():
                        pass  # last, below
                    case _:
                        self.execute(action)
            try:
                await self.runner.remove_all(self.plan.info.master_id, f"llic master: {reason}")
            except GatewayError as e:
                self.log.warning("final removal by attribute failed", error=str(e))
            self.links.close_all(reason)
        self.save()
        with trio.move_on_after(10) as scope:
            scope.shield = True  # the job ad's last word on progress, also when cancelled
            await self.publish_progress()

    async def _let_agents_leave(self, leaving: set[str], grace: float) -> None:
        """Agents that finished their tasks exit by themselves within moments; removing them
        before that would only cut their output and log short."""
        with trio.move_on_after(grace):
            while leaving:
                try:
                    if not leaving & await self.runner.alive(self.plan.info.master_id):
                        return
                except GatewayError:
                    return
                await trio.sleep(0.5)

    def listen_host(self) -> str:
        """Where agents' connections are accepted: MASTER_LISTEN_ADDRESS, else the address agents
        are told to connect to (HOST), so that the master is not open on every interface."""
        configured = self.config.master_listen_address
        if configured == "*":
            return "0.0.0.0"
        return configured or self.host or "0.0.0.0"

    async def _listen(self) -> list[trio.SocketListener]:
        """On listen_host(): the first free port of _open_listeners' range, else any free port (seed §5)."""
        host = self.listen_host()
        try:
            return await self._open_listeners(host)
        except OSError as e:
            if e.errno != errno.EADDRNOTAVAIL or self.config.master_listen_address:
                raise
        # HOST is not an address of this machine (a schedd ad naming another host): agents would
        # not reach us there anyway; listen everywhere rather than not at all, and say so.
        self.counters["listen_fallback_any"] += 1
        self.log.warning("agent address is not local; listening on every address", host=host)
        return await self._open_listeners("0.0.0.0")

    async def _open_listeners(self, host: str) -> list[trio.SocketListener]:
        """The first free port of the range prelaunched agents scan (master_submitter's
        INITIAL_MASTER_PORT_NUMBER and the PORT_SPAN after it), else any free port."""
        for port in self.ports:
            try:
                return await trio.open_tcp_listeners(port, host=host)
            except OSError as e:
                if e.errno != errno.EADDRINUSE:
                    raise
        if self.ports:
            self.log.info("ports taken; using a free one", ports=f"{self.ports[0]}-{self.ports[-1]}")
        return await trio.open_tcp_listeners(0, host=host)

    async def _find_host(self) -> str:
        try:
            host = await self.runner.agent_host()
        except GatewayError as e:
            self.log.warning("could not ask the schedd for its address", error=str(e))
            host = None
        if host:
            return host
        return _route_address() or socket.gethostbyname(socket.gethostname())

    async def _signals(self) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            async for signum in signals:
                self.exit_signal = signum
                self.stop_reason = f"stopped by signal {signal.Signals(signum).name}"
                self.log.warning(self.stop_reason)
                self._over.set()
                return

    async def _event_writer(self, done: trio.Event) -> None:
        """Append the core's task events to the tasks' job event logs, in order (a thread does
        the writing); a log that cannot be written is a warning, not a reason to stop."""
        cluster = self.plan.info.cluster
        async for action in self._events_recv:
            if action is None:
                break
            texts: dict[str, list[str]] = {}
            for event in action.events:
                path = self.logs.get(event.process)
                if path is not None:
                    texts.setdefault(path, []).append(format_event(cluster, event))
            problems = await trio.to_thread.run_sync(append_events, texts)
            for problem in problems:
                self.counters["log_write_failures"] += 1
                self.log.warning("job event log not written", problem=problem)
            self._events_written += 1
        done.set()

    async def _events_flushed(self, timeout: float = EVENTS_FLUSH_TIMEOUT) -> None:
        """Wait (at most `timeout`) until every task event given so far is in the job event logs:
        a user who sees the run done (master_q, --wait) then reads its log finds every terminated
        event there, as after condor_wait."""
        with trio.move_on_after(timeout):
            while self._events_written < self._events_queued:
                await trio.sleep(0.01)

    async def _requests(self) -> None:
        """The user's master_release / master_rm / master_hold requests: files the commands put
        next to the state file (llic/requests.py); each goes to the core, which saves the state
        first, then the file is removed."""
        outdir = self.plan.outdir
        stuck: set[str] = set()  # names that could not be removed: reported once, then skipped
        while True:
            found = await trio.to_thread.run_sync(read_requests, outdir, stuck)
            for path, request in found:
                if isinstance(request, str):
                    self.log.warning("bad request file", file=str(path), problem=request)
                else:
                    self.feed(UserRequest(request.action, request.processes, request.reason))
                problem = remove_request(path, stuck)
                if problem is not None:
                    self.log.warning(
                        "request file cannot be removed: ignored", file=str(path), problem=problem
                    )
            await trio.sleep(REQUEST_POLL_INTERVAL)

    # ------------------------------------------------------------------ HTCondor side

    async def _build_setup(self) -> None:
        """Build the agent zipapp; the agents this master submits wait for it (`_submitter`)."""
        pyz = await trio.to_thread.run_sync(build_agent, self.plan.outdir)
        self.setup = AgentSetup(pyz, self.host, self.port, self.secret, self.agent_python)
        self._setup_ready.set()

    async def _submitter(self) -> None:
        """Submit agents one at a time. After a refusal the chef resubmits at once (and counts a
        recovery), so failures in a row are spaced out (1, 2, 4 ... 30 s): a schedd that is
        restarting should not use up every chef's NUM_AGENT_RECOVERIES in a second."""
        failures = 0
        await self._setup_ready.wait()
        async for action in self._submit_recv:
            if not self.core.still_launching(action.agent):
                continue  # dismissed, recovered or stopped while it waited here
            try:
                assert self.setup is not None
                description, notes = await trio.to_thread.run_sync(
                    prepare_agent, self.plan, action, self.setup
                )
                for note in notes:
                    self.log.warning(note)
                job_id = await self.runner.submit(description)
            except (GatewayError, OSError, protocol.ProtocolError) as e:
                self.counters["submit_failures"] += 1
                self.log.warning("agent submission failed", agent=action.agent, error=str(e))
                await trio.sleep(min(SUBMIT_BACKOFF_MAX, 2.0**failures))
                failures += 1
                self.feed(SubmitFailed(action.agent, str(e)))
                continue
            failures = 0
            self.log.debug("agent submitted", agent=action.agent, job=job_id)
            self.feed(AgentSubmitted(action.agent, job_id))

    async def _remover(self) -> None:
        async for action in self._remove_recv:
            await self._remove_quietly(action.job_ids, action.reason)

    async def _remove_quietly(self, job_ids: Sequence[str], reason: str) -> None:
        try:
            await self.runner.remove(job_ids, f"llic master {self.plan.info.master_id}: {reason}")
            self.log.debug("agents removed", jobs=list(job_ids), reason=reason)
        except GatewayError as e:
            self.log.warning("agent removal failed", jobs=list(job_ids), error=str(e))

    def progress_attrs(self) -> dict[str, object]:
        """The master's row as master_q shows it, as job ad attributes (llic.master_q.master_ad):
        the Llic* ones; the job ad has Owner, ClusterId and LlicMasterId already (and HTCondor
        lets no one edit the first two)."""
        now = time.time()
        # the core's own records, not copies: summarized at once, before the core can move on
        # (copying every record cost a 100,000-task master ~0.2 s of CPU per update)
        state = snapshot(self.core, self.plan.info, now, self.extra, copy=False)
        ad = master_ad(summarize(state, self.plan.state_path))
        return {k: v for k, v in ad.items() if k.startswith("Llic") and k != "LlicMasterId"}

    async def publish_progress(self) -> None:
        """Put what changed of `progress_attrs` into the master's job ad; a refusal is logged once."""
        attrs = self.progress_attrs()
        changed = {k: v for k, v in attrs.items() if self._published.get(k, _UNSET) != v}
        if not changed:
            return
        try:
            await self.runner.publish(self.plan.info.master_id, self.plan.info.cluster, changed)
        except GatewayError as e:
            if not self._publish_failed:
                self.log.warning("progress not written into the job ad", error=str(e))
            self._publish_failed = True
            return
        self._publish_failed = False
        self._published.update(changed)

    async def _publisher(self) -> None:
        """Every few seconds, the progress into the job ad (master_q without a state file)."""
        while True:
            await self.publish_progress()
            await trio.sleep(max(PUBLISH_INTERVAL, self.config.state_save_interval))

    async def _on_timer(self, _: float) -> None:
        """The core's timer. Its save (the periodic one, while results stream in) is encoded
        here and written by a thread, the rest of its output carried out after the write: the
        agents' connections are served meanwhile instead of waiting for two fsyncs."""
        out = self.core.on_timer(time.time())
        if out.actions and isinstance(out.actions[0], SaveState):
            encoded = self._encode_state()
            applied = self._applied
            await trio.to_thread.run_sync(self.state_file.write, encoded)
            del out.actions[0]
            if self._applied != applied:  # a later output knows better when the core wants its timer
                out.wakeup = self._wakes_at
        self.apply(out)

    async def _rescheduler(self) -> None:
        """Carry out Reschedule actions (§3.7 step 7), one call at a time: those that come while
        one is under way make one more."""
        while True:
            await self._reschedule_wanted.wait()
            self._reschedule_wanted = trio.Event()
            try:
                await self.runner.reschedule()
            except GatewayError as e:
                self.log.warning("reschedule failed", error=str(e))

    async def _counter(self) -> None:
        """Carry out CountSlots actions: the pool's slots matching the agents (how far they may
        grow)."""
        while True:
            await self._count_wanted.wait()
            self._count_wanted = trio.Event()
            try:
                matching: int | None = await self.runner.slots(self.plan)
            except GatewayError as e:
                self.log.warning("slot count failed", error=str(e))
                matching = None
            self.feed(SlotsCounted(matching))

    async def _poller(self) -> None:
        """Carry out PollQueue actions: which agent jobs are still idle or running (§3.7)."""
        while True:
            await self._poll_wanted.wait()
            self._poll_wanted = trio.Event()
            try:
                alive = await self.runner.alive(self.plan.info.master_id)
            except GatewayError as e:
                self.log.warning("queue poll failed", error=str(e))
                self.feed(QueuePollFailed(str(e)))
                continue
            self.feed(QueueSnapshot(frozenset(alive)))


def _port_range(prelaunch: Any, port: int) -> list[int]:
    """The ports to try, in order: the range master_submitter gave the prelaunched agents
    (state file `extra.prelaunch.ports`), else INITIAL_MASTER_PORT_NUMBER and the PORT_SPAN
    after it (0: none, any free port)."""
    if isinstance(prelaunch, dict):
        ports = prelaunch.get("ports")
        if isinstance(ports, list) and len(ports) == 2 and all(isinstance(p, int) for p in ports):
            return list(range(ports[0], ports[1] + 1))
    return list(range(port, min(port + PORT_SPAN, 65536))) if port else []


def _route_address() -> str | None:
    """The local address of the route to the collector (no packet is sent), a guess for
    machines where the schedd's address is not known."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 9618))
            ip = s.getsockname()[0]
    except OSError:
        return None
    return ip if usable_ip(ip) else None


# --------------------------------------------------------------------------------------------
# command line


def build_parser() -> argparse.ArgumentParser:
    """`llic-master`'s command line."""
    from common.cli import new_parser

    parser = new_parser(
        "llic-master", "An llic master (run by master_submitter as a scheduler-universe job)."
    )
    parser.add_argument("state_file", type=Path, help="the master's state file (master.<id>.state)")
    parser.add_argument("--host", help="the address agents connect to (default: the schedd's)")
    parser.add_argument("--port", type=int, help="first port to try (default INITIAL_MASTER_PORT_NUMBER)")
    parser.add_argument(
        "--agent-python", default=AGENT_PYTHON, help=f"python3 on execute machines (default {AGENT_PYTHON})"
    )
    parser.add_argument(
        "--local-agents",
        type=int,
        metavar="N",
        help="run up to N agents as local processes instead of HTCondor jobs (tests, benchmarks)",
    )
    return parser


async def _amain(args: argparse.Namespace, state: MasterState, plan: Plan) -> int:
    runner: AgentRunner
    if args.local_agents:
        runner = LocalAgents(plan.outdir / "local-agents", slots=args.local_agents, python=args.agent_python)
    else:
        # its owner's token from master_submitter, when there is one (llic/master_token.py)
        gateway = Gateway(token_dir=held_token_dir(plan.outdir))
        runner = GatewayAgents(gateway, schedd_name=plan_schedd(state))
    try:
        master = Master(plan, state, runner, host=args.host, port=args.port, agent_python=args.agent_python)
        code = await master.run()
        if code == EXIT_DONE:  # not re-run: its token is of no more use
            remove_token(plan.outdir)
        summary = {"master": plan.info.master_id, "status": str(master.core.status)}
        print(json.dumps(summary | {"tasks": vars(master.core.counts())}), flush=True)  # master.out
        return code
    finally:
        with trio.CancelScope(shield=True):
            await runner.aclose()


def plan_schedd(state: MasterState) -> str | None:
    """The schedd master_submitter submitted this master to (the state file's extra), if named."""
    schedd = state.extra.get("schedd")
    return schedd if isinstance(schedd, str) else None


def main(argv: list[str] | None = None) -> int:
    """`llic-master STATE_FILE ...`: the exit status HTCondor acts on (see the module's doc)."""
    args = build_parser().parse_args(argv)
    from common.logging import configure_logging

    try:
        state, plan = load_plan(args.state_file)
    except (StateFileError, PlanError) as e:
        print(f"llic-master: error: {e}", file=sys.stderr)
        return EXIT_UNUSABLE
    level = "debug" if plan.config.llic_debug else "info"
    configure_logging("llic-master", plan.info.master_id, level=level, json=False)
    try:
        return trio.run(_amain, args, state, plan)
    except StateFileError as e:
        print(f"llic-master: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

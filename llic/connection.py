"""The master's side of its agents' connections (protocol.py over trio streams).

`Connections` accepts each agent, runs protocol.py's handshake with the run's secret (a wrong
master, an unknown agent name, a wrong MAC, a second connection of the same agent: refused and
counted), tells the core (`AgentConnected`) and then serves the connection with a sending and a
receiving task, so that a large result never blocks a task on its way (and the reverse). What
the core decides for an agent (welcome, tasks, no_more_tasks, bulk_go, close, refuse) arrives
through `deliver`, `close` and `refuse` and goes out in order: what is queued when the sender
wakes goes out in one write, and an agent of protocol version 2 gets its tasks without files in
`tasks` batches (protocol.py). In TRANSFER modes a task's private
inputs travel with it as blobs, written no faster than the rate admission reserved for them;
small ones (SMALL_INPUTS, within READ_AHEAD_BUDGET for all connections) are read for all the
tasks of a sender's turn in one thread hop and go in its one write. Returned files are placed
with `files.place_outputs` when `wants_result` says the result counts, those of the `result`
messages received together in one thread hop.
What arrives becomes events for the core (`ResultReceived`, `BulkReady`, `TransferDone`,
`ConnectionBroken`) through `feed`.

Malformed input from the network (garbage, unknown or oversized frames, a wrong secret, a
handshake that stalls) is dropped with its connection and counted in `counters`; it never stops
the master. Before a peer has authenticated it costs little: at most PREAUTH_BYTES read from it
(no frame larger than that is buffered), HANDSHAKE_TIMEOUT to finish, and at most
MAX_UNAUTHENTICATED such connections at once; a new one pushes out the oldest (a real agent's
handshake takes milliseconds, so a flood of idle connections cannot keep agents out).
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog
import trio

from llic import protocol
from llic.chef import parse_agent_name
from llic.events import (
    Action,
    AgentConnected,
    BulkReady,
    CancelTask,
    ConnectionBroken,
    GrantBulk,
    MasterEvent,
    ResultReceived,
    SendNoMoreTasks,
    SendTasks,
    TransferDone,
    WelcomeAgent,
)
from llic.files import OutputPlacementError, place_outputs
from llic.netadmit import IN, OUT
from llic.plan import InputsTooLarge, Plan, input_blobs
from llic.state import StateFileError
from llic.task import STATUS_PREPARE_FAILED, Task, TaskResult
from llic.taskbook import Assignment

HANDSHAKE_TIMEOUT = 10.0  # an agent answers in milliseconds; a stalled handshake is dropped
MAX_UNAUTHENTICATED = 64  # connections still in their handshake at once; the oldest goes first
PREAUTH_BYTES = 8192  # what a peer may send before it has authenticated (hello + auth: < 1 kB)
CLOSE_TIMEOUT = 10.0  # a closing connection gets this long to deliver what is queued for it
RECV_SIZE = 1 << 18
# A task whose private inputs are this small is read ahead, with the others of its sender's turn
# in one thread hop, and written in that turn's one write (reading each on its own, after a
# thread hop, then writing it by itself held a flood of such tasks to a tenth of the rate of
# tasks without files). Larger ones go by themselves, as before.
SMALL_INPUTS = 256 * 1024
READ_AHEAD_BUDGET = 32 << 20  # bytes of inputs read ahead, all connections together
MAX_RESULT_GROUP = 256  # `result` messages already received whose files are placed in one thread hop


@dataclass
class AgentConnection:
    """One authenticated agent's connection: what the core says goes into `outbox`, in order,
    for its sender task; bytes there are the rest of a write `Connections.deliver` began (None:
    close)."""

    agent: str
    chef: int
    peer: str
    stream: trio.SocketStream
    version: int = 1  # the protocol version its hello said
    outbox: deque[Action | bytes | None] = field(default_factory=deque)
    refusal: str | None = None
    closing: str | None = None
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    recv_started: float | None = None  # when the first bytes of the message being received came
    # the sender waits for the outbox with nothing of its own under way: deliver may write
    sender_idle: bool = False
    fd: int = field(init=False)
    _wake: trio.lowlevel.ParkingLot = field(default_factory=trio.lowlevel.ParkingLot)

    def __post_init__(self) -> None:
        self.fd = self.stream.socket.fileno()

    def put(self, item: Action | bytes | None) -> None:
        """Queue for the sender (and wake it)."""
        self.outbox.append(item)
        if self.sender_idle:
            self._wake.unpark_all()

    async def take(self) -> list[Action | bytes | None]:
        """Everything queued, once something is (for the sender)."""
        while not self.outbox:
            self.sender_idle = True
            try:
                await self._wake.park()
            finally:
                self.sender_idle = False
        items = list(self.outbox)
        self.outbox.clear()
        return items

    def close(self, reason: str) -> None:
        """Deliver what is queued, then close (within CLOSE_TIMEOUT)."""
        if self.closing is None:
            self.closing = reason
            self.put(None)
            self.scope.deadline = min(self.scope.deadline, trio.current_time() + CLOSE_TIMEOUT)


def _write_some(fd: int, data: bytes) -> int:
    """Write what the socket takes now, without waiting: how many bytes (0: its buffer is full)."""
    try:
        return os.write(fd, data)
    except BlockingIOError:
        return 0


async def _receive_some(fd: int) -> bytes:
    """The next bytes from the socket (b"": the peer closed): one wait for them, then one read.
    (trio's `receive_some` reads first, which between messages finds nothing, then waits, and
    checkpoints around it: per message of a flood of short tasks that was most of the receiving.)"""
    while True:
        await trio.lowlevel.wait_readable(fd)
        try:
            return os.read(fd, RECV_SIZE)
        except BlockingIOError:
            continue


Inputs = tuple[list[dict[str, Any]], list[bytes], list[str]]  # entries, blobs, notes
Placing = tuple[int, Task, list[tuple[dict[str, Any], bytes]]]  # a result's index, task, files


def read_small_inputs(wanted: list[tuple[int, str, list[str]]], limit: int) -> dict[int, Inputs]:
    """The private inputs of each (process, initialdir, names) in `wanted` whose files hold at
    most `limit` bytes (`plan.input_blobs`); the others are left out, to go by themselves.
    Blocking: run in a thread."""
    found: dict[int, Inputs] = {}
    for process, iwd, names in wanted:
        try:
            found[process] = input_blobs(iwd, names, limit)
        except InputsTooLarge:
            continue
    return found


def _place_each(placing: list[Placing], style: str, plan: Plan) -> dict[int, Exception]:
    """`files.place_outputs` for each (index, task, files), never over the plan's protected
    paths (made here on first use: a thread); what failed, by index. Blocking: run in a thread."""
    failures: dict[int, Exception] = {}
    for i, spec, pairs in placing:
        try:
            place_outputs(spec, pairs, style, protected=plan.protected_paths)
        except (OutputPlacementError, OSError, ValueError) as e:
            failures[i] = e
    return failures


class _Closed(Exception):
    """The peer closed the connection between messages."""


@dataclass
class _Budget:
    """Bytes a peer may still send before it has authenticated."""

    left: int

    def spend(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise protocol.ProtocolError(f"more than {PREAUTH_BYTES} bytes before authentication")


def _peer(stream: trio.SocketStream) -> str:
    try:
        host, port = stream.socket.getpeername()[:2]
        return f"{host}:{port}"
    except OSError:
        return "?"


class Connections:
    """Every agent connection of one run of a master, by agent name."""

    def __init__(
        self,
        plan: Plan,
        secret: bytes,
        feed: Callable[[MasterEvent], None],
        wants_result: Callable[[str, int, int], bool],
        counters: Counter[str],
        *,
        feed_results: Callable[[list[ResultReceived]], None] | None = None,
        handshake_timeout: float = HANDSHAKE_TIMEOUT,
        max_unauthenticated: int = MAX_UNAUTHENTICATED,
        log: Any = None,
    ) -> None:
        self.plan = plan
        self.secret = secret
        self.feed = feed  # an event for the core (and the driver carries out its output)
        # the results of one `results` message, for the core at once (default: one by one)
        self.feed_results = feed_results or self._feed_each
        self.wants_result = wants_result  # the core's answer: would this result be recorded?
        self.counters = counters
        self.handshake_timeout = handshake_timeout
        self.max_unauthenticated = max_unauthenticated
        self.unauthenticated: dict[int, trio.CancelScope] = {}  # oldest first (insertion order)
        self._serial = 0
        self.log = log if log is not None else structlog.get_logger("llic.master")
        self.conns: dict[str, AgentConnection] = {}
        self.read_ahead = 0  # bytes of small inputs read and not yet written (READ_AHEAD_BUDGET)

    def _feed_each(self, events: list[ResultReceived]) -> None:
        for event in events:
            self.feed(event)

    def deliver(self, action: WelcomeAgent | SendTasks | SendNoMoreTasks | GrantBulk | CancelTask) -> None:
        """Queue what the core says to its agent (dropped when it is not connected or closing).
        Tasks without files for an agent whose sender has nothing under way are written at once,
        as far as the socket takes them (the sender gets the rest): in a flood of short tasks,
        handing each batch to the sender task cost more than writing it."""
        conn = self.conns.get(action.agent)
        if conn is None or conn.closing is not None:
            return
        if conn.sender_idle and not conn.outbox and type(action) is SendTasks and conn.version >= 2:
            data = self._plain_batch(action)
            if data is not None:
                try:
                    written = _write_some(conn.fd, data)
                except OSError:
                    written = 0  # the sender meets the error again and ends the connection
                if written < len(data):
                    conn.put(data[written:])
                return
        conn.put(action)

    def _plain_batch(self, action: SendTasks) -> bytes | None:
        """The `tasks` message of `action`, if every task goes without files and pacing and the
        batch encodes (else None: the sender sends it, as it sends every other message)."""
        if action.rates or len(action.tasks) > protocol.MAX_BATCH:
            return None
        specs, transfer = self.plan.specs, self.plan.transfer
        maps = []
        for assignment in action.tasks:
            spec = specs[assignment.process]
            if transfer and self.plan.private_inputs(spec):
                return None
            maps.append(protocol.task_map(spec, assignment.attempt))
        try:
            return b"".join(protocol.encode_frames({"t": protocol.TASKS, "tasks": maps}))
        except protocol.ProtocolError:
            return None

    def close(self, agent: str, reason: str) -> None:
        """Deliver what is queued for `agent`, then close its connection."""
        conn = self.conns.get(agent)
        if conn is not None:
            conn.close(reason)

    def close_all(self, reason: str) -> None:
        """The master ends: every connection delivers what is queued and closes."""
        for conn in list(self.conns.values()):
            conn.close(reason)

    def refuse(self, agent: str, reason: str) -> None:
        """The core refused the agent that is being welcomed: its handshake ends in `refused`."""
        conn = self.conns.get(agent)
        if conn is not None and conn.refusal is None:
            conn.refusal = reason

    async def serve(self, listeners: list[trio.SocketListener], nursery: trio.Nursery) -> None:
        """Accept agents' connections on `listeners` forever, each served in `nursery`."""
        await trio.serve_listeners(self._serve_agent, listeners, handler_nursery=nursery)

    async def _serve_agent(self, stream: trio.SocketStream) -> None:
        peer = _peer(stream)
        self.counters["connections"] += 1
        conn: AgentConnection | None = None
        try:
            decoder = protocol.Decoder({protocol.HELLO}, max_message=PREAUTH_BYTES)
            scope = self._admit_unauthenticated()
            try:
                with scope, trio.fail_after(self.handshake_timeout):
                    conn = await self._handshake(stream, decoder, peer, _Budget(PREAUTH_BYTES))
            except trio.TooSlowError:
                self.counters["handshake_timeouts"] += 1
                self.log.warning("handshake timed out", peer=peer)
                return
            finally:
                self.unauthenticated = {k: v for k, v in self.unauthenticated.items() if v is not scope}
            if scope.cancelled_caught:
                self.counters["unauthenticated_dropped"] += 1
                return
            if conn is None:
                return
            decoder.max_message = protocol.MAX_MESSAGE
            await self._serve_connection(conn, decoder)
        except protocol.ProtocolError as e:
            self.counters["malformed"] += 1
            self.log.warning(
                "malformed message: connection dropped",
                peer=peer,
                agent=conn.agent if conn else None,
                error=str(e),
            )
            if conn is not None:
                self.feed(ConnectionBroken(conn.agent, f"protocol error: {e}"))
        except (_Closed, trio.BrokenResourceError, trio.ClosedResourceError, OSError) as e:
            if conn is not None and conn.closing is None:
                reason = "agent closed the connection" if isinstance(e, _Closed) else f"connection lost: {e}"
                self.feed(ConnectionBroken(conn.agent, reason))
        except StateFileError:
            raise
        except Exception as e:  # a bug met on one connection must not stop the master
            self.counters["connection_errors"] += 1
            self.log.exception("connection failed", peer=peer, agent=conn.agent if conn else None)
            if conn is not None and conn.closing is None:
                self.feed(ConnectionBroken(conn.agent, f"master error: {type(e).__name__}: {e}"))
        finally:
            if conn is not None and self.conns.get(conn.agent) is conn:
                del self.conns[conn.agent]
            with trio.CancelScope(shield=True):
                await stream.aclose()

    def _admit_unauthenticated(self) -> trio.CancelScope:
        """A cancel scope for one more connection in its handshake; past the cap, the oldest
        such connection is dropped (its scope cancelled) to make room."""
        self._serial += 1
        scope = trio.CancelScope()
        self.unauthenticated[self._serial] = scope
        while len(self.unauthenticated) > self.max_unauthenticated:
            oldest = next(iter(self.unauthenticated))
            self.unauthenticated.pop(oldest).cancel()
        return scope

    async def _read(
        self, stream: trio.SocketStream, decoder: protocol.Decoder, budget: _Budget | None = None
    ) -> protocol.Message:
        """The next message; with a `budget`, reading more bytes than it allows is a ProtocolError."""
        while True:
            msg = decoder.next()
            if msg is not None:
                return msg
            data = await stream.receive_some(RECV_SIZE if budget is None else budget.left + 1)
            if not data:
                decoder.eof()
                raise _Closed
            if budget is not None:
                budget.spend(len(data))
            decoder.feed(data)

    async def _send(
        self, stream: trio.SocketStream, msg: dict[str, Any], blobs: list[bytes] | None = None
    ) -> None:
        for frame in protocol.encode_frames(msg, blobs):
            await stream.send_all(frame)

    async def _refuse(
        self, stream: trio.SocketStream, reason: str, counter: str, peer: str, *, not_me: bool = False
    ) -> None:
        self.counters[counter] += 1
        self.log.warning("agent refused", peer=peer, reason=reason)
        refusal = {"t": protocol.REFUSED, "reason": reason}
        if not_me:  # an agent of another master, looking for it on a range of ports
            refusal["master"] = self.plan.info.master_id
        with trio.move_on_after(5):
            await self._send(stream, refusal)

    async def _handshake(
        self, stream: trio.SocketStream, decoder: protocol.Decoder, peer: str, budget: _Budget
    ) -> AgentConnection | None:
        """protocol.py's handshake; an AgentConnection registered with the core, or None after
        a refusal. The peer may send `budget` bytes until it has authenticated."""
        hello = await self._read(stream, decoder, budget)
        agent = hello.body["agent"]
        if hello.body["master"] != self.plan.info.master_id:
            await self._refuse(
                stream,
                f"this is master {self.plan.info.master_id}",
                "refused_wrong_master",
                peer,
                not_me=True,
            )
            return None
        parsed = parse_agent_name(agent)
        if parsed is None:
            await self._refuse(stream, f"{agent!r} is not an agent name", "refused_unknown_agent", peer)
            return None
        nonce_m = protocol.make_nonce()
        mac_m = protocol.master_mac(self.secret, hello.body["nonce_a"], agent)
        await self._send(stream, {"t": protocol.CHALLENGE, "nonce_m": nonce_m, "mac_m": mac_m})
        decoder.allowed = frozenset({protocol.AUTH})
        auth = await self._read(stream, decoder, budget)
        if not protocol.check_agent_mac(self.secret, nonce_m, agent, auth.body["mac_a"]):
            await self._refuse(stream, "authentication failed", "auth_failures", peer)
            return None
        decoder.allowed = frozenset({protocol.RESULT, protocol.RESULTS, protocol.BULK_READY})
        if agent in self.conns:
            await self._refuse(stream, "already connected", "refused_duplicate", peer)
            return None
        conn = AgentConnection(agent, parsed[1], peer, stream, hello.body["version"])
        self.conns[agent] = conn
        self.feed(AgentConnected(agent, peer.rsplit(":", 1)[0].strip("[]")))
        if conn.refusal is not None:
            del self.conns[agent]
            await self._refuse(stream, conn.refusal, "refused_by_chef", peer)
            return None
        self.log.info("agent connected", agent=agent, peer=peer)
        return conn

    async def _serve_connection(self, conn: AgentConnection, decoder: protocol.Decoder) -> None:
        failure: list[BaseException] = []

        async def guarded(part: Any, *args: Any) -> None:
            # The first failure of either half ends both; it is re-raised below as itself, not
            # wrapped in the nursery's ExceptionGroup, so _serve_agent can tell what happened.
            try:
                await part(conn, *args)
            except Exception as e:
                failure.append(e)
            nursery.cancel_scope.cancel()

        with conn.scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(guarded, self._sender)
                nursery.start_soon(guarded, self._receiver, decoder)
        if failure:
            raise failure[0]

    async def _sender(self, conn: AgentConnection) -> None:
        """What the core said, in order; everything queued when the sender wakes goes out in one
        write, tasks with small private inputs too (read ahead in one thread hop); a paced task,
        or one whose inputs are large, is written by itself, in turn."""
        batching = conn.version >= 2
        while True:
            actions = await conn.take()
            frames: list[bytes] = []
            batch: list[dict[str, Any]] = []  # tasks' wire maps
            inputs, reserved = await self._read_ahead(actions)
            sent: list[tuple[int, int, int]] = []  # (process, attempt, bytes) of inputs in `frames`
            started = time.time()
            try:
                for action in actions:
                    if isinstance(action, bytes):  # the rest of a write deliver began
                        frames += self._batch_frames(conn, batch)
                        frames.append(action)
                        continue
                    if isinstance(action, SendTasks):
                        for assignment in action.tasks:
                            pace = action.rate_of(assignment.process)
                            spec = self.plan.specs[assignment.process]
                            if pace is None and not (self.plan.transfer and self.plan.private_inputs(spec)):
                                task = protocol.task_map(spec, assignment.attempt)
                                if batching:
                                    batch.append(task)
                                else:
                                    self._encode_task(conn, task, frames)
                                continue
                            frames += self._batch_frames(conn, batch)
                            read = inputs.pop(assignment.process, None) if pace is None else None
                            if read is not None:
                                nbytes = self._encode_with_inputs(conn, assignment, read, frames)
                                if nbytes is not None:  # files on their way: a transfer, once written
                                    sent.append((assignment.process, assignment.attempt, nbytes))
                                continue
                            started = await self._flush(conn, frames, sent, started)
                            await self._send_task(conn, assignment, pace)
                        continue
                    frames += self._batch_frames(conn, batch)  # in order: the tasks before what follows
                    match action:
                        case None:
                            await self._flush(conn, frames, sent, started)
                            await conn.stream.send_eof()
                            return
                        case WelcomeAgent(window=window, bulk_threshold=threshold):
                            welcome: dict[str, Any] = {"t": protocol.WELCOME, "window": window}
                            if threshold > 0:
                                welcome["bulk_threshold"] = threshold  # agents ask before large returns
                            if batching:
                                welcome["batch"] = True  # it may send `results` batches
                            frames += protocol.encode_frames(welcome)
                        case SendNoMoreTasks():
                            frames += protocol.encode_frames({"t": protocol.NO_MORE_TASKS})
                        case CancelTask(process=process, attempt=attempt):
                            cancel = {"t": protocol.CANCEL, "process": process, "attempt": attempt}
                            frames += protocol.encode_frames(cancel)
                        case GrantBulk(process=process, attempt=attempt, rate_bps=rate_bps):
                            go: dict[str, Any] = {
                                "t": protocol.BULK_GO,
                                "process": process,
                                "attempt": attempt,
                            }
                            if rate_bps > 0:
                                go["rate_bps"] = max(1, math.floor(rate_bps))  # the agent paces at this
                            frames += protocol.encode_frames(go)
                frames += self._batch_frames(conn, batch)
                await self._flush(conn, frames, sent, started)
            finally:
                self.read_ahead -= reserved

    async def _read_ahead(self, actions: list[Action | bytes | None]) -> tuple[dict[int, Inputs], int]:
        """The small private inputs of the unpaced tasks among `actions`, read in one thread hop
        (by process), and the bytes of READ_AHEAD_BUDGET reserved for them until they are
        written: tasks past the budget go by themselves (their inputs read then, one at a time)."""
        if not self.plan.transfer:
            return {}, 0
        wanted: list[tuple[int, str, list[str]]] = []
        room = (READ_AHEAD_BUDGET - self.read_ahead) // SMALL_INPUTS
        for action in actions:
            if type(action) is not SendTasks:
                continue
            for assignment in action.tasks:
                if len(wanted) >= room:
                    break
                spec = self.plan.specs[assignment.process]
                private = self.plan.private_inputs(spec)
                if private and action.rate_of(assignment.process) is None:
                    wanted.append((assignment.process, spec.initialdir, private))
        if not wanted:
            return {}, 0
        reserved = len(wanted) * SMALL_INPUTS
        self.read_ahead += reserved
        try:
            found = await trio.to_thread.run_sync(read_small_inputs, wanted, SMALL_INPUTS)
        except BaseException:
            self.read_ahead -= reserved
            raise
        actual = sum(len(blob) for _, blobs, _ in found.values() for blob in blobs)
        self.read_ahead -= reserved - actual
        return found, actual

    def _encode_with_inputs(
        self, conn: AgentConnection, assignment: Assignment, read: Inputs, frames: list[bytes]
    ) -> int | None:
        """A task's `task` message with its inputs (read ahead) added to `frames`: the bytes of
        its files; None when it carries none (none readable), or cannot be sent (then failed as
        _send_task fails it)."""
        entries, blobs, notes = read
        for note in notes:
            self.log.warning("task input not readable", process=assignment.process, note=note)
        task = protocol.task_map(self.plan.specs[assignment.process], assignment.attempt)
        msg: dict[str, Any] = {"t": protocol.TASK, "task": task}
        if entries:
            msg["files"] = entries
        try:
            frames += protocol.encode_frames(msg, blobs)
        except protocol.ProtocolError as e:
            self._unsendable(conn, assignment.process, assignment.attempt, e)
            return None
        return sum(e["size"] for e in entries) if entries else None

    async def _flush(
        self, conn: AgentConnection, frames: list[bytes], sent: list[tuple[int, int, int]], started: float
    ) -> float:
        """Write `frames`, then account the inputs they carried (`sent`, emptied) as transfers
        that began at `started`; when the next part of the turn begins."""
        await self._write(conn, frames)
        if sent:
            end = time.time()
            for process, attempt, nbytes in sent:
                self.feed(TransferDone(conn.agent, process, IN, nbytes, started, end, attempt))
            sent.clear()
        return time.time()

    @staticmethod
    async def _write(conn: AgentConnection, frames: list[bytes]) -> None:
        """Write `frames` (and empty the list): what the socket takes at once, then the rest
        through trio (waiting while the agent's side is full)."""
        if frames:
            data = b"".join(frames)
            frames.clear()
            written = _write_some(conn.fd, data)
            if written < len(data):
                await conn.stream.send_all(memoryview(data)[written:])

    def _batch_frames(self, conn: AgentConnection, batch: list[dict[str, Any]]) -> list[bytes]:
        """The frames of the batched tasks (and `batch` emptied): `tasks` messages of at most
        MAX_BATCH tasks; a batch that cannot be encoded goes task by task, so that only a task
        that cannot be sent fails."""
        frames: list[bytes] = []
        while batch:
            part = batch[: protocol.MAX_BATCH]
            del batch[: protocol.MAX_BATCH]
            try:
                frames += protocol.encode_frames({"t": protocol.TASKS, "tasks": part})
            except protocol.ProtocolError:
                for task in part:
                    self._encode_task(conn, task, frames)
        return frames

    def _encode_task(self, conn: AgentConnection, task: dict[str, Any], frames: list[bytes]) -> bool:
        """A task without files (its wire map, `protocol.task_map`) as its `task` message, added
        to `frames`; False (and the task failed, as _send_task fails it) when it cannot be encoded."""
        try:
            frames += protocol.encode_frames({"t": protocol.TASK, "task": task})
        except protocol.ProtocolError as e:
            self._unsendable(conn, task["process"], task.get("attempt", 0), e)
            return False
        return True

    def _unsendable(
        self, conn: AgentConnection, process: int, attempt: int, e: protocol.ProtocolError
    ) -> None:
        """Too large to send (message or blob limit): the task fails as if it could not be
        prepared, so it is retried and, past MAX_TASK_ATTEMPTS, failed for good."""
        self.counters["unsendable_tasks"] += 1
        self.log.warning("task cannot be sent", process=process, error=str(e))
        failed = TaskResult(
            process, attempt, STATUS_PREPARE_FAILED, error=f"master cannot send the task: {e}"
        )
        self.feed(ResultReceived(conn.agent, failed))

    async def _send_task(self, conn: AgentConnection, assignment: Assignment, pace: float | None) -> None:
        spec = self.plan.specs[assignment.process]
        task = spec.with_attempt(assignment.attempt)
        entries: list[dict[str, Any]] = []
        blobs: list[bytes] = []
        if self.plan.transfer:
            private = self.plan.private_inputs(spec)
            if private:
                entries, blobs, notes = await trio.to_thread.run_sync(input_blobs, spec.initialdir, private)
                for note in notes:
                    self.log.warning("task input not readable", process=spec.process, note=note)
        msg: dict[str, Any] = {"t": protocol.TASK, "task": task}
        if entries:
            msg["files"] = entries
        try:
            frames = protocol.encode_frames(msg, blobs)
        except protocol.ProtocolError as e:
            self._unsendable(conn, assignment.process, assignment.attempt, e)
            return
        start = time.time()
        written = [False]
        try:
            if pace is None:
                for frame in frames:
                    await conn.stream.send_all(frame)
                written[0] = True
            else:
                await self._send_paced(conn.stream, frames, pace, start, written)
        finally:
            # only a transfer that was written whole counts (a broken one ends with its agent)
            if entries and written[0]:
                nbytes = sum(e["size"] for e in entries)
                process, attempt, end = assignment.process, assignment.attempt, time.time()
                self.feed(TransferDone(conn.agent, process, IN, nbytes, start, end, attempt))

    async def _send_paced(
        self, stream: trio.SocketStream, frames: list[bytes], pace: float, start: float, written: list[bool]
    ) -> None:
        """Write at most `pace` bits per second (the rate admission reserved for this transfer),
        so that a subnet's measured rate stays under its limit. Each chunk waits until the rate
        allows it, never after: no byte is ahead of the pace at any moment, and the last one
        leaves when the reservation's time is up. (Pausing after a chunk instead let the agent
        have a whole small input, run it and answer while the master still sat in its pause, so
        the result, not the transfer's end, freed the reservation, always for that agent.)"""
        total = sum(len(frame) for frame in frames)
        sent = 0
        for chunk, due in protocol.paced_chunks(frames, pace):
            wait = due - (time.time() - start)
            if wait > 0:
                await trio.sleep(wait)
            await stream.send_all(chunk)
            sent += len(chunk)
            written[0] = sent == total

    @staticmethod
    def _decoded(conn: AgentConnection, decoder: protocol.Decoder) -> tuple[protocol.Message, float] | None:
        """The next message already received, and when its first bytes came (None: none yet)."""
        msg = decoder.next()
        if msg is None:
            return None
        started = conn.recv_started if conn.recv_started is not None else time.time()
        conn.recv_started = None if decoder.idle else time.time()
        return msg, started

    async def _receiver(self, conn: AgentConnection, decoder: protocol.Decoder) -> None:
        pending: tuple[protocol.Message, float] | None = None
        while True:
            got, pending = pending or self._decoded(conn, decoder), None
            if got is None:
                data = await _receive_some(conn.fd)
                if not data:
                    decoder.eof()
                    raise _Closed
                if decoder.idle:
                    conn.recv_started = time.time()
                decoder.feed(data)
                continue
            msg = got[0]
            if msg.type == protocol.BULK_READY:
                self.counters["bulk_requests"] += 1
                body = msg.body
                self.feed(BulkReady(conn.agent, body["process"], body["attempt"], body["size"]))
                continue
            if msg.type == protocol.RESULTS:  # results without files: nothing to place
                events = [ResultReceived(conn.agent, result) for result in msg.results()]
                self.counters["results"] += len(events)
                self.feed_results(events)
                continue
            group = [got]  # with the `result` messages received with it: their files in one hop
            while len(group) < MAX_RESULT_GROUP:
                pending = self._decoded(conn, decoder)
                if pending is None or pending[0].type != protocol.RESULT:
                    break
                group.append(pending)
                pending = None
            await self._on_results(conn, group)

    async def _on_results(self, conn: AgentConnection, group: list[tuple[protocol.Message, float]]) -> None:
        """`result` messages, in order, in stretches that each end with a run that did not go
        (or the group's end): such a failure may make the chef start over with a new agent
        (max_task_failures), and the later results of the group then do not count, so whether
        one counts is asked only once the failures before it are with the core. A result that
        comes twice in one group is placed once, as the core records it once."""
        results = [msg.result() for msg, _ in group]
        seen: set[tuple[int, int]] = set()
        start = 0
        for end, result in enumerate(results, 1):
            if not result.ok or end == len(results):
                await self._place_and_feed(conn, group[start:end], results[start:end], seen)
                start = end

    async def _place_and_feed(
        self,
        conn: AgentConnection,
        group: list[tuple[protocol.Message, float]],
        results: list[TaskResult],
        seen: set[tuple[int, int]],
    ) -> None:
        """Their transfers accounted, the files of those the core would record placed (all in
        one thread hop), then each result for the core."""
        style = str(self.plan.config.files_style_mode)
        placing: list[Placing] = []
        for i, ((msg, started), result) in enumerate(zip(group, results, strict=True)):
            if msg.files:
                nbytes = sum(e["size"] for e in msg.files)
                end = time.time()
                self.feed(TransferDone(conn.agent, result.process, OUT, nbytes, started, end, result.attempt))
            self.counters["results"] += 1
            key = (result.process, result.attempt)
            current = key not in seen and self.wants_result(conn.agent, result.process, result.attempt)
            seen.add(key)
            if current and msg.files:
                placing.append((i, self.plan.specs[result.process], msg.file_pairs()))
        failures: dict[int, Exception] = {}
        if placing:
            failures = await trio.to_thread.run_sync(_place_each, placing, style, self.plan)
        for i, result in enumerate(results):
            e = failures.get(i)
            if e is not None:
                self.counters["placement_errors"] += 1
                self.log.warning(
                    "output files not placed", agent=conn.agent, process=result.process, error=str(e)
                )
                error = f"{result.error + '; ' if result.error else ''}output files not placed: {e}"
                result = dataclasses.replace(result, error=error)
            self.feed(ResultReceived(conn.agent, result))

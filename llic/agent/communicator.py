"""The communicator: talks to the master, prepares tasks, returns results (seed §3.9.2, §3.9.4).

It runs in the agent's one thread, with the launcher (llic/agent/launcher.py). One `select` loop
watches the master's socket and the launcher's wake-up socket (a task ended), so tasks arrive
while others run, the next task starts as soon as one ends, and results go back as soon as they
exist. The agent asks for nothing: the master keeps up to `window` tasks
here (initial tasks included) and the agent only checks that it never sends more. After
`no_more_tasks`, once every task it holds has been reported, the agent is done.

Bulk returns (issue 8 item 3): when the master's welcome names a `bulk_threshold`, a result whose
files are larger is announced with `bulk_ready` and parked (its files stay on disk, not in
memory) until the master's `bulk_go`; the agent meanwhile goes on running tasks and sending the
smaller results. A `bulk_go` with `rate_bps` (a limited subnet) is sent at no more than that rate,
paced as the master paces its inputs. A master that names no threshold gets every result at
once, as before.

Batches (protocol version 2): a master that says `batch` in its welcome gets the results that
carry no files in `results` messages, several at a time while tasks are short, and those with
small files (SMALL_RESULT) as their `result` messages in the same write: they wait while
more than a third of the window is still queued here (the master refills it no later than when it
runs low) and for at most FLUSH_AFTER seconds, so a long task's result goes back as soon as it
exists. The window here is what the master fills to (the tasks held after its last `tasks`), not
the welcome's, which is the most it may send: a master grows the window while tasks are short.
The master's `tasks` batches are taken as its single tasks would be.
"""

from __future__ import annotations

import errno
import selectors
import socket
import sys
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

from .. import protocol
from .inputfile import AgentInput
from .launcher import Launcher
from .workspace import Job, PrepareError, Workspace

HANDSHAKE_TIMEOUT = 60.0
SCAN_HANDSHAKE_TIMEOUT = 10.0  # a port of a range that accepts but does not answer is skipped after this
RETRY_FIRST = 0.1  # seconds between attempts to reach a master that is not listening yet, at first
RETRY_MOST = 1.0  # ... growing to this
# An agent submitted with its master usually starts before the master listens (master_submitter
# submits the agents first; the master job starts at the schedd's next queue scan, 1.4-1.8 s
# later in the sandbox, then imports for ~0.4 s); for this long it tries every RETRY_SOON at
# most, so it connects within 0.1 s of the master listening instead of up to RETRY_MOST later
# (a round is a refused connection per port of the range: cheap).
RETRY_SOON = 0.1
RETRY_SOON_FOR = 20.0
RECV_SIZE = 1 << 18
FLUSH_AFTER = 0.05  # seconds a result may wait for others to share its message, at most
# A result whose files are this small waits with the batched ones too, and goes in their write
# as its own `result` message (sending each at once cost the master a wake-up and a thread hop
# per result); the files of waiting results stay under UNSENT_BYTES.
SMALL_RESULT = 256 * 1024
UNSENT_BYTES = 4 << 20


class AgentFatal(Exception):
    """An error the agent cannot go on after (seed §3.9.5): it stops its task and exits non-zero."""


class _NotHere(Exception):
    """The port answered, but not as this agent's master (another master's refusal, or nothing
    llic-like while scanning a range): try the next port."""


def parse_ports(text: str) -> list[int]:
    """`PORT` or `FIRST-LAST` (the range an agent submitted with its master scans): the ports, in
    order; ValueError when it is neither."""
    first, sep, last = text.partition("-")
    low = int(first)
    high = int(last) if sep else low
    if not 0 < low <= high <= 65535 or high - low >= 1024:
        raise ValueError(f"not a port or a range of ports: {text!r}")
    return list(range(low, high + 1))


class Agent:
    """One agent run: connect, authenticate, serve the window, exit when the master has no more."""

    def __init__(
        self,
        host: str,
        port: int | list[int],
        agent_id: str,
        config: AgentInput,
        workspace: Workspace,
        hostname: str | None = None,
    ) -> None:
        self.host = host
        self.ports = [port] if isinstance(port, int) else list(port)
        self.agent_id = agent_id
        self.config = config
        self.workspace = workspace
        self.hostname = hostname or socket.gethostname()
        self.window = config.window
        # what the master keeps here lately (`held` after its last tasks): the window it fills to,
        # which may be below the welcome's (the most it may send: it grows while tasks are short)
        self.filled = config.window
        self.held: dict[tuple[int, int], None] = {}  # tasks here whose results have not gone back
        self.bulk_threshold: int | None = None  # from the welcome: None, the master does not ask
        self.parked: dict[tuple[int, int], Job] = {}  # large results announced, waiting for bulk_go
        self.granted: list[tuple[int, int]] = []  # parked results the master said to send, in order
        self.grant_rate: dict[tuple[int, int], int] = {}  # their rate limits (bps), when given
        self.no_more = False
        self.batch = False  # the master takes `results` batches (its welcome says so)
        self.results: deque[Job] = deque()  # finished (or not preparable), not sent yet
        self.unsent: list[Job] = []  # results for the next `results` batch
        # of them, those with (small) files: their `result` message and its blobs
        self.unsent_files: dict[tuple[int, int], tuple[dict[str, Any], list[bytes]]] = {}
        self.unsent_bytes = 0
        self.unsent_since = 0.0  # when the first of them was ready
        self.launcher = Launcher(self.hostname)
        self.sock: socket.socket | None = None

    def log(self, text: str) -> None:
        """A debug line on stderr (the agent job's error file) when LLIC_DEBUG is on."""
        if self.config.debug:
            print(f"llic-agent[{self.agent_id}]: {text}", file=sys.stderr, flush=True)

    # -- the run ------------------------------------------------------------------------------

    def run(self) -> None:
        """Serve until done (returns) or until an AgentFatal/ProtocolError/OSError (raised)."""
        try:
            try:
                self.workspace.setup()
            except (OSError, ValueError) as exc:
                raise AgentFatal(f"cannot set up the agent: {exc}") from None
            self.launcher.start(self.workspace.work)
            for initial in self.config.initial_tasks:  # they start while we reach the master
                self._accept(initial.task, [], initial.files)
            self.sock, decoder = self._reach_master()
            self._serve(self.sock, decoder)
        finally:
            self.close()

    def close(self) -> None:
        """Stop the launcher (killing a running task), drop the connection, remove the work files."""
        self.launcher.close()  # harmless if it never started
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        self.workspace.cleanup()

    def _run_tasks(self) -> None:
        """Take what the launcher finished (it starts the next one first)."""
        self.results.extend(self.launcher.poll())

    # -- tasks --------------------------------------------------------------------------------

    def _accept(
        self,
        task: protocol.Task,
        blobs: list[tuple[Mapping[str, Any], bytes]],
        initial_files: list[tuple[str, str]],
    ) -> None:
        if task.key in self.held:
            raise protocol.ProtocolError(f"task {task.process}.{task.attempt} is already here")
        self.held[task.key] = None
        try:
            job = self.workspace.prepare(task, blobs, initial_files)
        except PrepareError as exc:
            self.log(f"task {task.process}.{task.attempt}: prepare failed: {exc}")
            job = Job(task)
            job.result = protocol.TaskResult(
                task.process,
                task.attempt,
                protocol.STATUS_PREPARE_FAILED,
                host=self.hostname,
                error=str(exc),
            )
            self.results.append(job)
            return
        if self.config.debug:  # per task: not even formatted otherwise
            self.log(f"task {task.process}.{task.attempt}: queued ({len(self.held)} held)")
        self.results.extend(self.launcher.submit(job))

    def _result_message(self, job: Job) -> tuple[dict[str, Any], list[bytes]]:
        result = job.result
        assert result is not None
        entries: list[dict[str, Any]] = []
        blobs: list[bytes] = []
        if result.status != protocol.STATUS_PREPARE_FAILED:
            entries, blobs, notes = self.workspace.collect(job)
            if notes:
                result.error = "output files not returned: " + "; ".join(notes)
        msg: dict[str, Any] = {"t": protocol.RESULT, "result": result}
        if entries:
            msg["files"] = entries
        return msg, blobs

    def _send_results(self, sock: socket.socket) -> None:
        while self.granted:
            key = self.granted.pop(0)
            job = self.parked.pop(key)
            msg, blobs = self._result_message(job)
            self._send_result(sock, job, msg, blobs, self.grant_rate.pop(key, None))
        while self.results:
            job = self.results.popleft()
            msg, blobs = self._result_message(job)
            size = sum(len(blob) for blob in blobs)
            if self.bulk_threshold is not None and size > self.bulk_threshold:
                # its turn comes with bulk_go; the files are read again then
                self.parked[job.key] = job
                process, attempt = job.key
                protocol.send_message(
                    sock, {"t": protocol.BULK_READY, "process": process, "attempt": attempt, "size": size}
                )
                self.log(f"task {process}.{attempt}: {size} bytes of outputs, waiting for its turn")
                continue
            if self.batch and size <= SMALL_RESULT:
                if not self.unsent:
                    self.unsent_since = time.monotonic()
                self.unsent.append(job)
                if blobs:
                    self.unsent_files[job.key] = (msg, blobs)
                    self.unsent_bytes += size
                continue
            self._flush(sock)  # the batched ones first: results go back in the order they came
            self._send_result(sock, job, msg, blobs)
        if self.unsent and self._flush_wait() == 0:
            self._flush(sock)

    def _flush_wait(self) -> float | None:
        """Seconds the batched results may still wait (0: send them now; None: nothing waits)."""
        if not self.unsent:
            return None
        launcher = self.launcher
        if (
            self.no_more
            or launcher.running is None
            or 3 * len(launcher.waiting) < self.filled
            or len(self.unsent) >= protocol.MAX_BATCH
            or self.unsent_bytes >= UNSENT_BYTES
        ):
            return 0.0
        return max(0.0, self.unsent_since + FLUSH_AFTER - time.monotonic())

    def _flush(self, sock: socket.socket) -> None:
        """Send the batched results in one write, in order: those without files in `results`
        messages, each with files as its `result` message."""
        if not self.unsent:
            return
        jobs, self.unsent = self.unsent, []
        files, self.unsent_files, self.unsent_bytes = self.unsent_files, {}, 0
        frames: list[bytes] = []
        plain: list[protocol.TaskResult] = []
        for job in jobs:
            held = files.get(job.key)
            if held is None:
                assert job.result is not None
                plain.append(job.result)
                continue
            frames += self._plain_frames(plain)
            frames += self._result_frames(job, *held)
        frames += self._plain_frames(plain)
        sock.sendall(b"".join(frames))
        for job in jobs:
            self._sent(job)

    @staticmethod
    def _plain_frames(results: list[protocol.TaskResult]) -> list[bytes]:
        """`results` (emptied) as `results` messages."""
        frames: list[bytes] = []
        for i in range(0, len(results), protocol.MAX_BATCH):
            part = results[i : i + protocol.MAX_BATCH]
            frames += protocol.encode_frames({"t": protocol.RESULTS, "results": part})
        results.clear()
        return frames

    @staticmethod
    def _result_frames(job: Job, msg: dict[str, Any], blobs: list[bytes]) -> list[bytes]:
        """The frames of a `result` message with files; without them, saying why, if they
        cannot be sent."""
        try:
            return protocol.encode_frames(msg, blobs)
        except protocol.ProtocolError as exc:  # e.g. so many files that the list passes 1 MiB
            result = job.result
            assert result is not None
            result.error = f"output files not returned: {exc}"
            return protocol.encode_frames({"t": protocol.RESULT, "result": result})

    def _send_result(
        self, sock: socket.socket, job: Job, msg: dict[str, Any], blobs: list[bytes], bps: int | None = None
    ) -> None:
        frames = self._result_frames(job, msg, blobs)
        if bps is None:
            for frame in frames:
                sock.sendall(frame)
        else:  # a granted large result on a limited subnet: its share of the limit
            start = time.monotonic()
            for chunk, due in protocol.paced_chunks(frames, bps):
                wait = due - (time.monotonic() - start)
                if wait > 0:
                    time.sleep(wait)
                sock.sendall(chunk)
        self._sent(job)

    def _sent(self, job: Job) -> None:
        del self.held[job.key]
        self.workspace.discard(job)
        result = job.result
        assert result is not None
        if self.config.debug:  # per task: not even formatted otherwise
            self.log(
                f"task {job.task.process}.{job.task.attempt}: {result.status} exit={result.exit_code} "
                f"signal={result.signal} ({len(self.held)} held)"
            )

    # -- the master ---------------------------------------------------------------------------

    def _reach_master(self) -> tuple[socket.socket, protocol.Decoder]:
        """Connect and authenticate, trying the master's ports in turn for `connect_timeout`
        seconds: it may not have started yet (an agent submitted with its master), it may be
        restarting, and on a range of ports other masters may answer first (they refuse naming
        themselves, and the next port is tried)."""
        start = time.monotonic()
        deadline = start + self.config.connect_timeout
        delay = RETRY_FIRST
        scanning = len(self.ports) > 1
        why = "nothing tried"
        while True:
            for port in self.ports:
                try:
                    sock = socket.create_connection((self.host, port), timeout=10)
                except OSError as exc:
                    why = exc.strerror or str(exc) or type(exc).__name__
                    continue
                try:
                    self._tune(sock)
                    decoder = self._handshake(sock, SCAN_HANDSHAKE_TIMEOUT if scanning else HANDSHAKE_TIMEOUT)
                except _NotHere as exc:
                    sock.close()
                    why = str(exc)
                    continue
                except BaseException:
                    sock.close()
                    raise
                self.log(f"connected to {self.host}:{port}")
                return sock, decoder
            left = deadline - time.monotonic()
            if left <= 0:
                where = f"{self.ports[0]}-{self.ports[-1]}" if scanning else str(self.ports[0])
                raise AgentFatal(f"cannot connect to the master at {self.host}:{where}: {why}") from None
            self._wait_running(min(delay, left))
            delay = min(delay * 1.5, RETRY_SOON if time.monotonic() - start < RETRY_SOON_FOR else RETRY_MOST)

    def _wait_running(self, seconds: float) -> None:
        """Sleep `seconds` while initial tasks go on: one that ends lets the next start."""
        end = time.monotonic() + seconds
        with selectors.DefaultSelector() as selector:
            selector.register(self.launcher.fileno(), selectors.EVENT_READ)
            while (left := end - time.monotonic()) > 0:
                if selector.select(left):
                    self._run_tasks()

    @staticmethod
    def _tune(sock: socket.socket) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for name, value in (("TCP_KEEPIDLE", 60), ("TCP_KEEPINTVL", 15), ("TCP_KEEPCNT", 8)):
            if hasattr(socket, name):  # a vanished master is noticed within minutes, not hours
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)

    def _handshake(self, sock: socket.socket, first_answer: float = HANDSHAKE_TIMEOUT) -> protocol.Decoder:
        """hello, challenge, auth, welcome (protocol.py). _NotHere when the port is not this
        agent's master: another master refused naming itself, or, while scanning a range,
        whatever answered was not a master (silence for `first_answer` seconds, garbage, a
        hang-up)."""
        sock.settimeout(first_answer)
        decoder = protocol.Decoder({protocol.CHALLENGE, protocol.REFUSED})
        secret = self.config.secret
        nonce_a = protocol.make_nonce()
        scanning = len(self.ports) > 1
        port = sock.getpeername()[1]
        try:
            protocol.send_message(
                sock,
                {
                    "t": protocol.HELLO,
                    "agent": self.agent_id,
                    "master": self.config.master,
                    "version": protocol.PROTOCOL_VERSION,
                    "nonce_a": nonce_a,
                },
            )
            try:
                challenge = self._expect(sock, decoder)
            except (protocol.ProtocolError, OSError) as exc:
                if not scanning:
                    raise
                raise _NotHere(f"port {port} answered no llic master: {exc}") from None
            except AgentFatal as exc:
                if scanning and "closed the connection" in str(exc):
                    raise _NotHere(f"port {port} hung up: {exc}") from None
                raise
            sock.settimeout(HANDSHAKE_TIMEOUT)
            if not protocol.check_master_mac(secret, nonce_a, self.agent_id, challenge.body["mac_m"]):
                raise AgentFatal("the master failed to authenticate (wrong secret?); not talking to it")
            mac_a = protocol.agent_mac(secret, challenge.body["nonce_m"], self.agent_id)
            protocol.send_message(sock, {"t": protocol.AUTH, "mac_a": mac_a})
            decoder.allowed = frozenset({protocol.WELCOME, protocol.REFUSED})
            welcome = self._expect(sock, decoder)
        except socket.timeout:  # noqa: UP041 (not yet TimeoutError on 3.9)
            raise AgentFatal(
                f"the master did not answer the handshake within {HANDSHAKE_TIMEOUT:g} s"
            ) from None
        self.window = self.filled = welcome.body["window"]
        self.bulk_threshold = welcome.body.get("bulk_threshold")
        self.batch = welcome.body.get("batch", False)
        if self.window != self.config.window:
            self.log(f"the master set the window to {self.window} (input file: {self.config.window})")
        sock.settimeout(None)
        decoder.allowed = frozenset(
            {protocol.TASK, protocol.TASKS, protocol.NO_MORE_TASKS, protocol.BULK_GO, protocol.CANCEL}
        )
        self.log(f"authenticated; window {self.window}, bulk threshold {self.bulk_threshold}")
        return decoder

    def _expect(self, sock: socket.socket, decoder: protocol.Decoder) -> protocol.Message:
        msg = protocol.recv_message(sock, decoder)
        if msg is None:
            raise AgentFatal("the master closed the connection during the handshake")
        if msg.type == protocol.REFUSED:
            other = msg.body.get("master")
            if other is not None and other != self.config.master:
                raise _NotHere(f"port {sock.getpeername()[1]} is master {other}'s")
            raise AgentFatal(f"the master refused this agent: {msg.body['reason'] or 'no reason given'}")
        return msg

    def _serve(self, sock: socket.socket, decoder: protocol.Decoder) -> None:
        selector = selectors.DefaultSelector()
        selector.register(sock, selectors.EVENT_READ, "master")
        selector.register(self.launcher.fileno(), selectors.EVENT_READ, "launcher")
        try:
            while True:
                for msg in decoder:  # the handshake may have read tasks already
                    self._handle(msg)
                self._send_results(sock)
                if self.no_more and not self.held:
                    self.log("no more tasks and all results sent: done")
                    return
                for key, _events in selector.select(self._flush_wait()):
                    if key.data == "launcher":
                        self._run_tasks()
                        continue
                    try:
                        data = sock.recv(RECV_SIZE)
                    except OSError as exc:
                        if exc.errno in (errno.EAGAIN, errno.EINTR):
                            continue
                        raise
                    if not data:
                        decoder.eof()
                        raise AgentFatal(
                            f"the master closed the connection with {len(self.held)} task(s) unreported"
                        )
                    decoder.feed(data)
        finally:
            selector.close()

    def _handle(self, msg: protocol.Message) -> None:
        if msg.type == protocol.CANCEL:
            key = (msg.body["process"], msg.body["attempt"])
            self.log(f"master: cancel {key[0]}.{key[1]}")
            if key in self.held:
                # its result still comes back, as `held` expects: now if it had not started
                self.results.extend(self.launcher.cancel(key))
            return
        if msg.type == protocol.BULK_GO:
            key = (msg.body["process"], msg.body["attempt"])
            if key in self.parked and key not in self.granted:
                self.granted.append(key)
                if msg.body.get("rate_bps") is not None:
                    self.grant_rate[key] = msg.body["rate_bps"]
            else:  # not ours to send (any more): nothing waits on it, so nothing to do
                self.log(f"bulk_go for {key[0]}.{key[1]}, which is not waiting: ignored")
            return
        if msg.type == protocol.NO_MORE_TASKS:
            self.log("master: no more tasks")
            self.no_more = True
            return
        if self.no_more:
            raise protocol.ProtocolError("a task after no_more_tasks")
        for task in msg.tasks():
            if len(self.held) >= self.window:
                raise protocol.ProtocolError(f"the master sent more than the window of {self.window} tasks")
            self._accept(task, msg.file_pairs(), [])
        self.filled = len(self.held)

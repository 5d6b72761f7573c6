"""The communicator: talks to the master, prepares tasks, returns results (seed §3.9.2, §3.9.4).

It runs in the agent's main thread. One `select` loop watches the master's socket and a wake-up
socket the launcher pokes when a task finishes, so tasks arrive while others run and results go
back as soon as they exist. The agent asks for nothing: the master keeps up to `window` tasks
here (initial tasks included) and the agent only checks that it never sends more. After
`no_more_tasks`, once every task it holds has been reported, the agent is done.

Bulk returns (issue 8 item 3): when the master's welcome names a `bulk_threshold`, a result whose
files are larger is announced with `bulk_ready` and parked (its files stay on disk, not in
memory) until the master's `bulk_go`; the agent meanwhile goes on running tasks and sending the
smaller results. A `bulk_go` with `rate_bps` (a limited subnet) is sent at no more than that rate,
paced as the master paces its inputs. A master that names no threshold gets every result at
once, as before.
"""

from __future__ import annotations

import errno
import queue
import selectors
import socket
import sys
import time
from collections.abc import Mapping
from typing import Any

from .. import protocol
from .inputfile import AgentInput
from .launcher import Launcher
from .workspace import Job, PrepareError, Workspace

HANDSHAKE_TIMEOUT = 60.0
RECV_SIZE = 1 << 18


class AgentFatal(Exception):
    """An error the agent cannot go on after (seed §3.9.5): it stops its task and exits non-zero."""


class Agent:
    """One agent run: connect, authenticate, serve the window, exit when the master has no more."""

    def __init__(
        self,
        host: str,
        port: int,
        agent_id: str,
        config: AgentInput,
        workspace: Workspace,
        hostname: str | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.agent_id = agent_id
        self.config = config
        self.workspace = workspace
        self.hostname = hostname or socket.gethostname()
        self.window = config.window
        self.held: dict[tuple[int, int], None] = {}  # tasks here whose results have not gone back
        self.bulk_threshold: int | None = None  # from the welcome: None, the master does not ask
        self.parked: dict[tuple[int, int], Job] = {}  # large results announced, waiting for bulk_go
        self.granted: list[tuple[int, int]] = []  # parked results the master said to send, in order
        self.grant_rate: dict[tuple[int, int], int] = {}  # their rate limits (bps), when given
        self.no_more = False
        self.jobs: queue.Queue[Job | None] = queue.Queue()
        self.results: queue.Queue[Job] = queue.Queue()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_w.setblocking(False)
        self.launcher = Launcher(self.jobs, self._finished, self.hostname)
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
            self.launcher.start()
            for initial in self.config.initial_tasks:  # they start while we reach the master
                self._accept(initial.task, [], initial.files)
            self.sock = self._connect()
            decoder = self._handshake(self.sock)
            self._serve(self.sock, decoder)
        finally:
            self.close()

    def close(self) -> None:
        """Stop the launcher (killing a running task), drop the connection, remove the work files."""
        self.launcher.abort()  # harmless if it never started
        if self.launcher.is_alive():
            self.launcher.join(5)
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        self._wake_r.close()
        self._wake_w.close()
        self.workspace.cleanup()

    def _finished(self, job: Job) -> None:
        """Called by the launcher thread."""
        self.results.put(job)
        try:
            self._wake_w.send(b"\0")
        except OSError:
            pass  # full means a wake-up is pending already; closed means we are stopping

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
            self.results.put(job)
            return
        self.log(f"task {task.process}.{task.attempt}: queued ({len(self.held)} held)")
        self.jobs.put(job)

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
        while True:
            try:
                job = self.results.get_nowait()
            except queue.Empty:
                return
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
            self._send_result(sock, job, msg, blobs)

    def _send_result(
        self, sock: socket.socket, job: Job, msg: dict[str, Any], blobs: list[bytes], bps: int | None = None
    ) -> None:
        try:
            frames = protocol.encode_frames(msg, blobs)
        except protocol.ProtocolError as exc:  # e.g. so many files that the list passes 1 MiB
            result = job.result
            assert result is not None
            result.error = f"output files not returned: {exc}"
            frames = protocol.encode_frames({"t": protocol.RESULT, "result": result})
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
        del self.held[job.key]
        self.workspace.discard(job)
        result = job.result
        assert result is not None
        self.log(
            f"task {job.task.process}.{job.task.attempt}: {result.status} exit={result.exit_code} "
            f"signal={result.signal} ({len(self.held)} held)"
        )

    # -- the master ---------------------------------------------------------------------------

    def _connect(self) -> socket.socket:
        """Reach the master, retrying for `connect_timeout` seconds (it may be restarting)."""
        deadline = time.monotonic() + self.config.connect_timeout
        delay = 0.2
        while True:
            try:
                sock = socket.create_connection((self.host, self.port), timeout=10)
                break
            except OSError as exc:
                left = deadline - time.monotonic()
                if left <= 0:
                    reason = exc.strerror or str(exc) or type(exc).__name__
                    raise AgentFatal(
                        f"cannot connect to the master at {self.host}:{self.port}: {reason}"
                    ) from None
                time.sleep(min(delay, left))
                delay = min(delay * 2, 5.0)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for name, value in (("TCP_KEEPIDLE", 60), ("TCP_KEEPINTVL", 15), ("TCP_KEEPCNT", 8)):
            if hasattr(socket, name):  # a vanished master is noticed within minutes, not hours
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
        self.log(f"connected to {self.host}:{self.port}")
        return sock

    def _handshake(self, sock: socket.socket) -> protocol.Decoder:
        sock.settimeout(HANDSHAKE_TIMEOUT)
        decoder = protocol.Decoder({protocol.CHALLENGE, protocol.REFUSED})
        secret = self.config.secret
        nonce_a = protocol.make_nonce()
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
            challenge = self._expect(sock, decoder)
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
        self.window = welcome.body["window"]
        self.bulk_threshold = welcome.body.get("bulk_threshold")
        if self.window != self.config.window:
            self.log(f"the master set the window to {self.window} (input file: {self.config.window})")
        sock.settimeout(None)
        decoder.allowed = frozenset(
            {protocol.TASK, protocol.NO_MORE_TASKS, protocol.BULK_GO, protocol.CANCEL}
        )
        self.log(f"authenticated; window {self.window}, bulk threshold {self.bulk_threshold}")
        return decoder

    def _expect(self, sock: socket.socket, decoder: protocol.Decoder) -> protocol.Message:
        msg = protocol.recv_message(sock, decoder)
        if msg is None:
            raise AgentFatal("the master closed the connection during the handshake")
        if msg.type == protocol.REFUSED:
            raise AgentFatal(f"the master refused this agent: {msg.body['reason'] or 'no reason given'}")
        return msg

    def _serve(self, sock: socket.socket, decoder: protocol.Decoder) -> None:
        selector = selectors.DefaultSelector()
        selector.register(sock, selectors.EVENT_READ, "master")
        selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        try:
            while True:
                for msg in decoder:  # the handshake may have read tasks already
                    self._handle(msg)
                self._send_results(sock)
                if self.no_more and not self.held:
                    self.log("no more tasks and all results sent: done")
                    return
                for key, _events in selector.select():
                    if key.data == "wake":
                        self._wake_r.recv(4096)
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
                self.launcher.cancel(key)  # its result still comes back, as `held` expects
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
        if len(self.held) >= self.window:
            raise protocol.ProtocolError(f"the master sent more than the window of {self.window} tasks")
        self._accept(msg.task(), msg.file_pairs(), [])

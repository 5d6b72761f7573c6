"""Signed, sealed TCP for application messages too big for a datagram (faultD's replicated state).

One connection per message, which is plenty for a push every few seconds. A connection carries
two things: a small header frame, sealed and signed like a datagram (common.overlay.envelope:
ring key MAC, the sender's signature and certificate, the recipient), which names the message's
type, its length and its SHA-256; then the message itself, exactly that long.

Nothing a stranger sends costs more than a few kB: the header is read with a limit of
`MAX_HEADER` bytes and a deadline of `header_timeout`, at most `max_unauthenticated` connections
may be at that stage at once and at most `max_unauthenticated_per_peer` of them from one address
(so that one source cannot take every slot; more are closed at once and counted), and the body
is read only after the header has been believed, one `max_bodies` at a time, with a deadline
that grows with its length; at most `max_waiting` believed connections may wait for or hold a
body slot, `max_waiting_per_signer` of them signed by one certificate (a ring member's stalled
bodies must not pile up file descriptors, nor one signer hold every body slot; more are closed
and counted). The body must match the signed digest and type, and what it claims (its sender)
must be the signer (common.overlay.claims). Whatever fails is dropped and counted,
like a bad datagram; an exception in the application's handler is counted too, and the server
goes on.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections import Counter
from collections.abc import Awaitable, Callable

import structlog
import trio

from common.droplog import DropLog
from common.hostport import parse_address
from common.overlay.claims import ClaimChecker
from common.overlay.envelope import SignedSealer
from common.overlay.identity import NodeIdentity
from common.overlay.messages import AppMessage
from common.wire import HEADER, DropReason, Message, MessageCodec, pack, unpack_array

log = structlog.get_logger("bulk")

MAX_BULK = 64 << 20  # a pool's state (Accountant log, config files) is far smaller
MAX_HEADER = 8192  # sealed header: certificate, signature, type, length, digest
MIN_RATE = 1 << 20  # bytes per second a body must at least arrive at


class BulkDrop:
    """Why the bulk channel dropped a connection, beyond the codec's and the sealer's reasons."""

    TOO_MANY = "too_many_connections"
    TOO_MANY_FROM_PEER = "too_many_from_peer"
    TOO_MANY_WAITING = "too_many_waiting_for_body"
    TOO_MANY_WAITING_FROM_SIGNER = "too_many_waiting_from_signer"
    BAD_HEADER = "bad_header"
    DIGEST = "digest_mismatch"
    TYPE = "type_mismatch"
    HANDLER = "handler_error"


async def _receive_exactly(stream: trio.SocketStream, n: int) -> bytes | None:
    """Exactly n bytes, or None if the peer closed first. Never buffers more than n."""
    buf = bytearray()
    while len(buf) < n:
        chunk = await stream.receive_some(min(n - len(buf), 1 << 16))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


class BulkChannel:
    """Sends and serves signed one-message TCP connections; `on_message` gets what arrives."""

    def __init__(
        self,
        key: bytes,
        identity: NodeIdentity,
        codec: MessageCodec,
        on_message: Callable[[Message, str], Awaitable[None]],
        *,
        replay_window: float = 30.0,
        timeout: float = 10.0,
        header_timeout: float = 5.0,
        max_unauthenticated: int = 16,
        max_unauthenticated_per_peer: int = 4,
        max_bodies: int = 2,
        max_waiting: int = 8,
        max_waiting_per_signer: int = 1,
    ) -> None:
        self.sealer = SignedSealer(
            key, identity, context="bulk", window=replay_window, max_size=MAX_HEADER, name="bulk"
        )
        self.claims = ClaimChecker(identity, window=replay_window, name="bulk")
        self.codec = codec
        self.on_message = on_message
        self.timeout = timeout
        self.header_timeout = header_timeout
        self.max_unauthenticated = max_unauthenticated
        self.max_unauthenticated_per_peer = max_unauthenticated_per_peer
        self.unauthenticated = 0
        self._unauthenticated_from: Counter[str] = Counter()  # by source host
        self._bodies = trio.Semaphore(max_bodies)
        self.max_waiting = max_waiting
        self.max_waiting_per_signer = max_waiting_per_signer
        self.waiting = 0  # believed connections waiting for, or holding, a body slot
        self._waiting_from: Counter[int] = Counter()  # by signer certificate serial
        self.own_drops: Counter[str] = Counter()
        self.drop_log = DropLog("bulk")
        self.sent = 0
        self.send_failures = 0

    @property
    def drops(self) -> dict[str, int]:
        """Messages dropped so far, by reason (limits, authentication, identity, framing, decoding)."""
        return self.sealer.drops | dict(self.codec.drops) | dict(self.claims.drops) | dict(self.own_drops)

    def _drop(self, reason: str, peer: str, detail: str) -> None:
        self.own_drops[reason] += 1
        self.drop_log.drop("bulk", peer, reason, detail)

    async def serve(
        self, bind: str, port: int, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Accept connections on bind:port until cancelled, one message from each."""
        listeners = await trio.open_tcp_listeners(port, host=bind)
        self.sealer.port = listeners[0].socket.getsockname()[1]
        await trio.serve_listeners(self._handle, listeners, task_status=task_status)

    async def _handle(self, stream: trio.SocketStream) -> None:
        """One connection, one message. Nothing a peer sends may end the server: an exception in
        a handler would take down trio's serve_listeners, so everything unexpected is counted."""
        try:
            host, port = stream.socket.getpeername()[:2]
            source: tuple[str, int] | None = (host, port)
            peer = f"{host}:{port}"
        except OSError:
            source, peer = None, "?"
        try:
            if self.unauthenticated >= self.max_unauthenticated:
                self._drop(
                    BulkDrop.TOO_MANY, peer, f"{self.unauthenticated} connections not yet authenticated"
                )
                return
            host = source[0] if source is not None else "?"
            if self._unauthenticated_from[host] >= self.max_unauthenticated_per_peer:
                self._drop(
                    BulkDrop.TOO_MANY_FROM_PEER,
                    peer,
                    f"{self._unauthenticated_from[host]} connections from {host} not yet authenticated",
                )
                return
            await self._receive(stream, source, peer, host)
        except Exception as e:
            self.codec.drop(DropReason.GARBAGE, peer, f"{type(e).__name__}: {e}")
        finally:
            await trio.aclose_forcefully(stream)

    async def _receive(
        self, stream: trio.SocketStream, source: tuple[str, int] | None, peer: str, host: str
    ) -> None:
        self.unauthenticated += 1
        self._unauthenticated_from[host] += 1
        header: bytes | None = None
        try:
            with trio.move_on_after(self.header_timeout):
                header = await self._read_header(stream, peer)
                if header is None:
                    return
            if header is None:
                self.codec.drop(DropReason.TRUNCATED, peer, f"no header within {self.header_timeout:g} s")
                return
            opened = self.sealer.open(header, time.time(), source)
            if opened is None:
                return
        finally:
            self.unauthenticated -= 1
            self._unauthenticated_from[host] -= 1
            if not self._unauthenticated_from[host]:
                del self._unauthenticated_from[host]
        descriptor = unpack_array(opened.body, 3, "[type, length, sha256]")
        if isinstance(descriptor, str):
            self._drop(BulkDrop.BAD_HEADER, peer, descriptor)
            return
        type_name, length, digest = descriptor
        if not (
            isinstance(type_name, str)
            and type_name in self.codec.types
            and isinstance(length, int)
            and 0 <= length <= min(MAX_BULK, self.codec.max_size)
            and isinstance(digest, bytes)
        ):
            self._drop(BulkDrop.BAD_HEADER, peer, f"type {str(type_name)[:40]!r}, length {length!r}")
            return
        signer = opened.sender.serial
        if self.waiting >= self.max_waiting:
            self._drop(BulkDrop.TOO_MANY_WAITING, peer, f"{self.waiting} connections waiting for a body")
            return
        if self._waiting_from[signer] >= self.max_waiting_per_signer:
            name = opened.sender.node_name
            self._drop(BulkDrop.TOO_MANY_WAITING_FROM_SIGNER, peer, f"{name!r} has bodies waiting already")
            return
        self.waiting += 1
        self._waiting_from[signer] += 1
        try:
            body = await self._receive_body(stream, peer, length)
        finally:
            self.waiting -= 1
            self._waiting_from[signer] -= 1
            if not self._waiting_from[signer]:
                del self._waiting_from[signer]
        if body is None:
            return
        if hashlib.sha256(body).digest() != digest:
            self._drop(BulkDrop.DIGEST, peer, "body does not match the signed digest")
            return
        msg = self.codec.decode(body, peer)
        if msg is None:
            return
        if msg.TYPE != type_name:
            self._drop(BulkDrop.TYPE, peer, f"header says {type_name}, body is {msg.TYPE}")
            return
        if isinstance(msg, AppMessage) and not self.claims.accept_direct(msg, opened.sender, peer):
            return
        try:
            await self.on_message(msg, peer)
        except Exception as e:
            self._drop(BulkDrop.HANDLER, peer, f"{msg.TYPE}: {type(e).__name__}: {e}")

    async def _receive_body(self, stream: trio.SocketStream, peer: str, length: int) -> bytes | None:
        async with self._bodies:
            with trio.move_on_after(self.timeout + length / MIN_RATE):
                body = await _receive_exactly(stream, length)
                if body is None:
                    self.codec.drop(DropReason.TRUNCATED, peer, f"body shorter than {length} bytes")
                return body
            self.codec.drop(DropReason.TRUNCATED, peer, f"{length} bytes not received in time")
            return None

    async def _read_header(self, stream: trio.SocketStream, peer: str) -> bytes | None:
        prefix = await _receive_exactly(stream, HEADER.size)
        if prefix is None:
            self.codec.drop(DropReason.TRUNCATED, peer, "closed before a header")
            return None
        (length,) = HEADER.unpack(prefix)
        if length > MAX_HEADER:
            self.codec.drop(DropReason.OVERSIZED, peer, f"header of {length} bytes exceeds {MAX_HEADER}")
            return None
        header = await _receive_exactly(stream, length)
        if header is None:
            self.codec.drop(DropReason.TRUNCATED, peer, f"header shorter than {length} bytes")
        return header

    async def send(self, addr: str, msg: Message) -> bool:
        """Deliver one message to the channel at `addr` (host:port); False if it could not."""
        body = self.codec.encode(msg)
        descriptor = pack([msg.TYPE, len(body), hashlib.sha256(body).digest()])
        header = self.sealer.seal(descriptor, addr, time.time(), os.urandom(16))
        host, port = parse_address(addr)
        try:
            with trio.fail_after(self.timeout + len(body) / MIN_RATE):
                stream = await trio.open_tcp_stream(host, port)
                async with stream:
                    await stream.send_all(HEADER.pack(len(header)) + header)
                    await stream.send_all(body)
        except (OSError, trio.TooSlowError, trio.BrokenResourceError) as e:
            self.send_failures += 1
            log.info("bulk send failed", peer=addr, type=msg.TYPE, error=str(e) or type(e).__name__)
            return False
        self.sent += 1
        return True

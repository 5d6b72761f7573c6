"""Sealed TCP for application messages too big for a datagram (faultD's replicated state).

Same key and sealing as the ring's UDP (`common.overlay.auth`), same typed messages; one
connection per message, which is plenty for a push every few seconds. Whatever fails the seal,
the frame limit or the codec is dropped and counted, like a bad datagram.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable

import structlog
import trio

from common.hostport import parse_address
from common.overlay.auth import Sealer
from common.wire import HEADER, DropReason, FrameDecoder, FrameTooLarge, Message, MessageCodec

log = structlog.get_logger("bulk")

MAX_BULK = 64 << 20  # a pool's state (Accountant log, config files) is far smaller


class BulkChannel:
    """Sends and serves sealed one-message TCP connections; `on_message` gets what arrives."""

    def __init__(
        self,
        key: bytes,
        codec: MessageCodec,
        on_message: Callable[[Message, str], Awaitable[None]],
        *,
        replay_window: float = 30.0,
        timeout: float = 10.0,
    ) -> None:
        self.sealer = Sealer(key, window=replay_window, max_size=MAX_BULK, name="bulk")
        self.codec = codec
        self.on_message = on_message
        self.timeout = timeout
        self.sent = 0
        self.send_failures = 0

    @property
    def drops(self) -> dict[str, int]:
        """Messages dropped so far, by reason (authentication, framing and decoding)."""
        return dict(self.sealer.drops) | dict(self.codec.drops)

    async def serve(
        self, bind: str, port: int, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Accept connections on bind:port until cancelled, one message from each."""
        await trio.serve_tcp(self._handle, port, host=bind, task_status=task_status)

    async def _handle(self, stream: trio.SocketStream) -> None:
        """One connection, one message. Nothing a peer sends may end the server: an exception in
        a handler would take down trio's serve_tcp, so everything unexpected is counted too."""
        try:
            await self._receive(stream)
        except Exception as e:
            self.codec.drop(DropReason.GARBAGE, "?", f"{type(e).__name__}: {e}")
        finally:
            await trio.aclose_forcefully(stream)

    async def _receive(self, stream: trio.SocketStream) -> None:
        try:
            host, port = stream.socket.getpeername()[:2]
            peer = f"{host}:{port}"
        except OSError:
            peer = "?"
        decoder = FrameDecoder(MAX_BULK)
        data = None
        with trio.move_on_after(self.timeout) as scope:
            try:
                async for chunk in stream:
                    decoder.feed(chunk)
                    data = decoder.next_frame()
                    if data is not None:
                        break
            except FrameTooLarge as e:
                self.codec.drop(DropReason.OVERSIZED, peer, str(e))
                return
            except trio.BrokenResourceError as e:
                self.codec.drop(DropReason.BROKEN, peer, str(e))
                return
        if data is not None:
            await self._deliver(data, peer)
        elif decoder.pending or scope.cancelled_caught:
            self.codec.drop(DropReason.TRUNCATED, peer, f"{decoder.pending} bytes, no complete frame")

    async def _deliver(self, data: bytes, peer: str) -> None:
        payload = self.sealer.open(data, time.time(), peer)
        if payload is None:
            return
        msg = self.codec.decode(payload, peer)
        if msg is not None:
            await self.on_message(msg, peer)

    async def send(self, addr: str, msg: Message) -> bool:
        """Deliver one message to the channel at `addr` (host:port); False if it could not."""
        sealed = self.sealer.seal(self.codec.encode(msg), time.time(), os.urandom(16))
        host, port = parse_address(addr)
        try:
            with trio.fail_after(self.timeout):
                stream = await trio.open_tcp_stream(host, port)
                async with stream:
                    await stream.send_all(HEADER.pack(len(sealed)) + sealed)
        except (OSError, trio.TooSlowError) as e:
            self.send_failures += 1
            log.info("bulk send failed", peer=addr, type=msg.TYPE, error=str(e) or type(e).__name__)
            return False
        self.sent += 1
        return True

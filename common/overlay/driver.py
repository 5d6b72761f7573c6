"""The real driver: one `OverlayNode` over UDP, on trio.

Everything goes over UDP: probes, keepalives and application messages alike. Overlay messages are
small (a routing row or a leaf set is well under a kilobyte), a central manager may talk to
thousands of peers and should hold no connection state for them, round-trip times measured by
probes then describe the very path the messages take, and losses are already handled by the
protocol (keepalive silence, probe retries, periodic repair). Bulk data (faultD's state
replication) is not an overlay message: applications send it over their own TCP streams
(`common.overlay.bulk`).

Every datagram is sealed with the ring's shared key (`common.overlay.auth`): a MAC, a timestamp
and a nonce. What fails the seal or the codec is dropped and counted; the node keeps running.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable

import structlog
import trio

from common.hostport import parse_address
from common.overlay.auth import Sealer, load_ring_key
from common.overlay.ids import id_hex
from common.overlay.messages import Peer, overlay_codec
from common.overlay.node import Event, Output, OverlayNode
from common.overlay.ring import RingConfig
from common.timer import Wakeup
from common.wire import MAX_DATAGRAM, Message

log = structlog.get_logger("overlay")

EventHandler = Callable[[Event], None]


class UdpOverlay:
    """Runs one overlay node: receives and seals datagrams, fires its timers, applies its output.

    Applications call `route`, `send_to_row`, `send_to_leaf_set`, `send_direct` and `broadcast`,
    and receive the node's events through `on_event`.
    """

    def __init__(
        self, config: RingConfig, *, on_event: EventHandler | None = None, key: bytes | None = None
    ) -> None:
        self.config = config
        self.key = key if key is not None else load_ring_key(config.key_file)
        self.sealer = Sealer(self.key, window=config.replay_window, name="overlay")
        self.codec = overlay_codec()
        self.on_event = on_event
        self.core: OverlayNode | None = None
        self._sock: trio.socket.SocketType | None = None
        self._wakeup = Wakeup()
        self.sent = 0
        self.received = 0

    @property
    def address(self) -> str:
        """The host:port other nodes reach this one at (known once `run` has bound the socket)."""
        assert self.core is not None, "not started"
        return self.core.me.addr

    @property
    def drops(self) -> dict[str, int]:
        """Datagrams dropped so far, by reason (authentication and decoding)."""
        return dict(self.sealer.drops) | dict(self.codec.drops)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Bind the socket, start or join the ring, then receive until cancelled."""
        cfg = self.config
        sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
        with sock:
            await sock.bind((cfg.bind, cfg.port))
            host, port = sock.getsockname()[:2]
            advertise = cfg.advertise or f"{host}:{port}"
            me = Peer(id=cfg.identity(), addr=advertise)
            self.core = OverlayNode(me, cfg.overlay, random.Random(os.urandom(16)))
            self._sock = sock
            log.info("overlay listening", addr=advertise, node_id=id_hex(me.id), bootstrap=cfg.bootstrap)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._wakeup.run, self._on_timer)
                await self._apply(self.core.start(trio.current_time(), cfg.bootstrap))
                task_status.started()
                await self._receive_loop()

    async def _receive_loop(self) -> None:
        assert self._sock is not None and self.core is not None
        while True:
            try:
                data, source = await self._sock.recvfrom(MAX_DATAGRAM + 1)
            except OSError as e:  # e.g. ICMP port unreachable reported on a later recv
                log.debug("udp receive error", error=str(e))
                continue
            peer = f"{source[0]}:{source[1]}"
            payload = self.sealer.open(data, time.time(), peer)
            if payload is None:
                continue
            msg = self.codec.decode_datagram(payload, peer)
            if msg is None:
                continue
            self.received += 1
            await self._apply(self.core.on_message(msg, trio.current_time()))

    async def _on_timer(self, now: float) -> None:
        if self.core is not None:
            await self._apply(self.core.on_timer(now))

    async def _apply(self, out: Output) -> None:
        if out.wakeup is not None:
            self._wakeup.set(out.wakeup)
        for event in out.events:
            if self.on_event is not None:
                self.on_event(event)
        for addr, msg in out.sends:
            await self._send(addr, msg)

    async def _send(self, addr: str, msg: Message) -> None:
        assert self._sock is not None
        try:
            data = self.sealer.seal(self.codec.encode_datagram(msg), time.time(), os.urandom(16))
            await self._sock.sendto(data, parse_address(addr))
            self.sent += 1
        except (OSError, ValueError) as e:
            # An unreachable or malformed peer address costs this one message, never the node.
            log.warning("send failed", peer=addr, type=msg.TYPE, error=str(e))

    # ------------------------------------------------------------------ application API

    def _core(self) -> OverlayNode:
        if self.core is None:
            raise RuntimeError("overlay not started")
        return self.core

    async def route(self, key: int, payload: Message) -> None:
        """Send a payload to the live node closest to `key`; see OverlayNode.route."""
        await self._apply(self._core().route(key, payload, trio.current_time()))

    async def send_to_row(self, row: int, payload: Message) -> None:
        """Send a payload to every node in one row of our routing table."""
        await self._apply(self._core().send_to_row(row, payload))

    async def send_to_leaf_set(self, payload: Message) -> None:
        """Send a payload to every member of our leaf set."""
        await self._apply(self._core().send_to_leaf_set(payload))

    async def send_direct(self, addr: str, payload: Message) -> None:
        """Send a payload to the node at `addr` (host:port)."""
        await self._apply(self._core().send_direct(addr, payload))

    async def measure(self, peer: Peer) -> None:
        """Probe a node's round-trip time unless already measured; see OverlayNode.measure."""
        await self._apply(self._core().measure(peer, trio.current_time()))

    async def broadcast(self, payload: Message) -> None:
        """Reach every node of the ring once; see OverlayNode.broadcast."""
        await self._apply(self._core().broadcast(payload))

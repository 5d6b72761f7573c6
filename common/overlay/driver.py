"""The real driver: one `OverlayNode` over UDP, on trio.

Everything goes over UDP: probes, keepalives and application messages alike. Overlay messages are
small (a routing row or a leaf set is well under a kilobyte), a central manager may talk to
thousands of peers and should hold no connection state for them, round-trip times measured by
probes then describe the very path the messages take, and losses are already handled by the
protocol (keepalive silence, probe retries, periodic repair). Bulk data (faultD's state
replication) is not an overlay message: applications send it over their own TCP streams
(`common.overlay.bulk`).

Every datagram is sealed with the ring's shared key and signed by this node
(`common.overlay.envelope`), and names its recipient; every application payload this node
originates carries its proof (`common.overlay.claims.endorse`). On receipt the driver checks the
seal, the signature and the sender's certificate, then that what the message claims (sender ids,
addresses, pools) is what the certificates give, and only then feeds the pure core: the core
never sees crypto. What fails is dropped and counted by reason (`drops`, shown in `status`), and
an exception raised while the core handles a message is caught, counted as `handler_error` and
logged (rate-limited): one datagram must never stop the node.
"""

from __future__ import annotations

import ipaddress
import os
import random
import time
from collections import Counter
from collections.abc import Callable

import structlog
import trio

from common.droplog import DropLog
from common.hostport import parse_address
from common.overlay.auth import load_ring_key
from common.overlay.certs import NodeCertificate
from common.overlay.claims import ClaimChecker, endorse
from common.overlay.envelope import SignedSealer
from common.overlay.identity import NodeIdentity
from common.overlay.ids import id_hex
from common.overlay.messages import AppMessage, JoinRequest, Peer, overlay_codec
from common.overlay.node import Event, Output, OverlayNode
from common.overlay.ratelimit import PeerRateLimiter
from common.overlay.ring import RingConfig
from common.timer import Wakeup
from common.wire import MAX_DATAGRAM, Message

log = structlog.get_logger("overlay")

EventHandler = Callable[[Event], None]

DATAGRAMS_PER_PEER = 500.0  # per second and source address, after the ring key's MAC
DATAGRAM_BURST = 1000.0


class UdpOverlay:
    """Runs one overlay node: receives and seals datagrams, fires its timers, applies its output.

    Applications call `route`, `send_to_row`, `send_to_leaf_set`, `send_direct` and `broadcast`,
    and receive the node's events through `on_event`.
    """

    def __init__(
        self,
        config: RingConfig,
        *,
        on_event: EventHandler | None = None,
        key: bytes | None = None,
        identity: NodeIdentity | None = None,
        same_pool: bool = False,
    ) -> None:
        self.config = config
        self.key = key if key is not None else load_ring_key(config.key_file)
        self.identity = identity if identity is not None else config.load_identity(same_pool=same_pool)
        self.sealer = SignedSealer(
            self.key,
            self.identity,
            context="datagram",
            window=config.replay_window,
            name="overlay",
            limiter=PeerRateLimiter(DATAGRAMS_PER_PEER, DATAGRAM_BURST),
        )
        self.claims = ClaimChecker(self.identity, window=config.replay_window)
        self.codec = overlay_codec()
        self.on_event = on_event
        self.core: OverlayNode | None = None
        self._sock: trio.socket.SocketType | None = None
        self._wakeup = Wakeup()
        self.errors: Counter[str] = Counter()
        self.error_log = DropLog("overlay.errors")
        self.sent = 0
        self.received = 0
        # seed -> (host, port, written as an address), until matched to its node (_match_seed)
        self._unmatched_seeds: dict[str, tuple[str, int, bool]] = {}

    @property
    def address(self) -> str:
        """The host:port other nodes reach this one at (known once `run` has bound the socket)."""
        assert self.core is not None, "not started"
        return self.core.me.addr

    @property
    def drops(self) -> dict[str, int]:
        """Datagrams dropped so far, by reason (authentication, identity, decoding, handler errors)."""
        return self.sealer.drops | dict(self.codec.drops) | dict(self.claims.drops) | dict(self.errors)

    def reload_revoked(self) -> None:
        """SIGHUP: read the revocation list again (CertificateError naming it if it is broken)."""
        from common.overlay.certs import load_revoked

        path = self.config.identity_files().revoked
        self.identity.trust.revoked = load_revoked(path) if path is not None else frozenset()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Bind the socket, start or join the ring, then receive until cancelled."""
        cfg = self.config
        sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
        with sock:
            await sock.bind((cfg.bind, cfg.port))
            host, port = sock.getsockname()[:2]
            self.sealer.port = port
            advertise = cfg.advertise or f"{host}:{port}"
            me = Peer(id=cfg.identity(), addr=advertise)
            self.core = OverlayNode(
                me, cfg.overlay, random.Random(os.urandom(16)), nonce_rng=random.Random(os.urandom(16))
            )
            self._sock = sock
            log.info("overlay listening", addr=advertise, node_id=id_hex(me.id), seeds=cfg.seeds())
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._wakeup.run, self._on_timer)
                await self._apply(self.core.start(trio.current_time(), cfg.seeds()))
                self._unmatched_seeds = {
                    seed: (host, port, _is_address(host))
                    for seed in self.core.seeds
                    for host, port in [parse_address(seed)]
                }
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
            now = time.time()
            opened = self.sealer.open(data, now, (source[0], source[1]))
            if opened is None:
                continue
            if opened.sender.node_id == self.core.me.id:
                await self._own_datagram(opened.recipient)
                continue
            msg = self.codec.decode_datagram(opened.body, opened.peer)
            if msg is None or not self.claims.accept(msg, opened.sender, now, opened.peer):
                continue
            self.received += 1
            if self._unmatched_seeds:
                self._match_seed(msg, opened.sender, source[0], source[1])
            try:
                await self._apply(self.core.on_message(msg, trio.current_time()))
            except Exception as e:  # a bug the message found must cost that message, not the node
                self._error("handler_error", opened.peer, f"{msg.TYPE}: {type(e).__name__}: {e}")

    async def _own_datagram(self, recipient: str) -> None:
        """A datagram we signed came back to us: the address we sent it to is ours, under
        another spelling than the one we advertise (an IP, another name). If it is one of our
        seeds, the core learns it is a seed itself (OverlayNode.seed_is_self); nothing else of
        ours is for us (a node never sends to itself)."""
        assert self.core is not None
        self._unmatched_seeds.pop(recipient, None)
        if self.core.is_seed(recipient):
            log.info("seed is this node", seed=recipient)
            await self._apply(self.core.seed_is_self(recipient, trio.current_time()))

    def _match_seed(self, msg: Message, signer: NodeCertificate, host: str, port: int) -> None:
        """Tell the core which node a seed written otherwise than that node advertises itself is
        (a name where it advertises its address, or the reverse): a datagram signed by the node
        itself (a join request's joiner, a message's sender), from the seed's port and, for a
        seed written as an address, from that address; for a name, from a node whose
        certificate lists it (we can only reach a seed by a name its certificate lists: the
        envelope's recipient check)."""
        assert self.core is not None
        if isinstance(msg, JoinRequest):
            peer = msg.joiner if msg.hops == 0 else None  # a forwarded one's joiner is unchecked
        else:
            peer = getattr(msg, "sender", None)
        if not isinstance(peer, Peer) or peer.id != signer.node_id:
            return
        for seed, (seed_host, seed_port, address) in list(self._unmatched_seeds.items()):
            if seed_port == port and (seed_host == host if address else signer.allows_host(seed_host)):
                del self._unmatched_seeds[seed]
                self.core.seed_alias(seed, peer.addr)

    def _error(self, reason: str, peer: str, detail: str) -> None:
        self.errors[reason] += 1
        self.error_log.drop("overlay", peer, reason, detail)

    async def _on_timer(self, now: float) -> None:
        if self.core is not None:
            try:
                await self._apply(self.core.on_timer(now))
            except Exception as e:
                self._error("timer_error", "-", f"{type(e).__name__}: {e}")

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
            target = parse_address(addr)
            data = self.sealer.seal(self.codec.encode_datagram(msg), addr, time.time(), os.urandom(16))
            await self._sock.sendto(data, target)
            self.sent += 1
        except (OSError, ValueError) as e:
            # An unreachable or malformed peer address costs this one message, never the node.
            log.warning("send failed", peer=addr, type=msg.TYPE, error=str(e))
        except (OverflowError, TypeError) as e:
            # A field msgpack cannot encode (e.g. an integer beyond 64 bits) costs this message only.
            self.errors["unencodable"] += 1
            log.warning("send failed: message not encodable", peer=addr, type=msg.TYPE, error=str(e))

    # ------------------------------------------------------------------ application API

    def _core(self) -> OverlayNode:
        if self.core is None:
            raise RuntimeError("overlay not started")
        return self.core

    def _endorse(self, payload: Message) -> Message:
        if not isinstance(payload, AppMessage):
            raise TypeError(f"{type(payload).__name__} is not an application payload (AppMessage)")
        return endorse(self.identity, payload, time.time())

    async def route(self, key: int, payload: Message) -> None:
        """Send a payload to the live node closest to `key`; see OverlayNode.route."""
        await self._apply(self._core().route(key, self._endorse(payload), trio.current_time()))

    async def send_to_row(self, row: int, payload: Message) -> None:
        """Send a payload to every node in one row of our routing table."""
        await self._apply(self._core().send_to_row(row, self._endorse(payload)))

    async def send_to_leaf_set(self, payload: Message) -> None:
        """Send a payload to every member of our leaf set."""
        await self._apply(self._core().send_to_leaf_set(self._endorse(payload)))

    async def send_direct(self, addr: str, payload: Message) -> None:
        """Send a payload to the node at `addr` (host:port)."""
        await self._apply(self._core().send_direct(addr, self._endorse(payload)))

    async def measure(self, peer: Peer) -> None:
        """Probe a node's round-trip time unless already measured; see OverlayNode.measure."""
        await self._apply(self._core().measure(peer, trio.current_time()))

    async def broadcast(self, payload: Message) -> None:
        """Reach every node of the ring once; see OverlayNode.broadcast."""
        await self._apply(self._core().broadcast(self._endorse(payload)))


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True

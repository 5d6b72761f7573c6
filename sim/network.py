"""Simulation driver: thousands of overlay nodes in one process, on virtual time.

It runs the very same `OverlayNode` the daemons run, replacing sockets with an in-memory network
(per-pair latency from a topology, seeded loss, partitions) and the clock with an event heap.
Everything random comes from generators seeded from one seed, and ties in the heap are broken by
insertion order, so a seed always gives the same event trace (`trace_digest` proves it).
Messages are passed as objects, not bytes: the wire format is tested on its own, and skipping it
here is what makes 10,000 nodes affordable.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import heapq
import random
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from common.overlay.certs import CertificateAuthority, public_key_of
from common.overlay.envelope import SignedSealer
from common.overlay.identity import NodeIdentity, TrustStore
from common.overlay.ids import closeness
from common.overlay.messages import Peer, Route, overlay_codec
from common.overlay.node import Event, Output, OverlayNode, OverlayParams
from common.wire import Message
from sim.topology import Placement

# Event kinds. Final: constants to a compiled build (docs/bench/build_compiled_sim.sh), not
# globals looked up at each use.
_DELIVER: Final = 0
_TIMER: Final = 1
_START: Final = 2
_CALL: Final = 3
BUCKET_SECONDS: Final = 0.01  # the event queue's bucket width (SimNetwork._push)
_PER_BUCKET: Final = 1 / BUCKET_SECONDS
_MASK64: Final = (1 << 64) - 1

EventHook = Callable[[int, Event, float], None]


@dataclass(slots=True)
class SimNode:
    """One simulated node: its overlay core, whether it is up, its pending timer and sends."""

    index: int
    node_id: int
    core: OverlayNode
    alive: bool = True
    timer_at: float | None = None
    sent: int = 0


@dataclass
class NetworkStats:
    """Messages sent, by type, and those lost, cut by a partition or sent to a dead node."""

    sent: Counter[str] = field(default_factory=Counter)
    lost: int = 0
    partitioned: int = 0
    to_dead: int = 0


_RECIPIENT = "192.0.2.17:9618"


def _metering_sealer() -> SignedSealer:
    """A signed sealer of a typical node, to measure envelopes with (never to check any)."""
    ca = CertificateAuthority(Ed25519PrivateKey.from_private_bytes(bytes(32)))
    key = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
    cert = ca.issue(
        ring="federation", node_name="cm.pool-0017.example.org", node_id=(1 << 127) + 17,
        pool="pool-0017", hosts=["192.0.2.17"], public_key=public_key_of(key),
        not_before=0.0, not_after=365 * 86400.0, serial=17,
    )  # fmt: skip
    trust = TrustStore(Ed25519PublicKey.from_public_bytes(ca.public_key), "federation")
    return SignedSealer(bytes(32), NodeIdentity(key, cert, trust), context="datagram", name="meter")


class ByteMeter:
    """Bytes the sent messages would take on the wire: the codec's datagram, sealed and signed as
    the UDP driver does it (`common.overlay.envelope`: ring MAC, recipient, the sender's
    certificate and Ed25519 signature), with a certificate of typical size (a one-host node named
    like a central manager's FQDN). Encoding every message would cost more than simulating it, so
    each type's size is sampled (every `stride`-th message of the type, the first one included:
    deterministic) and the total is its count times its mean sampled size."""

    def __init__(self, stride: int = 8) -> None:
        self.stride = stride
        self.codec = overlay_codec()
        self.sealer = _metering_sealer()
        self.count: Counter[str] = Counter()
        self._sampled: Counter[str] = Counter()
        self._sampled_bytes: Counter[str] = Counter()
        # Sealing signs (Ed25519), which costs more than the rest of a message's simulation; the
        # sealed size depends on the body's length only (fixed recipient, time, nonce, certificate
        # and signature length), so each length is sealed once.
        self._sealed_size: dict[int, int] = {}

    def add(self, msg: Message) -> None:
        """Count one sent message."""
        kind = msg.TYPE
        n = self.count[kind]
        self.count[kind] = n + 1
        if n % self.stride == 0:
            body = self.codec.encode_datagram(msg)
            sealed = self._sealed_size.get(len(body))
            if sealed is None:
                sealed = self._sealed_size[len(body)] = len(
                    self.sealer.seal(body, _RECIPIENT, 0.0, bytes(16))
                )
            self._sampled[kind] += 1
            self._sampled_bytes[kind] += sealed

    def total(self) -> float:
        """Estimated bytes of every message counted so far."""
        return sum(n * self._sampled_bytes[k] / self._sampled[k] for k, n in self.count.items())

    def by_type(self) -> dict[str, float]:
        """Mean sealed size of each type counted, in bytes."""
        return {k: self._sampled_bytes[k] / self._sampled[k] for k in sorted(self.count)}


class SimNetwork:
    """The in-memory network and event heap simulated nodes run on; see the module docstring."""

    def __init__(
        self,
        latency: Callable[[int, int], float],
        *,
        seed: int,
        params: OverlayParams | None = None,
        loss: float = 0.0,
        on_event: EventHook | None = None,
        record_trace: bool = False,
    ) -> None:
        self.latency = latency
        # A Placement's latency, computed inline in _apply (a call per message was ~3 % of a run)
        owner = getattr(latency, "__self__", None)
        self._placement: Placement | None = None
        if isinstance(owner, Placement) and type(owner).latency is Placement.latency:
            self._placement = owner if latency == owner.latency else None
        self.seed = seed
        self.params = params or OverlayParams()
        self.loss = loss
        self.on_event = on_event
        self.now = 0.0
        self.nodes: dict[int, SimNode] = {}
        self.stats = NetworkStats()
        self.trace: list[tuple[float, int, int, str]] | None = [] if record_trace else None
        self._digest = 0
        self._type_codes: dict[str, int] = {}
        self._rng = random.Random(f"net-{seed}")
        # The event queue (see _push): a heap of the events up to the current bucket's end, and
        # the later events in per-bucket lists, with a heap of those buckets' numbers.
        self._heap: list[tuple[float, int, int, Any, Any, Any]] = []
        self._bucket = -1  # the current bucket: events of buckets <= this one are in _heap
        self._later: dict[int, list[tuple[float, int, int, Any, Any, Any]]] = {}
        self._later_keys: list[int] = []
        self._seq = 0
        self._group: dict[int, int] = {}
        self._index_of: dict[str, int] = {}  # address -> node index, parsed once per address
        # Called at each delivery of a Route message (src, dst, message, time): lookups' paths.
        self.hop_latency: Callable[[int, int, Message, float], None] | None = None
        self.meter: ByteMeter | None = None  # set to measure the bytes of what is sent

    # ------------------------------------------------------------------ scenario control

    @staticmethod
    def addr(index: int) -> str:
        """A simulated node's address: 'n' and its index."""
        return f"n{index}"

    def add_node(
        self, index: int, node_id: int, *, bootstrap: int | list[int] | None, at: float | None = None
    ) -> None:
        """Create a node at topology position `index`; it starts (joins) at time `at`, through
        the node at `bootstrap` or the seeds listed (OverlayNode.start)."""
        if index in self.nodes and self.nodes[index].alive:
            raise ValueError(f"node {index} already exists")
        me = Peer(id=node_id, addr=self.addr(index))
        core = OverlayNode(me, self.params, random.Random(f"node-{self.seed}-{index}-{node_id}"))
        self.nodes[index] = SimNode(index, node_id, core)
        self._push(self.now if at is None else at, _START, index, bootstrap, None)

    def _seeds(self, bootstrap: int | list[int] | None) -> str | list[str] | None:
        if bootstrap is None:
            return None
        if isinstance(bootstrap, int):
            return self.addr(bootstrap)
        return [self.addr(i) for i in bootstrap]

    def crash(self, index: int) -> None:
        """The node stops at once; messages to it are lost."""
        self.nodes[index].alive = False
        self.nodes[index].timer_at = None

    def restart(self, index: int, *, bootstrap: int | list[int] | None, at: float | None = None) -> None:
        """A crashed node comes back with the same id and empty state, and joins again."""
        old = self.nodes[index]
        if old.alive:
            raise ValueError(f"node {index} is running")
        self.add_node(index, old.node_id, bootstrap=bootstrap, at=at)

    def partition(self, groups: list[set[int]]) -> None:
        """Only nodes in the same group can talk; nodes in no group talk to nobody."""
        self._group = {i: g for g, members in enumerate(groups) for i in members}

    def heal(self) -> None:
        """End a partition: every node can reach every other again."""
        self._group = {}

    def call(self, at: float, fn: Callable[[], None]) -> None:
        """Run an arbitrary scenario step at a virtual time."""
        self._push(at, _CALL, fn, None, None)

    def route(self, src: int, key: int, payload: Message) -> None:
        """Node `src` routes a payload to the live node closest to `key` (OverlayNode.route)."""
        node = self.nodes[src]
        self._apply(node, node.core.route(key, payload, self.now))

    def broadcast(self, src: int, payload: Message) -> None:
        """Node `src` broadcasts a payload to the ring (OverlayNode.broadcast)."""
        node = self.nodes[src]
        self._apply(node, node.core.broadcast(payload))

    def send_direct(self, src: int, addr: str, payload: Message) -> None:
        """Node `src` sends a payload to the node at `addr` (OverlayNode.send_direct)."""
        node = self.nodes[src]
        self._apply(node, node.core.send_direct(addr, payload))

    def measure(self, src: int, peer: Peer) -> None:
        """Node `src` probes `peer` for its round-trip time, as the daemons' `measure` does."""
        node = self.nodes[src]
        self._apply(node, node.core.measure(peer, self.now))

    # ------------------------------------------------------------------ queries

    def alive(self) -> list[SimNode]:
        """The nodes that are up and have joined the ring."""
        return [n for n in self.nodes.values() if n.alive and n.core.joined]

    def root_oracle(self) -> RootOracle:
        """Ground truth for lookups: computed from the live joined nodes, not from any node's state."""
        return RootOracle({n.node_id: n.index for n in self.alive()})

    @property
    def trace_digest(self) -> str:
        """A fingerprint of every send so far (time, source, destination, type)."""
        return f"{self._digest:016x}"

    # ------------------------------------------------------------------ the event loop

    def _push(self, t: float, kind: int, a: Any, b: Any, c: Any) -> None:
        """Queue an event. Events run in (time, insertion) order, as from one heap; but only the
        current bucket of BUCKET_SECONDS is a heap (_heap), later events wait in a list per
        bucket. A single heap held every node's timer, seconds to minutes ahead, so each pop
        of a message sifted through ~log2(N) levels of far-off timers; the buckets keep the
        heap to the next few milliseconds. The order is exactly the single heap's: the bucket
        number floor(t / BUCKET_SECONDS) never decreases as t grows, so every event in a later
        bucket comes after every event in the heap, and an event due in the current bucket or
        earlier goes straight into the heap."""
        self._seq += 1
        self._queue((t, self._seq, kind, a, b, c))

    def _queue(self, event: tuple[float, int, int, Any, Any, Any]) -> None:
        k = int(event[0] * _PER_BUCKET)
        if k <= self._bucket:
            heapq.heappush(self._heap, event)
            return
        bucket = self._later.get(k)
        if bucket is None:
            self._later[k] = [event]
            heapq.heappush(self._later_keys, k)
        else:
            bucket.append(event)

    def _next_bucket(self) -> bool:
        """Make the earliest later bucket the heap (the heap is empty); False if none is left."""
        if not self._later_keys:
            return False
        k = heapq.heappop(self._later_keys)
        heap = self._later.pop(k)
        heapq.heapify(heap)
        self._heap, self._bucket = heap, k
        return True

    def run_until(self, t_end: float) -> None:
        """Process every event due by virtual time `t_end`, in time order (ties: insertion order)."""
        nodes, pop, apply = self.nodes, heapq.heappop, self._apply
        while True:
            heap = self._heap
            if not heap:
                if not self._next_bucket():
                    break
                heap = self._heap
            if heap[0][0] > t_end:
                break
            t, _, kind, a, b, c = pop(heap)
            self.now = t
            if kind == _DELIVER:
                node = nodes.get(a)
                if node is None or not node.alive:
                    self.stats.to_dead += 1
                    continue
                if type(c) is Route and self.hop_latency is not None:
                    self.hop_latency(b, a, c, t)
                apply(node, node.core.on_message(c, t))
            elif kind == _TIMER:
                node = self.nodes[a]
                if node.alive and node.timer_at == t and node.core is b:
                    node.timer_at = None
                    self._apply(node, node.core.on_timer(t))
            elif kind == _START:
                node = self.nodes[a]
                if node.alive:
                    self._apply(node, node.core.start(t, self._seeds(b)))
            else:
                a()
        self.now = max(self.now, t_end)

    def _apply(self, node: SimNode, out: Output) -> None:
        src = node.index
        now = self.now
        sends = out.sends
        if sends:
            # The per-send work of _push and the counters, with everything looked up once per
            # batch: this loop runs for every simulated message.
            node.sent += len(sends)
            sent, type_codes, index_of = self.stats.sent, self._type_codes, self._index_of
            trace, meter, group, loss = self.trace, self.meter, self._group, self.loss
            latency, push = self.latency, heapq.heappush
            placement = self._placement
            if placement is not None:  # Placement.latency's terms, in its order (same float sums)
                access, endpoint_of = placement.access, placement.endpoint_of
                src_access, src_row = access[src], placement.row_of(src)
            heap, bucket, later, later_keys = self._heap, self._bucket, self._later, self._later_keys
            digest, seq, stamp = self._digest, self._seq, int(now * 1e9)
            for addr, msg in sends:
                dst = index_of.get(addr)
                if dst is None:
                    dst = index_of[addr] = int(addr[1:])
                kind = msg.TYPE
                sent[kind] += 1
                code = type_codes.get(kind)
                if code is None:
                    code = type_codes[kind] = len(type_codes)
                # Tuples of ints hash the same in every process (unlike str), so the digest is stable.
                digest = (digest * 1000003 ^ hash((stamp, src, dst, code))) & _MASK64
                if trace is not None:
                    trace.append((now, src, dst, kind))
                if meter is not None:
                    meter.add(msg)
                if group and group.get(src, -1) != group.get(dst, -2):
                    self.stats.partitioned += 1
                    continue
                if loss and self._rng.random() < loss:
                    self.stats.lost += 1
                    continue
                seq += 1
                # _queue, inlined (the heap and bucket change only between events).
                if placement is None:
                    t = now + latency(src, dst)
                else:
                    t = now + (src_access + access[dst] + src_row[endpoint_of[dst]] if dst != src else 0.0)
                k = int(t * _PER_BUCKET)
                if k <= bucket:
                    push(heap, (t, seq, _DELIVER, dst, src, msg))
                else:
                    waiting = later.get(k)
                    if waiting is None:
                        later[k] = [(t, seq, _DELIVER, dst, src, msg)]
                        push(later_keys, k)
                    else:
                        waiting.append((t, seq, _DELIVER, dst, src, msg))
            self._digest, self._seq = digest, seq
        if self.on_event is not None:
            for event in out.events:
                self.on_event(src, event, now)
        if out.wakeup is not None and (node.timer_at is None or out.wakeup < node.timer_at):
            node.timer_at = out.wakeup
            self._push(out.wakeup, _TIMER, src, node.core, None)


@contextlib.contextmanager
def without_cycle_collector() -> Iterator[None]:
    """Run with Python's cycle collector off. Each full collection walks every tracked object
    (every node's state, every message in flight, the flock paper's job table), and those
    only grow during a run: in the flock paper at 1000 pools the walks were ~40 % of the time
    (measured at 500 pools: 71 s of 234 s), in the overlay benchmark ~4 % at 1,000 nodes.
    The simulations make no reference cycles worth collecting: reference counting still frees
    every message, offer and willing-list entry (peak memory measured the same,
    docs/results.md)."""
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class RootOracle:
    """The live node numerically closest to a key, by bisection over the sorted live ids."""

    def __init__(self, index_of: dict[int, int]) -> None:
        self.index_of = index_of
        self.ids = sorted(index_of)

    def root(self, key: int) -> int:
        """The index of the live node whose id is numerically closest to `key`."""
        ids = self.ids
        i = bisect.bisect_left(ids, key)
        around = [ids[(i - 1) % len(ids)], ids[i % len(ids)]]
        return self.index_of[min(around, key=lambda n: closeness(key, n))]


def route_latency_tracker(
    network: SimNetwork, lookup_of: Callable[[Message], int | None]
) -> dict[int, float]:
    """Accumulate, per lookup, the latency of every hop its Route messages take."""
    totals: dict[int, float] = {}

    def on_hop(src: int, dst: int, msg: Message, t: float) -> None:
        if isinstance(msg, Route):  # (SimNetwork calls it for Route messages only)
            lookup = lookup_of(msg.payload)
            if lookup is not None:
                totals[lookup] = totals.get(lookup, 0.0) + network.latency(src, dst)

    network.hop_latency = on_hop
    return totals

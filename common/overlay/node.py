"""The overlay node: Pastry's join, routing, proximity neighbour selection and repair, as a pure
state machine.

Every entry point takes `now` and returns an `Output`: messages to send (address, message),
events for the application, and the time at which the node wants `on_timer` called next. The node
never reads a clock, sleeps or touches a socket, so the trio driver runs it over UDP and the
simulator runs thousands of them on virtual time, with identical behaviour.

Liveness: leaf-set members are pinged every `keepalive_interval` and declared dead after
`leaf_timeout` of silence (and never by probes, so that lost datagrams do not cut the ring);
routing-table entries are probed every `table_probe_interval` and declared dead after three
unanswered probes. A dead leaf member is replaced from the leaf sets of
the remaining extreme members; a dead table entry from the same row of another entry (Pastry's
repair). Nodes declared dead are not re-learned second-hand for `dead_memory` seconds.

Routed messages are acknowledged hop by hop: a hop that does not ack within `hop_timeout` is
probed (and declared dead if the probes fail too) while the message is routed around it at once.
That is what makes a message keyed to a node that just died (faultD's manager_missing) reach the
closest live node before any leaf set has noticed the death.

Leaf-set consistency: concurrent joins can leave a stretch of the ring whose members know each
other but not their neighbours on either side, and exchanges within leaf sets cannot merge
chains that share no member. So every `leaf_exchange_interval` a node also routes a join request
for its own id through a random routing-table entry; the routing tables span the whole ring, so
the request ends at our true nearest neighbour (excluding us), which answers with its leaf set.

Healing: the last `departed_memory` nodes declared dead are probed again, one every
`revive_interval`; one that answers is learned anew. After a partition heals, that is how the two
halves (each of which declared the other dead) find each other and merge back into one ring.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from pydantic import Field, field_validator

from common.config import StrictModel
from common.overlay.ids import closeness, digit, shared_prefix_len
from common.overlay.leafset import LeafSet
from common.overlay.messages import (
    MAX_LEAF_SET,
    Broadcast,
    Direct,
    Hello,
    JoinInfo,
    JoinRequest,
    LeafSetPush,
    LeafSetRequest,
    Peer,
    Ping,
    Pong,
    Route,
    RouteAck,
    RowReply,
    RowRequest,
)
from common.overlay.table import RoutingTable
from common.wire import Message


class OverlayParams(StrictModel):
    """Protocol parameters; the `[overlay]` section of a daemon's config."""

    b: int = Field(4, description="bits per digit: rows of 2^b columns")
    leaf_set_size: int = Field(16, ge=2, le=MAX_LEAF_SET, description="l: l/2 neighbours on each side")
    keepalive_interval: float = Field(10.0, gt=0)
    leaf_timeout: float = Field(30.0, gt=0, description="silence after which a leaf member is dead")
    probe_timeout: float = Field(3.0, gt=0)
    table_probe_interval: float = Field(60.0, gt=0)
    row_maintenance_interval: float = Field(60.0, gt=0)
    leaf_exchange_interval: float = Field(60.0, gt=0)
    hop_timeout: float = Field(1.0, gt=0, description="wait for a routed message's per-hop ack")
    max_reroutes: int = Field(4, ge=0, description="hops tried around silent nodes before giving up")
    join_retry: float = Field(5.0, gt=0)
    dead_memory: float = Field(120.0, gt=0)
    revive_interval: float = Field(30.0, gt=0, description="how often a departed node is probed again")
    departed_memory: int = Field(64, ge=0, description="how many departed nodes are remembered for that")

    @field_validator("b")
    @classmethod
    def _digit_bits(cls, value: int) -> int:
        if value not in (1, 2, 4, 8):
            raise ValueError("b must be 1, 2, 4 or 8 (a digit width dividing 128)")
        return value

    @field_validator("leaf_set_size")
    @classmethod
    def _even(cls, value: int) -> int:
        if value % 2:
            raise ValueError("the leaf set size must be even (l/2 on each side)")
        return value


# ----------------------------------------------------------------------------- events


@dataclass(frozen=True)
class Joined:
    """The node is part of the ring."""


@dataclass(frozen=True)
class Delivered:
    """A routed payload arrived at its root: us."""

    key: int
    payload: Message
    origin: Peer
    hops: int


@dataclass(frozen=True)
class Received:
    """A payload sent directly to us (row send, leaf-set send)."""

    payload: Message
    sender: Peer


@dataclass(frozen=True)
class BroadcastReceived:
    """A broadcast payload reached us (the origin gets none of its own)."""

    payload: Message
    origin: Peer


@dataclass(frozen=True)
class LeafSetChanged:
    """Our leaf set changed; its members now (faultD replicates to them)."""

    members: tuple[Peer, ...]


Event = Joined | Delivered | Received | BroadcastReceived | LeafSetChanged


@dataclass
class Output:
    """What an entry point returns: datagrams to send, events for the application, next wake-up."""

    sends: list[tuple[str, Message]] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    wakeup: float | None = None


ForwardHook = Callable[[int, Message, Peer], Message | None]
"""Sees a routed payload at each hop (key, payload, next hop); returns it (possibly changed) or
None to stop it here. Over UDP a payload carries its origin's signature (common.overlay.claims):
a hook there may stop a payload, but one it changes fails the next hop's check."""


PROBE_ATTEMPTS = 3  # unanswered probes before a routing-table entry is declared dead


@dataclass
class _HopWait:
    msg: Route
    next_hop: Peer
    sent: float
    tried: set[int]


@dataclass
class _Probe:
    peer: Peer
    sent: float
    keepalive: bool
    attempt: int


_Waiting = TypeVar("_Waiting", _Probe, _HopWait)


def _expired(queue: dict[int, _Waiting], timeout: float, now: float) -> Iterator[_Waiting]:
    """Pop, oldest first, the entries whose time is up from a queue kept in sending order (so in
    deadline order: every entry waits the same `timeout`)."""
    while queue:
        key, item = next(iter(queue.items()))
        if item.sent + timeout > now:
            return
        del queue[key]
        yield item


class OverlayNode:
    """A Pastry node as a pure state machine: entry points take `now` and return an Output."""

    def __init__(self, me: Peer, params: OverlayParams, rng: random.Random) -> None:
        self.me = me
        self.params = params
        self.rng = rng
        self.leaf = LeafSet(me, params.leaf_set_size)
        self.table = RoutingTable(me, params.b)
        self.rtt: dict[int, float] = {}
        self.last_heard: dict[int, float] = {}
        self.dead: dict[int, float] = {}
        self.joined = False
        self.bootstrap: str | None = None
        self.forward_hook: ForwardHook | None = None
        self._pending: dict[int, _Probe] = {}  # insertion order = deadline order
        self._hops: dict[int, _HopWait] = {}  # routed messages awaiting their hop's ack, same order
        self._probing: dict[int, int] = {}  # peer id -> nonce of its outstanding probe
        self._candidates: dict[int, Peer] = {}
        self._departed: OrderedDict[int, Peer] = OrderedDict()
        self._nonce = 0
        self._bcast_seq = 0
        self._bcast_seen: OrderedDict[tuple[int, int], None] = OrderedDict()
        self._timers: dict[str, float] = {}
        self._out = Output()
        self._leaf_changed = False

    # ------------------------------------------------------------------ entry points

    def start(self, now: float, bootstrap: str | None = None) -> Output:
        """Found a ring (no bootstrap) or join one through the node at `bootstrap`."""
        self.bootstrap = bootstrap
        if bootstrap is None:
            self._become_joined(now)
        else:
            self._send(bootstrap, JoinRequest(joiner=self.me))
            self._timers["join"] = now + self.params.join_retry
        return self._flush()

    def on_message(self, msg: Message, now: float) -> Output:
        """Handle one overlay message from the network (unknown types are ignored)."""
        sender = getattr(msg, "sender", None)
        if isinstance(sender, Peer):
            self._heard(sender, now)
        handler = self._handlers.get(type(msg))
        if handler is not None:
            handler(self, msg, now)
        return self._flush()

    def on_timer(self, now: float) -> Output:
        """Do what is due at `now`: expire probes and hops, retry the join, run the periodic maintenance."""
        self._expire_probes(now)
        self._expire_hops(now)
        t = self._timers
        if not self.joined and t.get("join", float("inf")) <= now and self.bootstrap:
            self._send(self.bootstrap, JoinRequest(joiner=self.me))
            t["join"] = now + self.params.join_retry
        if self.joined:
            if t["keepalive"] <= now:
                self._keepalive(now)
                t["keepalive"] = self._next(now, self.params.keepalive_interval)
            if t["table_probe"] <= now:
                self._probe_table(now)
                t["table_probe"] = self._next(now, self.params.table_probe_interval)
            if t["row_maintenance"] <= now:
                self._row_maintenance()
                t["row_maintenance"] = self._next(now, self.params.row_maintenance_interval)
            if t["leaf_exchange"] <= now:
                self._leaf_exchange()
                self._self_lookup()
                t["leaf_exchange"] = self._next(now, self.params.leaf_exchange_interval)
            if t["revive"] <= now:
                if self._departed:
                    self._probe(self.rng.choice(list(self._departed.values())), now, keepalive=True)
                t["revive"] = self._next(now, self.params.revive_interval)
        return self._flush()

    def route(self, key: int, payload: Message, now: float) -> Output:
        """Send a payload to the live node numerically closest to `key` (maybe us)."""
        self._route(Route(key=key, origin=self.me, payload=payload), now)
        return self._flush()

    def send_to_row(self, row: int, payload: Message) -> Output:
        """Send a payload to every node in one row of our routing table."""
        for peer in self.table.row(row):
            self._send(peer.addr, Direct(sender=self.me, payload=payload))
        return self._flush()

    def send_to_leaf_set(self, payload: Message) -> Output:
        """Send a payload to every member of our leaf set."""
        for peer in self.leaf.members():
            self._send(peer.addr, Direct(sender=self.me, payload=payload))
        return self._flush()

    def send_direct(self, addr: str, payload: Message) -> Output:
        """Send a payload to the node at `addr`; it arrives as a Received event."""
        self._send(addr, Direct(sender=self.me, payload=payload))
        return self._flush()

    def measure(self, peer: Peer, now: float) -> Output:
        """Probe a node's round-trip time (e.g. a pool whose offer reached us over several hops)."""
        if peer.id != self.me.id and peer.id not in self.rtt:
            self._probe(peer, now)
        return self._flush()

    def broadcast(self, payload: Message) -> Output:
        """Reach every node of the ring once, down the routing-table rows (for small rings)."""
        self._bcast_seq += 1
        self._on_broadcast(
            Broadcast(origin=self.me, seq=self._bcast_seq, level=0, payload=payload), local=True
        )
        return self._flush()

    # ------------------------------------------------------------------ queries

    def next_hop(self, key: int, exclude: Collection[int] = ()) -> Peer | None:
        """Pastry's routing decision, skipping the nodes in `exclude`; None means we are the root."""
        if self.leaf.covers(key):
            best = self.leaf.closest(key, exclude)
            return None if best.id == self.me.id else best
        b = self.params.b
        r = shared_prefix_len(key, self.me.id, b)
        if r >= self.table.rows:
            return None
        entry = self.table.get(r, digit(key, r, b))
        if entry is not None and entry.id not in exclude:
            return entry
        # Rare case: any known node sharing as long a prefix and numerically closer.
        best, best_closeness = self.me, closeness(key, self.me.id)
        for p in self.known():
            if p.id in exclude or shared_prefix_len(p.id, key, b) < r:
                continue
            c = closeness(key, p.id)
            if c < best_closeness:
                best, best_closeness = p, c
        return None if best is self.me else best

    def known(self) -> list[Peer]:
        """Every node in our leaf set and routing table."""
        seen = {p.id: p for p in self.table.entries()}
        for p in self.leaf.members():
            seen.setdefault(p.id, p)
        return list(seen.values())

    # ------------------------------------------------------------------ internals

    def _send(self, addr: str, msg: Message) -> None:
        self._out.sends.append((addr, msg))

    def _next(self, now: float, interval: float) -> float:
        return now + interval * (0.9 + 0.2 * self.rng.random())  # jitter avoids lockstep rounds

    def _flush(self) -> Output:
        if self._leaf_changed:
            self._out.events.append(LeafSetChanged(tuple(self.leaf.members())))
            self._leaf_changed = False
        out, self._out = self._out, Output()
        deadlines = list(self._timers.values())
        if self._pending:
            first = next(iter(self._pending.values()))
            deadlines.append(first.sent + self.params.probe_timeout)
        if self._hops:
            deadlines.append(next(iter(self._hops.values())).sent + self.params.hop_timeout)
        out.wakeup = min(deadlines) if deadlines else None
        return out

    def _become_joined(self, now: float) -> None:
        self.joined = True
        self._timers.pop("join", None)
        p = self.params
        self._timers.update(
            keepalive=self._next(now, p.keepalive_interval),
            table_probe=self._next(now, p.table_probe_interval),
            row_maintenance=self._next(now, p.row_maintenance_interval),
            leaf_exchange=self._next(now, p.leaf_exchange_interval),
            revive=self._next(now, p.revive_interval),
        )
        self._out.events.append(Joined())

    def _heard(self, peer: Peer, now: float) -> None:
        self.last_heard[peer.id] = now
        self.dead.pop(peer.id, None)
        if self._departed.pop(peer.id, None) is not None:
            self._consider(peer, now, firsthand=True)  # back from the dead, or from a partition

    def _consider(self, peer: Peer, now: float, *, firsthand: bool = False) -> None:
        """Learn of a node: leaf set if it belongs there, routing table by proximity."""
        pid = peer.id
        if pid == self.me.id:
            return
        if not firsthand and self.dead.get(pid, 0.0) > now:
            return
        held = self.leaf.get(pid)
        if held is not None:
            if held.addr != peer.addr:
                self.leaf.add(peer)  # same node, new address
        elif self.leaf.could_hold(pid) and self.leaf.add(peer):
            self._leaf_changed = True
            self.last_heard.setdefault(peer.id, now)  # grace period before keepalives judge it
            if self.joined:
                self._send(peer.addr, LeafSetPush(sender=self.me, leaf_set=self.leaf.members()))
        where = self.table.slot(peer.id)
        if where is None:
            return
        current = self.table.get(*where)
        if current is None:
            self.table.set(*where, peer)
            if peer.id not in self.rtt:
                self._probe(peer, now)
        elif current.id == peer.id:
            if current.addr != peer.addr:
                self.table.set(*where, peer)
        elif peer.id in self.rtt:
            if current.id in self.rtt and self.rtt[peer.id] < self.rtt[current.id]:
                self.table.set(*where, peer)
        else:
            self._candidates[peer.id] = peer
            self._probe(peer, now)

    def _consider_all(self, peers: Iterable[Peer], now: float) -> None:
        for p in peers:
            self._consider(p, now)

    def _probe(self, peer: Peer, now: float, *, keepalive: bool = False, attempt: int = 1) -> None:
        if peer.id in self._probing:
            return
        self._nonce += 1
        self._pending[self._nonce] = _Probe(peer, now, keepalive, attempt)
        self._probing[peer.id] = self._nonce
        self._send(peer.addr, Ping(sender=self.me, nonce=self._nonce, sent=now))

    def _expire_probes(self, now: float) -> None:
        for probe in _expired(self._pending, self.params.probe_timeout, now):
            self._probing.pop(probe.peer.id, None)
            pid = probe.peer.id
            if probe.keepalive or pid in self.leaf:
                continue  # leaf members are judged by silence over leaf_timeout, not by probes
            if probe.attempt < PROBE_ATTEMPTS and self.table.contains(pid):
                self._probe(probe.peer, now, attempt=probe.attempt + 1)
            elif self.table.contains(pid):
                self._declare_dead(probe.peer, now)
            else:
                self._candidates.pop(pid, None)

    def _declare_dead(self, peer: Peer, now: float) -> None:
        self.dead[peer.id] = now + self.params.dead_memory
        self._departed[peer.id] = peer
        self._departed.move_to_end(peer.id)
        while len(self._departed) > self.params.departed_memory:
            self._departed.popitem(last=False)
        self.rtt.pop(peer.id, None)
        self.last_heard.pop(peer.id, None)
        self._candidates.pop(peer.id, None)
        if self.leaf.remove(peer.id):
            self._leaf_changed = True
            asked = {p.id: p for p in (self.leaf.farthest("larger"), self.leaf.farthest("smaller")) if p}
            if not asked:
                asked = {p.id: p for p in list(self.table.entries())[:1]}
            for p in asked.values():
                self._send(p.addr, LeafSetRequest(sender=self.me))
        where = self.table.remove(peer.id)
        if where is not None:
            row, _ = where
            for r in range(row, self.table.rows):
                others = self.table.row(r)
                if others:
                    self._send(self.rng.choice(others).addr, RowRequest(sender=self.me, row=row))
                    break

    def _keepalive(self, now: float) -> None:
        timeout = self.params.leaf_timeout
        for peer in self.leaf.members():
            if now - self.last_heard.get(peer.id, now) > timeout:
                self._declare_dead(peer, now)
        for peer in self.leaf.members():
            # A ping received proves the sender alive as well as the pong does: one exchange per
            # pair and interval is enough.
            if now - self.last_heard.get(peer.id, -1e18) >= self.params.keepalive_interval:
                self._probe(peer, now, keepalive=True)

    def _probe_table(self, now: float) -> None:
        horizon = self.params.table_probe_interval
        for peer in list(self.table.entries()):
            if now - self.last_heard.get(peer.id, -1e18) >= horizon:
                self._probe(peer, now)

    def _row_maintenance(self) -> None:
        """Proximity maintenance: for every row, ask a random member of that row and our nearest
        known node for the nodes they know that would fit that row of ours. Nodes near us know
        nodes near them, hence near us (the triangle inequality), which is how tables built from
        random join paths become proximity-aware over time."""
        known = self.known()
        measured = [p for p in known if p.id in self.rtt]
        nearest = min(measured, key=lambda p: self.rtt[p.id]) if measured else None
        for row in range(self.table.used_rows()):
            members = self.table.row(row)
            targets = {p.id: p for p in ([self.rng.choice(members)] if members else [])}
            if nearest is not None:
                targets.setdefault(nearest.id, nearest)
            for peer in targets.values():
                self._send(peer.addr, RowRequest(sender=self.me, row=row))

    def _leaf_exchange(self) -> None:
        """Push our leaf set to every member: a node that learned of two concurrent joiners tells
        each about the other, which is what makes leaf sets converge under bursts of joins."""
        push = LeafSetPush(sender=self.me, leaf_set=self.leaf.members())
        for peer in self.leaf.members():
            self._send(peer.addr, push)

    def _self_lookup(self) -> None:
        entries = list(self.table.entries()) or self.leaf.members()
        if entries:
            self._send(self.rng.choice(entries).addr, JoinRequest(joiner=self.me, refresh=True))

    # ------------------------------------------------------------------ handlers

    def _on_ping(self, msg: Ping, now: float) -> None:
        self._send(msg.sender.addr, Pong(sender=self.me, nonce=msg.nonce, sent=msg.sent))
        self._consider(msg.sender, now, firsthand=True)

    def _on_pong(self, msg: Pong, now: float) -> None:
        probe = self._pending.get(msg.nonce)
        if probe is None or probe.peer.id != msg.sender.id:
            return
        del self._pending[msg.nonce]
        self._probing.pop(msg.sender.id, None)
        sample = max(now - msg.sent, 0.0)
        old = self.rtt.get(msg.sender.id)
        self.rtt[msg.sender.id] = sample if old is None else 0.7 * old + 0.3 * sample
        candidate = self._candidates.pop(msg.sender.id, None)
        if candidate is not None:
            where = self.table.slot(candidate.id)
            if where is not None:
                current = self.table.get(*where)
                if current is None or (
                    current.id != candidate.id
                    and self.rtt[candidate.id] < self.rtt.get(current.id, float("inf"))
                ):
                    self.table.set(*where, candidate)

    def _on_join(self, msg: JoinRequest, now: float) -> None:
        joiner = msg.joiner
        if joiner.id == self.me.id:
            return
        nxt = self.next_hop(joiner.id, exclude=(joiner.id,))
        root = nxt is None
        if root or not msg.refresh:
            upto = min(shared_prefix_len(self.me.id, joiner.id, self.params.b), self.table.rows - 1)
            rows = (
                []
                if msg.refresh
                else [p for r in range(upto + 1) for p in self.table.row(r) if p.id != joiner.id]
            )
            leaf = [p for p in self.leaf.members() if p.id != joiner.id] if root else []
            self._send(joiner.addr, JoinInfo(sender=self.me, candidates=rows, leaf_set=leaf, root=root))
        if nxt is not None:
            self._send(nxt.addr, msg.model_copy(update={"hops": msg.hops + 1}))

    def _on_join_info(self, msg: JoinInfo, now: float) -> None:
        self._consider(msg.sender, now, firsthand=True)
        self._consider_all(msg.candidates, now)
        self._consider_all(msg.leaf_set, now)
        if msg.root and not self.joined:
            self._become_joined(now)
            for peer in self.known():
                self._send(peer.addr, Hello(sender=self.me))

    def _on_hello(self, msg: Hello, now: float) -> None:
        self._consider(msg.sender, now, firsthand=True)

    def _on_leaf_request(self, msg: LeafSetRequest, now: float) -> None:
        self._send(msg.sender.addr, LeafSetPush(sender=self.me, leaf_set=self.leaf.members()))
        self._consider(msg.sender, now, firsthand=True)

    def _on_leaf_push(self, msg: LeafSetPush, now: float) -> None:
        self._consider(msg.sender, now, firsthand=True)
        self._consider_all(msg.leaf_set, now)

    def _on_row_request(self, msg: RowRequest, now: float) -> None:
        """Answer with the nodes we know that would sit in row `row` of the requester's table."""
        if 0 <= msg.row < self.table.rows:
            b, requester = self.params.b, msg.sender.id
            fits = [
                p
                for p in self.known()
                if p.id != requester and shared_prefix_len(p.id, requester, b) == msg.row
            ]
            if shared_prefix_len(self.me.id, requester, b) == msg.row:
                fits.append(self.me)
            self._send(
                msg.sender.addr, RowReply(sender=self.me, row=msg.row, entries=fits[: 2 * self.table.cols])
            )
        self._consider(msg.sender, now, firsthand=True)

    def _on_row_reply(self, msg: RowReply, now: float) -> None:
        self._consider(msg.sender, now, firsthand=True)
        self._consider_all(msg.entries, now)

    def _route(self, msg: Route, now: float, tried: set[int] | None = None) -> None:
        tried = tried or set()
        nxt = self.next_hop(msg.key, exclude=tried)
        if nxt is None:
            self._out.events.append(Delivered(msg.key, msg.payload, msg.origin, msg.hops))
            return
        payload: Message | None = msg.payload
        if self.forward_hook is not None and msg.origin.id != self.me.id and not tried:
            payload = self.forward_hook(msg.key, msg.payload, nxt)
            if payload is None:
                return
        self._nonce += 1
        onward = Route(key=msg.key, origin=msg.origin, payload=payload, hops=msg.hops + 1, via=self.me,
                       hop_nonce=self._nonce)  # fmt: skip
        self._hops[self._nonce] = _HopWait(onward, nxt, now, tried)
        self._send(nxt.addr, onward)

    def _expire_hops(self, now: float) -> None:
        for wait in _expired(self._hops, self.params.hop_timeout, now):
            self._probe(wait.next_hop, now)  # declared dead only if the probes fail as well
            tried = wait.tried | {wait.next_hop.id}
            if len(tried) <= self.params.max_reroutes:
                self._route(wait.msg.model_copy(update={"hops": wait.msg.hops - 1}), now, tried)

    def _on_route(self, msg: Route, now: float) -> None:
        if msg.via is not None:
            self._send(msg.via.addr, RouteAck(sender=self.me, hop_nonce=msg.hop_nonce))
        self._route(msg, now)

    def _on_route_ack(self, msg: RouteAck, now: float) -> None:
        wait = self._hops.get(msg.hop_nonce)
        if wait is not None and wait.next_hop.id == msg.sender.id:
            del self._hops[msg.hop_nonce]

    def _on_direct(self, msg: Direct, now: float) -> None:
        self._out.events.append(Received(msg.payload, msg.sender))

    def _on_broadcast(self, msg: Broadcast, now: float = 0.0, *, local: bool = False) -> None:
        key = (msg.origin.id, msg.seq)
        if key in self._bcast_seen:
            return
        self._bcast_seen[key] = None
        if len(self._bcast_seen) > 4096:
            self._bcast_seen.popitem(last=False)
        if not local:
            self._out.events.append(BroadcastReceived(msg.payload, msg.origin))
        for r in range(msg.level, self.table.used_rows()):
            for peer in self.table.row(r):
                if peer.id != msg.origin.id:
                    self._send(
                        peer.addr, Broadcast(origin=msg.origin, seq=msg.seq, level=r + 1, payload=msg.payload)
                    )

    _handlers: dict[type[Message], Callable[[OverlayNode, Message, float], None]] = {
        Ping: _on_ping,
        Pong: _on_pong,
        JoinRequest: _on_join,
        JoinInfo: _on_join_info,
        Hello: _on_hello,
        LeafSetRequest: _on_leaf_request,
        LeafSetPush: _on_leaf_push,
        RowRequest: _on_row_request,
        RowReply: _on_row_reply,
        Route: _on_route,
        RouteAck: _on_route_ack,
        Direct: _on_direct,
        Broadcast: _on_broadcast,
    }  # type: ignore[dict-item]

"""The overlay node: Pastry's join, routing, proximity neighbour selection and repair, as a pure
state machine.

Every entry point takes `now` and returns an `Output`: messages to send (address, message),
events for the application, and the time at which the node wants `on_timer` called next. The node
never reads a clock, sleeps or touches a socket, so the trio driver runs it over UDP and the
simulator runs thousands of them on virtual time, with identical behaviour.

Liveness, at a cost that does not grow with the leaf set (MSPastry's scheme): every node sends a
heartbeat to its nearest smaller neighbour every `keepalive_interval`, so each node watches one
node, its nearest larger neighbour; any message from a node counts as hearing from it, so
application traffic stands in for heartbeats. After `leaf_timeout` of silence the neighbour is
suspected: probed, and declared dead if it fails to answer two probes. A node that declares a
leaf member dead pushes its leaf set to the remaining members: the suspicion spreads through the
leaf set, since a member that finds a node of its own leaf set missing from a push, within the
arc the pusher's set spans, probes that node in turn (or, if it heard from it lately, tells the
pusher about it: the same check repairs leaf sets that missed a join). Routing-table entries are
probed only where used or suspect: a routed message's hop that does not ack, and entries we send
application messages to (`send_to_row`, broadcast) that stay silent for `table_probe_interval`;
measured entries are otherwise left alone, but for one sweep after each death a node learns (at
most one per `table_probe_interval`): deaths come in waves, and every entry not heard from lately
is probed then, so that lookups after churn meet repaired slots rather than dead entries, which
they would route around through far nodes. A dead leaf member is replaced from the leaf sets of
the remaining extreme members (asked again LEAF_REPAIR_RETRIES times, as messages get lost); a
dead table entry from the same row of another entry (Pastry's repair) and from our nearest node
(its nodes are near us too), and row maintenance is brought forward. A leaf-set push that still
lists a node we declared dead is answered with our set (the sender then probes that node), and
the node is probed once more (we may be the one that lost probes). Nodes declared dead are not
re-learned second-hand for `dead_memory` seconds, and a node heard of second-hand enters our leaf
set or routing table only once it answers a probe: unused entries are never probed, so another
node's table may still list a dead node, and that must not spread. Likewise a node we hold
changes address only in its own word (its hello, ping, pong, heartbeat, leaf-set or row
exchange names it), or once it answers a probe at an address someone else claims for it: a
push, row reply or join info that names our leaf member or table entry at another address is a
claim to check (stale, or a liar's, which would send the node's traffic elsewhere and, as it
stays silent there, get it declared dead), and a probe that fails at an address other than our
record's says nothing of the node.

Adaptive intervals: the periodic exchanges that only matter while the ring changes (row
maintenance, leaf-set exchange and the self-lookup) double their interval, up to `max_backoff`
times the configured one, each round that finds nothing changed since the last, and fall back to
it when something did.

Routed messages are acknowledged hop by hop: a hop that does not ack within `hop_timeout` is
probed (and declared dead if the probes fail too) and sent the same message again, once; silent
again, the message is routed around it. A silent hop is far more often a lost message or ack than
a dead node: routing around a live hop at once sent a second copy to the root along a detour (at
1 % loss, 3.6 % of lookups were delivered twice or detoured, rdp +3 %). The resend carries the
same hop nonce, and a hop acks a copy it forwarded (or delivered) already without forwarding it
twice (`ROUTED_MEMORY`). A hop already suspected (another message's silence) or declared dead
is routed around at once, and so is a message keyed to the silent node's own id (faultD's
manager_missing): it must reach the closest live node before any leaf set has noticed the
death. Where routing around the silent hop would deliver the message here, it is sent to the
same hop again up to `HOP_RESENDS` times: a lost ack must not deliver a message at a node that is
not its root. After a hop failed, the routing table's slot is not trusted alone: leaf-set members
(watched) are preferred to the other table entries, which nobody probes unless they are used.
Joiners' requests are acknowledged and routed around silent hops too, at once (MSPastry's join):
a table entry that died is otherwise never noticed by its holder, and swallows every retry of a
joiner whose id it is the next hop for (_forward_join).

Leaf-set consistency: every leaf-set exchange round a node pushes its leaf set to one random
member (checked as above on receipt). Concurrent joins can also leave a stretch of the ring whose
members know each other but not their neighbours on either side, and exchanges within leaf sets
cannot merge chains that share no member. So each round a node also routes a join request for its
own id through a random routing-table entry; the routing tables span the whole ring, so the
request ends at our true nearest neighbour (excluding us), which answers with its leaf set.

Healing: the last `departed_memory` nodes declared dead are probed again, one every
`revive_interval`; one that answers is learned anew. After a partition heals, that is how the two
halves (each of which declared the other dead) find each other and merge back into one ring.

Bounded state: what a node keeps per peer (round-trip times, when it last heard from it) covers
its leaf set and routing table, plus the `recent_peers` most recently measured or heard others
(an offer of a node measured lately is not probed again at once). A node in a large ring hears
from ever more nodes, and a flood of distinct senders is unlimited; neither grows its memory.

Mixed versions (rolling upgrades): what a node knows of each peer's capabilities (`caps`, as the
peer announced them in its pings and pongs: common.overlay.messages, "versions") decides what it
sends that peer: an optional field only to a peer that announced the capability it belongs to,
the base format to the others (older versions drop a message with a field they do not know).
Bounded like `rtt`, and forgotten with a dead node (it may come back as another version).
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from common.overlay.ids import ID_BITS, ID_MASK, ID_SPACE, closeness, digit, shared_prefix_len
from common.overlay.leafset import LeafSet
from common.overlay.messages import (
    CAP_JOIN_ACK,
    CAP_RTT,
    CAP_TOLERANT,
    CAPABILITIES,
    CAPS_SHIFT,
    Broadcast,
    Direct,
    Heartbeat,
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
    caps_in_nonce,
)
from common.overlay.params import OverlayParams
from common.overlay.table import RoutingTable
from common.wire import Message

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


@dataclass(slots=True)
class Output:
    """What an entry point returns: datagrams to send, events for the application, next wake-up."""

    sends: list[tuple[str, Message]] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    wakeup: float | None = None


ForwardHook = Callable[[int, Message, Peer], Message | None]
"""Sees a routed payload at each hop (key, payload, next hop); returns it (possibly changed) or
None to stop it here. Over UDP a payload carries its origin's signature (common.overlay.claims):
a hook there may stop a payload, but one it changes fails the next hop's check."""


PROBE_ATTEMPTS = 3  # unanswered probes before a routing-table entry (or a silent hop) is declared dead
HOP_RESENDS = 2  # a final hop's resends before the message is delivered at the next closest node
ROUTED_MEMORY = 4.0
"""How long, in hop timeouts, a node remembers the routed messages it forwarded or delivered, by
(previous hop, hop nonce, key), so that a resend whose first copy arrived (its ack was lost) is
acked again but not forwarded twice (a hop resends after one and two hop timeouts); at most
ROUTED_LIMIT of them."""
ROUTED_LIMIT = 1024  # beyond 1024 / (ROUTED_MEMORY x hop_timeout) messages a second, the oldest go early
PING_NONCE_RANDOM_BITS = 24  # between the counter's 24 bits and the capabilities (CAPS_SHIFT = 48)
LEAF_REPAIR_RETRIES = 3  # leaf-set requests sent again after a leaf member's death
SUSPECT_ATTEMPTS = 2  # unanswered probes before a suspected leaf member is declared dead
JOINING_ROOT_AFTER = 120.0
"""Seconds after which a node still not joined answers a joiner that asks it straight as its
root (_on_join): no node it can reach may be joined (bootstraps in a cycle, a bootstrap that is
gone), and a ring of the nodes that can reach each other is better than none. Well above the
slowest joins seen (51 s behind an older bootstrap, docs/results.md): sooner, nodes joining
slowly at once under loss (a whole pool restarting) answered each other and made rings apart
(after 4 attempts, 15 s: 34-134 of 150 leaf sets wrong at 5 % loss)."""
MAX_JOIN_WAITS = 256
"""Forwarded join requests awaiting their hop's ack at once; beyond that (a flood of joiners)
they are forwarded unwatched, as before acks, so that joiners cannot grow a node's memory."""
JOIN_TRIES_EACH = 2
"""Join retries a node other than a seed gets before the next one (_join_target): its first
may be lost at a dead hop it only then probes (a hop that does not ack joins), its second then
goes around."""
SWEEP_DELAY = 5.0
"""Seconds from the first death a node learns until it sweeps its routing table (_sweep_table):
deaths come in waves (a partition, a rack), and those learnt meanwhile share one sweep."""
LOOKAHEAD_REFRESH = 60.0
"""Seconds after a sweep (_sweep_table) at which we ask every table entry for its leaf set again
(lookahead, next_hop), unless we got it within the last SWEEP_QUIET (_refresh_lookahead): after a
wave of deaths the held sets list dead nodes and lack the members that replaced them, and so do
sets got while the entries were still repairing theirs; row maintenance asks again only after
`max_backoff` row intervals. Lookahead then sent lookups to dead nodes or along longer paths (20 %
churn at 1,000 nodes: 31 % of the held sets stale 300 s later, rdp 1.216; 1.160 with the true
sets). By then the entries' own leaf sets are repaired (detection p99 ~30 s)."""
SWEEP_QUIET = 30.0
"""A sweep probes only the table entries we have not heard from for this long: one heard from
since the wave of deaths began is alive."""
RING_GROWTH = 1.2
"""A table entry's leaf set we hold (lookahead) is asked for again at the next row maintenance
(not `max_backoff` rounds later) once our own leaf set spans this many times less of the ring
than when the entry's set came: the ring has grown since (ids are uniform, so our arc measures
the ring's density everywhere), so the entry's set likely misses nodes that joined near it, and
its member closest to a key is then often not the root: the lookahead costs an extra hop. After
the join of 2,000 nodes 25 % of the held sets differed from the entry's own
(docs/bench/overlay_oracle_tables.py). A ring at rest asks nothing more."""
LOOKAHEAD_ARC = 4
"""A held leaf set spanning more than this many times our own leaf set's arc is not used for
lookahead (_lookahead). Fresh sets span 0.7-1.6 times ours (10th-90th percentile)."""
ROW0_ASKED, ROW0_POOL = 2, 4
"""Row maintenance also asks ROW0_ASKED of the ROW0_POOL nearest members of row 0 (at random) for
their row-0 nodes. Row 0 has the most candidates per slot (N/16) and its hop is the first of
nearly every lookup, where a far entry costs most; one random member and our nearest node per
round left a third of its slots without the nearest candidate after the join of 1,000 nodes
(docs/bench/overlay_oracle_tables.py), and nodes near us know the nodes near them in each column."""
PRUNE_FACTOR = 1.0
"""A candidate for an occupied table slot is not probed when a lower bound on its round-trip time
(from the RTTs the node that offered it measured: see _consider_all) is at least this many times
the slot holder's measured one. 1.0 is lossless where the triangle inequality holds: such a
candidate cannot be nearer, and only a nearer one takes the slot (_on_pong)."""

_HALF_RING = ID_SPACE >> 1  # a clockwise distance up to this is no longer than the counter-clockwise one

# What a probe is for: a departed node that may be back, a round-trip time to measure (proximity
# neighbour selection), or a suspected node (declared dead if it does not answer).
REVIVE, MEASURE, SUSPECT = 0, 1, 2


@dataclass(slots=True)
class _HopWait:
    msg: Route | JoinRequest
    next_hop: Peer
    sent: float
    tried: set[int]
    resent: int = 0  # times sent again to the same hop (see _expire_hops)


@dataclass(slots=True)
class _Probe:
    peer: Peer
    sent: float
    kind: int  # REVIVE, MEASURE or SUSPECT
    attempt: int
    attempts: int
    tell: Peer | None  # a SUSPECT probe's pusher, told about the node if it answers


_Waiting = TypeVar("_Waiting", _Probe, _HopWait)


def _addr_key(addr: str) -> str:
    """A host:port as far as spellings can be told apart without resolving names: case and a
    trailing dot of the host do not count."""
    host, sep, port = addr.rpartition(":")
    return f"{host.rstrip('.').lower()}{sep}{port}" if sep else addr.rstrip(".").lower()


def _reaches(center: int, members: list[Peer]) -> tuple[int, int]:
    """How far a node's leaf set reaches clockwise and counter-clockwise from `center` (the
    node's id; each member counts on the side it is nearer to)."""
    reach_cw = reach_ccw = 0
    for p in members:
        cw = (p.id - center) & ID_MASK
        ccw = (center - p.id) & ID_MASK
        if cw <= ccw:
            reach_cw = max(reach_cw, cw)
        else:
            reach_ccw = max(reach_ccw, ccw)
    return reach_cw, reach_ccw


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

    def __init__(
        self,
        me: Peer,
        params: OverlayParams,
        rng: random.Random,
        *,
        capabilities: int = CAPABILITIES,
        nonce_rng: random.Random | None = None,
    ) -> None:
        """`nonce_rng`: random bits for our ping nonces, so that a peer that has seen some cannot
        answer our next ping before it arrives and be measured nearer than it is (the driver
        passes one seeded from os.urandom). A generator apart from `rng`, and none in the
        simulations (no attacker there): the nonces' bits decide nothing else, and a seed's
        run stays the same with or without them."""
        self.me = me
        self._nonce_rng = nonce_rng
        self.capabilities = capabilities  # what we speak (0: only the base format, as before them)
        self.params = params
        self.rng = rng
        self.leaf = LeafSet(me, params.leaf_set_size)
        self.table = RoutingTable(me, params.b)
        # Both maps are in recency order (an update moves the entry to the end) and bounded
        # (_trim_recent): the leaf set's and routing table's nodes plus `recent_peers` others.
        self.rtt: dict[int, float] = {}
        self.last_heard: dict[int, float] = {}
        self._rtt_limit = self._heard_limit = 2 * params.recent_peers
        self.caps: dict[int, int] = {}  # peer id -> the capabilities it announced; bounded as rtt
        self._caps_limit = 2 * params.recent_peers
        self._nonce_caps = capabilities << CAPS_SHIFT  # announced in every ping's nonce
        self._join_attempts = 0
        self._join_started = math.inf  # when start() began our join (not yet: never a root)
        # The seeds we join through (start), our own address left out; the _addr_key of each, and
        # of the address its node advertises if written otherwise (seed_alias) -> the keys of the
        # seeds it stands for (one node may be listed under two spellings).
        self.seeds: tuple[str, ...] = ()
        self._seed_keys: dict[str, set[str]] = {}
        self._named_self = False  # we are a seed ourselves: we found the ring if none answers
        self._self_seeds: dict[str, str] = {}  # key -> seed that seed_is_self took for us (watched)
        self._self_keys: dict[str, set[str]] = {}  # as _seed_keys, for those (their answers count)
        self._seeds_answered: set[str] = set()  # keys of the seeds that answered a join (_seed_watch)
        self._seed_asks: dict[str, int] = {}  # seed -> join requests sent it (_seed_request)
        self._seed_turn = 0  # requests that went to a seed in turn (_next_seed)
        self._join_tried: dict[int, int] = {}  # node -> join retries sent to it (_join_target)
        self.dead: dict[int, float] = {}
        self.joined = False
        self.forward_hook: ForwardHook | None = None
        self._pending: dict[int, _Probe] = {}  # insertion order = deadline order
        self._hops: dict[int, _HopWait] = {}  # routed messages awaiting their hop's ack, same order
        self._routed: dict[tuple[int, int, int], float] = {}  # see ROUTED_MEMORY; in arrival order
        self._join_waits = 0  # how many of them are join requests (at most MAX_JOIN_WAITS)
        self._probing: dict[int, int] = {}  # peer id -> nonce of its outstanding probe
        self._candidates: dict[int, Peer] = {}
        self._departed: OrderedDict[int, Peer] = OrderedDict()
        self._used: set[str] = set()  # addresses we sent application messages to since the last sweep
        self._corrected: dict[int, float] = {}  # peers we last sent a corrective leaf-set push -> when
        self._watched: tuple[int, float] = (-1, 0.0)  # our larger neighbour, since when we watch it
        self._leaf_version = 0  # bumped on every leaf-set change
        self._repairs_left = 0  # leaf-set requests still to send again (_retry_leaf_repair)
        self._backoff: dict[str, tuple[int, int]] = {}  # adaptive timer -> (factor, version seen)
        # table entry -> (when, its leaf set, our leaf set's arc then (_own_arc), the set's
        # clockwise and counter-clockwise reach from the entry)
        self._entry_leaves: dict[int, tuple[float, list[Peer], int, int, int]] = {}
        self._last_sweep = -math.inf  # when _sweep_table last ran (at most once per table_probe_interval)
        self._recheck: dict[int, float] = {}  # leaf member a push lacked -> when we last heard from it then
        self._nonce = 0
        self._bcast_seq = 0
        self._bcast_seen: OrderedDict[tuple[int, int], None] = OrderedDict()
        self._timers: dict[str, float] = {}  # whoever writes it sets _timers_changed
        self._timers_changed = False
        self._timers_due: float | None = None  # min(_timers.values()), kept by _flush
        self._known_cache: tuple[tuple[int, int], list[Peer]] = ((-1, -1), [])
        # Messages built again only when what they say changed (messages are immutable):
        self._last_push: tuple[int, int, LeafSetPush] | None = None  # see _leaf_push
        self._last_base_push: tuple[int, LeafSetPush] | None = None  # without RTTs
        self._leaf_rtts_version = 0  # bumped when _on_pong changes a leaf member's RTT
        self._heartbeat = Heartbeat.built(sender=me)
        self._out = Output()
        self._leaf_changed = False

    # ------------------------------------------------------------------ entry points

    def start(self, now: float, bootstrap: str | Iterable[str] | None = None) -> Output:
        """Found a ring (no bootstrap) or join one through the node at `bootstrap`, or through
        any of several seeds (tried in turn, one per join_retry, so that a dead seed costs a
        joiner one retry). Our own address among them (every machine given the same seeds, the
        seeds' own included) is left out, and makes us a seed: we ask every other seed at once,
        again one join_retry later in the other format (an older seed drops one of them), and
        found the ring if none has answered after two (the first seed up; a seed that answers
        later merges its ring with ours: _seed_watch)."""
        named = [bootstrap] if isinstance(bootstrap, str) else list(bootstrap or ())
        mine = _addr_key(self.me.addr)
        others: dict[str, str] = {}
        for seed in named:
            if (key := _addr_key(seed)) == mine:
                self._named_self = True
            else:
                others.setdefault(key, seed)  # each once, in the order given
        self.seeds = tuple(others.values())
        self._seed_keys = {key: {key} for key in others}
        self._join_started = now
        if not self.seeds:
            self._become_joined(now)
        elif self._named_self:
            self._ask_every_seed(now)
        else:
            seed = self._next_seed()
            self._send(seed, self._seed_request(seed))
            self._timers["join"] = now + self.params.join_retry
            self._timers_changed = True
        return self._flush()

    def on_message(self, msg: Message, now: float) -> Output:
        """Handle one overlay message from the network (unknown types are ignored)."""
        kind = type(msg)
        # (getattr of a field a message lacks costs pydantic ~2 us: asked only of unknown types)
        if kind in _WITH_SENDER:
            sender = msg.sender  # type: ignore[attr-defined]  # (every kind in _WITH_SENDER has one)
        else:
            sender = None if kind in _HANDLERS else getattr(msg, "sender", None)
        if isinstance(sender, Peer):
            # _heard, inlined: this runs for every message.
            pid = sender.id
            heard = self.last_heard
            heard[pid] = now
            if len(heard) > self._heard_limit:
                self._heard_limit = self._trim_recent(heard, by_value=True)
            if self.dead:
                self.dead.pop(pid, None)
            if self._departed and self._departed.pop(pid, None) is not None:
                self._consider(sender, now, firsthand=True)  # back from the dead, or from a partition
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, msg, now)
        return self._flush()

    def on_timer(self, now: float) -> Output:
        """Do what is due at `now`: expire probes and hops, retry the join, run the periodic maintenance."""
        self._expire_probes(now)
        self._expire_hops(now)
        t = self._timers
        self._timers_changed = True
        if t.get("recheck", math.inf) <= now:
            del t["recheck"]
            self._recheck_members(now)
        if t.get("leaf_repair", math.inf) <= now:
            del t["leaf_repair"]
            self._retry_leaf_repair(now)
        if not self.joined and t.get("found", math.inf) <= now:
            del t["found"]
            self._become_joined(now)  # a seed none of the others answered: the first one up
        if not self.joined and t.get("join", math.inf) <= now and self._named_self:
            del t["join"]
            self._ask_seeds()  # in the other format; then we found the ring ("found")
        if not self.joined and t.get("join", math.inf) <= now and self.seeds:
            target = self._join_target()
            if target is None:
                seed = self._next_seed()
                self._send(seed, self._seed_request(seed))
            else:
                self._send(target.addr, self._join_request(self._speaks(target.id, CAP_TOLERANT)))
            t["join"] = now + self.params.join_retry
        if self.joined:
            p = self.params
            if t["heartbeat"] <= now:
                if self.leaf.smaller:
                    self._send(self.leaf.smaller[0].addr, self._heartbeat)
                t["heartbeat"] = self._next(now, p.keepalive_interval)
            if t["watch"] <= now:
                t["watch"] = self._watch(now)
            if t.get("seed_watch", math.inf) <= now:
                del t["seed_watch"]
                self._seed_watch(now)
            if t.get("table_sweep", math.inf) <= now:
                del t["table_sweep"]
                self._sweep_table(now)
            if t.get("lookahead_refresh", math.inf) <= now:
                del t["lookahead_refresh"]
                self._refresh_lookahead(now)
            if t["table_probe"] <= now:
                self._probe_used(now)
                t["table_probe"] = self._next(now, p.table_probe_interval)
            if t["row_maintenance"] <= now:
                self._row_maintenance(now)
                t["row_maintenance"] = self._adaptive(
                    "row", self.table.version, now, p.row_maintenance_interval
                )
            if t["leaf_exchange"] <= now:
                self._leaf_exchange()
                self._self_lookup()
                t["leaf_exchange"] = self._adaptive("leaf", self._leaf_version, now, p.leaf_exchange_interval)
            if t["revive"] <= now:
                if len(self.dead) > 1024:
                    self.dead = {i: until for i, until in self.dead.items() if until > now}
                if self._departed:
                    self._probe(self.rng.choice(list(self._departed.values())), now, kind=REVIVE)
                t["revive"] = self._next(now, p.revive_interval)
        return self._flush()

    def route(self, key: int, payload: Message, now: float) -> Output:
        """Send a payload to the live node numerically closest to `key` (maybe us)."""
        self._route(Route(key=key, origin=self.me, payload=payload), now)
        return self._flush()

    def send_to_row(self, row: int, payload: Message) -> Output:
        """Send a payload to every node in one row of our routing table."""
        for peer in self.table.row(row):
            self._send(peer.addr, Direct(sender=self.me, payload=payload))
            self._used.add(peer.addr)
        return self._flush()

    def send_to_leaf_set(self, payload: Message) -> Output:
        """Send a payload to every member of our leaf set."""
        for peer in self.leaf.members():
            self._send(peer.addr, Direct(sender=self.me, payload=payload))
        return self._flush()

    def send_direct(self, addr: str, payload: Message) -> Output:
        """Send a payload to the node at `addr`; it arrives as a Received event."""
        self._send(addr, Direct(sender=self.me, payload=payload))
        self._used.add(addr)
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

    def next_hop(
        self, key: int, exclude: Collection[int] = (), *, rerouting: bool = False, now: float | None = None
    ) -> Peer | None:
        """Pastry's routing decision, skipping the nodes in `exclude`; None means we are the root.
        `rerouting`: a hop of this message was silent already, so where the table's slot cannot
        serve, leaf-set members (watched, and exact once repaired) and the table entries heard
        from within SWEEP_QUIET before `now` go before other table entries (never probed unless
        used: after a wave of crashes, several in a row may be dead). A slot's entry that we are
        probing as a suspect is passed over for the nearest other node that makes progress, if
        there is one."""
        if self.leaf.covers(key):
            best = self.leaf.closest(key, exclude)
            return None if best.id == self.me.id else best
        b = self.params.b
        r = shared_prefix_len(key, self.me.id, b)
        if r >= self.table.rows:
            return None
        entry = self.table.get(r, digit(key, r, b))
        if entry is not None and entry.id not in exclude and self._suspected(entry.id):
            instead = self._select_by_proximity(key, r, (*exclude, entry.id), True, now)
            return entry if instead is None else instead
        if entry is not None and entry.id not in exclude:
            return self._lookahead(key, r, exclude, entry)
        return self._select_by_proximity(key, r, exclude, rerouting, now)

    def _lookahead(self, key: int, r: int, exclude: Collection[int], entry: Peer) -> Peer:
        """Lookahead: a leaf set we hold of a table entry (asked for at row maintenance) that
        spans the key names its root (or, if the set is stale, a node near it whose own leaf set
        routes on): go to that set's member closest to the key at once, skipping the hops
        between, if it is closer to the key than the slot's `entry` and makes progress as
        Pastry's rare case defines it (as long a shared prefix as ours, and numerically closer
        than us: the key may sit just across a digit boundary). Any entry's set, not only the
        slot entry's: after the join of 5,000 nodes, with every set current, that took the
        lookups' rdp from 1.18 to 1.13 on the oracle tables (docs/bench/overlay_oracle_tables.py).
        A set spanning over LOOKAHEAD_ARC times our own leaf set's arc is passed over: stale
        (from a much sparser ring), or a liar's claim to know the root of every key; within the
        bound, a liar's set reaches only keys a few leaf sets from its own id. A member we know
        (leaf set or table) is sent to at our own record's address, not the set's."""
        held = self._entry_leaves
        if not held:
            return entry
        b = self.params.b
        limit = LOOKAHEAD_ARC * self._own_arc() or ID_SPACE  # (a small ring: our leaf set covers it)
        best, best_c = entry, closeness(key, entry.id)
        mine = closeness(key, self.me.id)
        dead = self.dead
        in_table = self.table.contains
        for center, (_, members, _, cw, ccw) in held.items():
            if cw + ccw > limit or ((key - center) & ID_MASK > cw and (center - key) & ID_MASK > ccw):
                continue
            if not in_table(center):
                continue  # replaced by a nearer node since: its set is no longer refreshed
            for p in members:
                pid = p.id
                c = closeness(key, pid)
                if (
                    c < best_c
                    and c < mine
                    and pid not in exclude
                    and pid not in dead
                    and shared_prefix_len(pid, key, b) >= r
                ):
                    best, best_c = p, c
        if best is not entry:
            # The set's address for a node is its holder's word: one we know goes to ours.
            own = self._record(best.id)
            if own is not None:
                return own
        return best

    def _own_arc(self) -> int:
        """The arc of the ring our leaf set spans (0 while a side has room: a small ring, or
        we are joining)."""
        reach = self.leaf._reach
        return 0 if reach is None else reach[0] + reach[1]

    def _grown_since(self, arc_then: int) -> bool:
        """Whether the ring has grown since our leaf set spanned `arc_then` (RING_GROWTH)."""
        now = self._own_arc()
        return now > 0 and (arc_then == 0 or now * RING_GROWTH < arc_then)

    def _suspected(self, pid: int) -> bool:
        """Whether a probe of `pid` as a suspect is outstanding (it may be dead)."""
        nonce = self._probing.get(pid)
        return nonce is not None and self._pending[nonce].kind == SUSPECT

    def _select_by_proximity(
        self, key: int, r: int, exclude: Collection[int], rerouting: bool, now: float | None
    ) -> Peer | None:
        """The slot is empty or its node silent. Proximity route selection: among the known nodes
        that make progress (as long a shared prefix and numerically closer than us), those with
        the longest prefix, and of these the nearest measured one. Suspects go last; when
        `rerouting`, so do the table entries neither in the leaf set nor heard from lately."""
        b = self.params.b
        mine = closeness(key, self.me.id)
        best, best_rank = self.me, (3, 0, math.inf, mine)
        leaf, heard, probing = self.leaf, self.last_heard, self._probing
        recent = -math.inf if now is None else now - SWEEP_QUIET
        for p in self._known():
            pid = p.id
            if pid in exclude:
                continue
            shared = shared_prefix_len(pid, key, b)
            c = closeness(key, pid)
            if shared < r or c >= mine:
                continue
            if pid in probing and self._suspected(pid):
                trust = 2
            elif rerouting and pid not in leaf and heard.get(pid, -math.inf) < recent:
                trust = 1
            else:
                trust = 0
            rank = (trust, -shared, self.rtt.get(pid, math.inf), c)
            if rank < best_rank:
                best, best_rank = p, rank
        return None if best is self.me else best

    def known(self) -> list[Peer]:
        """Every node in our leaf set and routing table."""
        return list(self._known())

    def _known(self) -> list[Peer]:
        """known(), listed again only after the table or the leaf set changed (row requests,
        joins and routing around a silent hop all ask). Shared: do not change it."""
        versions = (self.table.version, self.leaf.version)
        if self._known_cache[0] != versions:
            seen = {p.id: p for p in self.table.cached_entries()}
            for p in self.leaf.members():
                seen.setdefault(p.id, p)
            self._known_cache = (versions, list(seen.values()))
        return self._known_cache[1]

    # ------------------------------------------------------------------ internals

    def _send(self, addr: str, msg: Message) -> None:
        self._out.sends.append((addr, msg))

    def _next(self, now: float, interval: float) -> float:
        return now + interval * (0.9 + 0.2 * self.rng.random())  # jitter avoids lockstep rounds

    def _adaptive(self, name: str, version: int, now: float, base: float) -> float:
        """The next round of an adaptive timer: `base` again if `version` (what the round
        maintains) changed since its last round, else twice the last interval, up to max_backoff
        times `base`."""
        factor, seen = self._backoff.get(name, (1, -1))
        factor = 1 if version != seen else min(2 * factor, self.params.max_backoff)
        self._backoff[name] = (factor, version)
        return self._next(now, base * factor)

    def _flush(self) -> Output:
        if self._leaf_changed:
            self._out.events.append(LeafSetChanged(tuple(self.leaf.members())))
            self._leaf_changed = False
        out, self._out = self._out, Output([], [])  # no default factories: this runs per message
        # The earliest deadline, without building a list: this runs after every message.
        pending, hops = self._pending, self._hops
        if self._timers_changed:
            self._timers_changed = False
            timers = self._timers
            self._timers_due = min(timers.values()) if timers else None
        wakeup = self._timers_due
        if pending:
            due = next(iter(pending.values())).sent + self.params.probe_timeout
            wakeup = due if wakeup is None or due < wakeup else wakeup
        if hops:
            due = next(iter(hops.values())).sent + self.params.hop_timeout
            wakeup = due if wakeup is None or due < wakeup else wakeup
        out.wakeup = wakeup
        return out

    def _become_joined(self, now: float) -> None:
        self.joined = True
        self._join_tried.clear()
        self._arm_seed_watch(now)
        self._timers.pop("join", None)
        self._timers.pop("found", None)
        self._timers_changed = True
        p = self.params
        self._timers.update(
            heartbeat=self._next(now, p.keepalive_interval),
            watch=now + p.leaf_timeout,
            table_probe=self._next(now, p.table_probe_interval),
            row_maintenance=self._next(now, p.row_maintenance_interval),
            leaf_exchange=self._next(now, p.leaf_exchange_interval),
            revive=self._next(now, p.revive_interval),
        )
        self._out.events.append(Joined())

    def _heard(self, peer: Peer, now: float) -> None:
        heard = self.last_heard
        heard[peer.id] = now
        if len(heard) > self._heard_limit:
            self._heard_limit = self._trim_recent(heard, by_value=True)
        self.dead.pop(peer.id, None)
        if self._departed.pop(peer.id, None) is not None:
            self._consider(peer, now, firsthand=True)  # back from the dead, or from a partition

    def _consider(
        self, peer: Peer, now: float, *, firsthand: bool = False, measure: bool = True, bound: float = 0.0
    ) -> None:
        """Learn of a node: leaf set if it belongs there, routing table by proximity. Without
        `measure`, a node whose round-trip time is unknown only fills an empty slot: it is not
        probed to challenge the entry that holds its slot. `bound`: a lower bound on its
        round-trip time (see _consider_all; a claimed one, never stored): it is not probed to
        challenge a holder measured at most PRUNE_FACTOR times nearer. A node we hold named at
        another address moves there if `firsthand` (its own word), else is probed there and
        moves only if it answers (_on_pong)."""
        pid, me = peer.id, self.me.id
        if pid == me:
            return
        if not firsthand and self.dead.get(pid, 0.0) > now:
            return
        leaf, table, rtt = self.leaf, self.table, self.rtt
        held = leaf._by_id.get(pid)
        reach = leaf._reach
        if held is not None:
            if held.addr != peer.addr:
                if firsthand:  # same node, new address, in its own word
                    leaf.add(peer)
                    self._leaf_did_change(now)
                else:
                    # Someone else's word (stale, or a liar's: it would send the node's traffic,
                    # and our probes, elsewhere): ours stays unless the node answers there.
                    self._probe(peer, now)
        elif reach is not None and ((pid - me) & ID_MASK) >= reach[0] and ((me - pid) & ID_MASK) >= reach[1]:
            pass  # LeafSet.could_hold, inlined: it cannot enter our leaf set
        elif self.joined and not firsthand:
            # Heard of second-hand, from a set that may be stale: it enters our leaf set only
            # once it answers (_on_pong), so that dead nodes are not passed around the ring.
            self._probe(peer, now)
        elif self.leaf.add(peer):
            self._leaf_did_change(now)
            if self.joined:
                self._send(peer.addr, self._leaf_push(peer))
        # RoutingTable.slot and get, inlined (pid != me, so the XOR is not 0).
        b = table.b
        r = (ID_BITS - (me ^ pid).bit_length()) // b
        where = (r, (pid >> (ID_BITS - b * (r + 1))) & (table.cols - 1))
        current = table._rows[r][where[1]]
        if current is None:
            if firsthand:
                table.set(*where, peer)
                if pid not in rtt:
                    self._probe(peer, now)
            else:
                # Heard of second-hand: it may be a stale entry of the teller's, which nobody
                # probes unless it is used, so it fills the slot only once it answers (_on_pong).
                self._candidates[peer.id] = peer
                self._probe(peer, now)
        elif current.id == pid:
            if current.addr != peer.addr:
                if firsthand:
                    table.set(*where, peer)
                else:
                    self._probe(peer, now)  # as for a leaf member: taken if it answers (_on_pong)
        elif pid in rtt:
            # Measured before, and nearer than the entry: measured again (it may have died since)
            # and put in the entry's place if it answers (_on_pong).
            if measure and current.id in rtt and rtt[pid] < rtt[current.id]:
                self._candidates[pid] = peer
                self._probe(peer, now)
        elif measure:
            holder_rtt = rtt.get(current.id)
            if holder_rtt is not None and bound >= PRUNE_FACTOR * holder_rtt:
                return  # it cannot be nearer than the holder
            self._candidates[pid] = peer
            self._probe(peer, now)

    def _rtts_of(self, peers: list[Peer]) -> list[float | None]:
        """Our measured round-trip time to each peer (0 to ourselves), for an offer of them: the
        receiver bounds its own RTT to each from its RTT to us (_consider_all)."""
        get, me = self.rtt.get, self.me.id
        return [0.0 if (pid := p.id) == me else get(pid) for p in peers]

    def _leaf_push(self, to: Peer) -> LeafSetPush:
        """Our leaf set for `to`, with our RTTs to its members if `to` takes them (CAP_RTT). The
        last push built of each kind is sent again while neither changed: pushes answer every
        lookahead request, and the set and its RTTs are mostly the same from one to the next (a
        message is immutable, so it can be shared). The RTTs of members change only in _on_pong
        (which bumps _leaf_rtts_version); a member's entry is never trimmed, and one declared dead
        leaves the set. (A write to `rtt` from outside, as sim/flock_paper.py's frozen overlay
        makes in place of probes, reaches pushes only once the set changes: a push's RTTs are a
        hint for the receiver's pruning, not measurements.)"""
        leaf = self.leaf
        if not self._speaks(to.id, CAP_RTT):
            base = self._last_base_push
            if base is not None and base[0] == leaf.version:
                return base[1]
            push = LeafSetPush.built(sender=self.me, leaf_set=leaf.members())
            self._last_base_push = (leaf.version, push)
            return push
        last = self._last_push
        if last is not None and last[0] == leaf.version and last[1] == self._leaf_rtts_version:
            return last[2]
        members = leaf.members()
        push = LeafSetPush.built(sender=self.me, leaf_set=members, rtts=self._rtts_of(members))
        self._last_push = (leaf.version, self._leaf_rtts_version, push)
        return push

    def _speaks(self, pid: int, capability: int) -> bool:
        """Whether both we and the peer announced `capability` (an unknown peer: the base format)."""
        return bool(self.caps.get(pid, 0) & self.capabilities & capability)

    def _rtt_for(self, peer: Peer) -> float | None:
        """Our RTT to `peer`, for a request or hello to it: None if not measured or not taken."""
        return self.rtt.get(peer.id) if self._speaks(peer.id, CAP_RTT) else None

    def _learn_caps(self, pid: int, caps: int) -> None:
        """What a peer announced (first-hand: in its own ping or pong) replaces what we knew."""
        known = self.caps
        if known.get(pid) != caps:
            known.pop(pid, None)
            known[pid] = caps
            if len(known) > self._caps_limit:
                self._caps_limit = self._trim_recent(known)

    def is_seed(self, addr: str) -> bool:
        """Whether `addr` is one of our seeds, as written (case and a trailing dot aside) or as
        its node advertises itself (seed_alias)."""
        return bool(self._seed_keys) and _addr_key(addr) in self._seed_keys

    def seed_alias(self, seed: str, addr: str) -> None:
        """The seed written `seed` is the node that advertises `addr` (the driver matched them
        by the node's certificate and source: it may be written as a name for its address, or
        the other way round): we know it by both, to answer it while joining (_on_join) and to
        count its answer (_on_join_info). (The driver matches each seed once; the map stays
        within twice the seeds.)"""
        key, alias = _addr_key(seed), _addr_key(addr)
        if key in self._seed_keys.get(key, ()) and (
            alias in self._seed_keys or len(self._seed_keys) < 2 * len(self.seeds)
        ):
            self._seed_keys.setdefault(alias, set()).add(key)

    def seed_is_self(self, addr: str, now: float) -> Output:
        """The seed at `addr` is this node under another spelling (the driver saw our own
        datagram, sent there, come back): it leaves the seeds, and we are a seed ourselves, as
        if our own address had been listed (start). It stays among the seeds we watch
        (_seed_watch): a copy of our datagram sent back by someone else (a certificate that
        lists a whole block of addresses lets it through) must not keep us apart for good;
        if the seed is us, the watch costs one datagram to ourselves every revive_interval."""
        found = set(self._seed_keys.get(_addr_key(addr), ()))
        if not found:
            return self._flush()
        self._self_seeds.update((key, seed) for seed in self.seeds if (key := _addr_key(seed)) in found)
        for key, stands_for in self._seed_keys.items():
            if stands_for & found:
                self._self_keys.setdefault(key, set()).update(stands_for & found)
        self.seeds = tuple(seed for seed in self.seeds if _addr_key(seed) not in found)
        self._seed_keys = {k: v - found for k, v in self._seed_keys.items() if v - found}
        self._seed_asks = {seed: n for seed, n in self._seed_asks.items() if _addr_key(seed) not in found}
        was_seed, self._named_self = self._named_self, True
        if not self.joined:
            if not self.seeds:
                self._become_joined(now)
            elif not was_seed:
                self._ask_every_seed(now)
        else:
            self._arm_seed_watch(now)
        return self._flush()

    def _arm_seed_watch(self, now: float) -> None:
        """Joined, with seeds not heard from: _seed_watch asks them one revive_interval from now
        (it then rearms itself while any stays unheard)."""
        if self.unheard_seeds() and "seed_watch" not in self._timers:
            self._timers["seed_watch"] = now + self.params.revive_interval
            self._timers_changed = True

    def _ask_every_seed(self, now: float) -> None:
        """As a seed ourselves: a join request to every other seed, again in the other format one
        join_retry later (on_timer), and we found the ring one more join_retry on."""
        self._ask_seeds()
        self._timers["join"] = now + self.params.join_retry
        self._timers["found"] = now + 2 * self.params.join_retry
        self._timers_changed = True

    def _ask_seeds(self) -> None:
        for seed in self.seeds:
            self._send(seed, self._seed_request(seed))

    def _next_seed(self) -> str:
        """The seed whose turn it is (round robin over `seeds`)."""
        seed = self.seeds[self._seed_turn % len(self.seeds)]
        self._seed_turn += 1
        return seed

    def _seed_request(self, seed: str) -> JoinRequest:
        """Our join request to a seed, whose version we do not know: every other request to it
        announces our capabilities, so that an older seed lets us in one of its retries later."""
        asks = self._seed_asks[seed] = self._seed_asks.get(seed, 0) + 1
        return self._join_request(asks % 2 == 1)

    def _join_request(self, announce: bool) -> JoinRequest:
        """Our join request. `announce`: whether it announces our capabilities (hops that take
        them answer with RTTs; a node of a version before them drops such a request)."""
        self._join_attempts += 1
        if announce and self.capabilities:
            return JoinRequest.built(joiner=self.me, caps=self.capabilities)
        return JoinRequest.built(joiner=self.me)

    def _join_target(self) -> Peer | None:
        """Where a join retry goes (None: the next seed). The first two attempts (one in each
        format, to one seed) and every other later one go to the seeds; the others, JOIN_TRIES_EACH each,
        to the nodes that answered us this incarnation (a hop's answer, a pong): those that ack
        joins first (they probe a silent next hop and route around it), nearest our id first.
        Why: a hop on the bootstrap's route that loses our requests loses every retry sent the
        same way, e.g. an older bootstrap or forwarder whose table slot towards our id holds a
        node that crashed (it does not ack joins and never probes an entry it only forwards them
        to); a route from a node nearer our id shares little of that one. Only nodes we heard
        from this incarnation: a hop that lies about others cannot send our retries to them,
        nor a stale set to the dead. (One still joining answers a retry as its root only once
        JOINING_ROOT_AFTER has passed: _on_join.)"""
        attempt = self._join_attempts + 1
        if attempt < 3 or attempt % 2 == 0:
            return None
        heard = self.last_heard
        answered = [p for p in self._known() if p.id in heard and not self.is_seed(p.addr)]
        if not answered:
            return None
        # only nodes still known (bounded as the table and leaf set are)
        tried = self._join_tried = {p.id: n for p in answered if (n := self._join_tried.get(p.id, 0))}
        if all(tried.get(p.id, 0) >= JOIN_TRIES_EACH for p in answered):
            tried.clear()  # every one had its tries: round again
        me = self.me.id
        target = min(
            (p for p in answered if tried.get(p.id, 0) < JOIN_TRIES_EACH),
            key=lambda p: (not self._speaks(p.id, CAP_JOIN_ACK), closeness(me, p.id)),
        )
        tried[target.id] = tried.get(target.id, 0) + 1
        return target

    def unheard_seeds(self) -> list[str]:
        """The seeds whose ring may not be ours (the daemons' status shows them): none answered
        us (we joined through others' answers, _join_target, or a node that answered as a root
        after JOINING_ROOT_AFTER; or we founded the ring as a seed). A seed that answered is in
        our ring; a seed ourselves, we wait for every other one (each may have founded a ring of
        its own meanwhile)."""
        answered = self._seeds_answered
        if not self._named_self and answered:
            return []
        return [seed for seed in (*self.seeds, *self._self_seeds.values()) if _addr_key(seed) not in answered]

    def _seed_watch(self, now: float) -> None:
        """Merge our ring with the seeds' (one may have been down, e.g. a founder that started
        last, or have founded its own): a join request, every revive_interval until it answers,
        to the next seed in turn (a seed ourselves: to every other one). Its hops and root
        answer with their rows and leaf set, which we take in like any other."""
        unheard = self.unheard_seeds()
        if not unheard:
            return
        for seed in unheard if self._named_self else [unheard[self._seed_turn % len(unheard)]]:
            self._send(seed, JoinRequest.built(joiner=self.me))
        self._seed_turn += 1
        self._timers["seed_watch"] = now + self.params.revive_interval

    def _trim_recent(self, peers: dict[int, float] | dict[int, int], *, by_value: bool = False) -> int:
        """Bound a per-peer map (rtt, last_heard, caps): keep the entries of the leaf set's and routing
        table's nodes and the `recent_peers` most recent others (recency: the map's order, rtt
        being kept in order of measurement, or the value, last_heard being a time); returns the
        size at which to trim again. A node hears from ever more nodes as a ring grows (and a
        hostile flood of distinct peers is unlimited), while only known nodes' entries are read
        back, bar the recent ones a new offer of the same node may ask about. Amortised O(1):
        the next trim comes `recent_peers` insertions later."""
        cap = self.params.recent_peers
        leaf, table = self.leaf, self.table
        others = [pid for pid in peers if pid not in leaf and not table.contains(pid)]
        if by_value:
            others.sort(key=peers.__getitem__)  # stable: equal times stay in insertion order
        for pid in others[: max(len(others) - cap, 0)]:
            del peers[pid]
        return len(peers) + max(cap, 1)

    def _consider_all(
        self,
        peers: list[Peer],
        now: float,
        *,
        measure: bool = True,
        rtts: list[float | None] | None = None,
        via: float | None = None,
    ) -> None:
        """_consider (second-hand) for each peer. Most peers a push or reply names change
        nothing (already in our leaf set, or outside it, and in their table slot or losing
        to its holder): that case is decided here inline, with _consider's checks in its order,
        and only the others go through _consider. This runs for every peer of every leaf-set
        push, row reply and join info: most of the simulator's time. A node we hold, named at
        another address, goes through _consider (which probes the claimed address).

        Probe pruning: `rtts` are the sender's measured round-trip times to `peers` (None where
        it has none), `via` our measured one to the sender. By the triangle inequality our RTT to
        a peer is at least |via - rtts[i]|, so an unmeasured peer whose bound is already no
        nearer than its slot's measured holder is not probed (_consider's `bound`). A lying
        sender can only make us skip such a probe or send it: the bound is never stored as a
        measurement."""
        me, dead, rtt = self.me.id, self.dead, self.rtt
        b = self.params.b
        mask = (1 << b) - 1
        rows = self.table._rows
        leaf = self.leaf
        # The leaf set's map and bounds, read again after each _consider (which may change them).
        by_id, reach = leaf._by_id, leaf._reach
        paired = via is not None and rtts is not None and len(rtts) == len(peers)
        for i, peer in enumerate(peers):
            pid = peer.id
            if pid == me or (dead and dead.get(pid, 0.0) > now):
                continue
            held = by_id.get(pid)
            if held is None:  # LeafSet.could_hold, inlined
                hand_over = (
                    reach is None or ((pid - me) & ID_MASK) < reach[0] or ((me - pid) & ID_MASK) < reach[1]
                )
            else:
                hand_over = held.addr != peer.addr
            if not hand_over:
                # RoutingTable.slot and get, inlined (pid != me, so the XOR is not 0).
                r = (ID_BITS - (me ^ pid).bit_length()) // b
                current = rows[r][(pid >> (ID_BITS - b * (r + 1))) & mask]
                if current is None:
                    hand_over = True
                elif current.id == pid:
                    hand_over = current.addr != peer.addr
                elif measure:
                    known_rtt = rtt.get(pid)
                    current_rtt = rtt.get(current.id)
                    if known_rtt is not None:
                        hand_over = current_rtt is not None and known_rtt < current_rtt
                    elif current_rtt is None:
                        hand_over = True
                    else:
                        theirs = rtts[i] if paired else None  # type: ignore[index]
                        bound = 0.0 if theirs is None else abs(via - theirs)  # type: ignore[operator]
                        hand_over = bound < PRUNE_FACTOR * current_rtt
            if hand_over:
                theirs = rtts[i] if paired else None  # type: ignore[index]
                bound = 0.0 if theirs is None else abs(via - theirs)  # type: ignore[operator]
                self._consider(peer, now, measure=measure, bound=bound)
                by_id, reach = leaf._by_id, leaf._reach

    def _probe(
        self,
        peer: Peer,
        now: float,
        *,
        kind: int = MEASURE,
        attempts: int = PROBE_ATTEMPTS,
        attempt: int = 1,
        tell: Peer | None = None,
    ) -> None:
        nonce = self._probing.get(peer.id)
        if nonce is not None:  # one probe per node at a time; a suspicion takes over a measurement
            probe = self._pending[nonce]
            if probe.peer.addr == peer.addr:
                if kind > probe.kind:
                    probe.kind, probe.attempts, probe.tell = kind, attempts, tell
                return
            # Another address than the pending probe's: a probe of our own record's takes over
            # one of a claimed new address (which must not become a suspicion of the node:
            # _expire_probes); else the pending probe stands.
            own = self._record(peer.id)
            if own is None or own.addr != peer.addr:
                return
            del self._pending[nonce]
        self._nonce += 1
        nonce = (self._nonce & 0xFFFFFF) | self._nonce_caps
        if self._nonce_rng is not None:  # (hop nonces come from the same counter: peers see them)
            nonce |= self._nonce_rng.getrandbits(PING_NONCE_RANDOM_BITS) << 24
        self._pending[nonce] = _Probe(peer, now, kind, attempt, attempts, tell)
        self._probing[peer.id] = nonce
        self._out.sends.append((peer.addr, Ping.built(sender=self.me, nonce=nonce, sent=float(now))))  # _send

    def _record(self, pid: int) -> Peer | None:
        """Our own record of a node (leaf set, else routing table), or None: the address we
        send it at, changed only by the node's own word (_consider) or its answer there."""
        return self.leaf.get(pid) or self.table.entry(pid)

    def _expire_probes(self, now: float) -> None:
        for probe in _expired(self._pending, self.params.probe_timeout, now):
            pid = probe.peer.id
            self._probing.pop(pid, None)
            if probe.kind == REVIVE:
                continue
            own = self._record(pid)
            if own is not None and own.addr != probe.peer.addr:
                # Silent at an address someone else claimed (or one it has left, in its own
                # word): says nothing of the node at ours.
                self._candidates.pop(pid, None)
                continue
            in_table = self.table.contains(pid)
            if probe.kind == SUSPECT:
                if probe.attempt < probe.attempts:
                    self._probe(probe.peer, now, kind=SUSPECT, attempts=probe.attempts,
                                attempt=probe.attempt + 1, tell=probe.tell)  # fmt: skip
                elif in_table or pid in self.leaf:
                    self._declare_dead(probe.peer, now)
                else:  # e.g. a lookahead hop: not tried again while remembered dead
                    self.dead[pid] = now + self.params.dead_memory
            elif pid in self.leaf:
                continue  # a leaf member is declared dead only once suspected (see the module docstring)
            elif in_table and probe.attempt < PROBE_ATTEMPTS:
                self._probe(probe.peer, now, attempt=probe.attempt + 1)
            elif in_table:
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
        self.caps.pop(peer.id, None)
        self._candidates.pop(peer.id, None)
        self._entry_leaves.pop(peer.id, None)
        if self.leaf.remove(peer.id):
            self._leaf_did_change(now)
            members = self.leaf.members()
            self._ask_for_replacements()
            self._repairs_left = LEAF_REPAIR_RETRIES
            self._timers["leaf_repair"] = now + 2 * self.params.probe_timeout
            self._timers_changed = True
            # Spread the news: every member checks our set against its own (_check_push).
            for p in members:
                self._send(p.addr, self._leaf_push(p))
        where = self.table.remove(peer.id)
        if where is not None:
            self._repair_slot(where[0], now)
        # A death is news of churn: others of our table entries may have died with it, and nobody
        # probes an entry unless it is used. Sweep the table soon (at most once per
        # table_probe_interval), so that lookups meet repaired slots, not dead entries.
        t = self._timers
        quiet = now - self._last_sweep >= self.params.table_probe_interval
        if self.joined and quiet and "table_sweep" not in t:
            t["table_sweep"] = now + SWEEP_DELAY
            self._timers_changed = True

    def _repair_slot(self, row: int, now: float) -> None:
        """A slot of `row` lost its entry: ask a node of that row (or, if none, of a deeper one)
        for its nodes that fit the row (Pastry's table repair), and our nearest measured node,
        whose nodes are near us too, so that the slot is filled by proximity, not by whoever
        answers first (_on_pong keeps the nearest candidate). Row maintenance, maybe backed off to
        minutes, is brought forward: the slot's neighbours in the row may have gone with it."""
        asked: dict[int, Peer] = {}
        for r in range(row, self.table.rows):
            others = self.table.row(r)
            if others:
                pick = self.rng.choice(others)
                asked[pick.id] = pick
                break
        nearest = self._nearest_measured()
        if nearest is not None:
            asked.setdefault(nearest.id, nearest)
        self._request_row(row, asked.values())
        t = self._timers
        due = now + self.params.row_maintenance_interval
        if self.joined and t.get("row_maintenance", math.inf) > due:
            t["row_maintenance"] = due
            self._backoff.pop("row", None)
            self._timers_changed = True

    def _sweep_table(self, now: float) -> None:
        """Probe the routing-table entries (leaf members aside: the leaf set watches them) that
        we have not heard from for SWEEP_QUIET seconds, once, after we learnt a death: each
        that fails PROBE_ATTEMPTS probes is declared dead and its slot repaired (_repair_slot).
        Costs nothing while the ring is stable; after a wave of crashes it turns the dead
        entries that lookups would meet, and route around through far nodes, into repaired
        slots."""
        self._last_sweep = now
        self._timers["lookahead_refresh"] = now + LOOKAHEAD_REFRESH
        self._timers_changed = True
        heard, leaf = self.last_heard, self.leaf
        for peer in self.table.entries():
            if peer.id not in leaf and now - heard.get(peer.id, -math.inf) >= SWEEP_QUIET:
                self._probe(peer, now, kind=SUSPECT, attempts=PROBE_ATTEMPTS)

    def _ask_for_replacements(self) -> None:
        """Ask the farthest leaf member on each side for its leaf set (Pastry's leaf repair)."""
        asked = {p.id: p for p in (self.leaf.farthest("larger"), self.leaf.farthest("smaller")) if p}
        if not asked:
            asked = {p.id: p for p in self.table.cached_entries()[:1]}
        for p in asked.values():
            self._send(p.addr, LeafSetRequest.built(sender=self.me, rtt=self._rtt_for(p)))

    def _retry_leaf_repair(self, now: float) -> None:
        """After a member was declared dead, ask again, LEAF_REPAIR_RETRIES times: the request, its
        answer or the probe of the replacement may have been lost, and the next leaf exchange may
        be minutes away (adaptive). Not only while a side is short: a farther node heard of in a
        push may have taken the free place of the nearer one we missed."""
        if self._repairs_left <= 0:
            return
        self._repairs_left -= 1
        self._ask_for_replacements()
        self._timers["leaf_repair"] = now + 2 * self.params.probe_timeout
        self._timers_changed = True

    def _leaf_did_change(self, now: float) -> None:
        self._leaf_changed = True
        self._leaf_version += 1
        if self.joined:
            self._timers["watch"] = now  # our larger neighbour may be another node now
            self._timers_changed = True

    def _watch(self, now: float) -> float:
        """Suspect our nearest larger neighbour after `leaf_timeout` of silence (counted from when
        we started watching it, if we never heard from it); returns when to look again."""
        timeout = self.params.leaf_timeout
        if not self.leaf.larger:
            return now + timeout
        right = self.leaf.larger[0]
        if self._watched[0] != right.id:
            self._watched = (right.id, now)
        since = max(self.last_heard.get(right.id, -math.inf), self._watched[1])
        due = since + timeout
        if due > now:  # not `now - since < timeout`: in floats both can hold with due == now
            return due
        self._probe(right, now, kind=SUSPECT, attempts=SUSPECT_ATTEMPTS)
        self._watched = (right.id, now)
        return now + timeout

    def _probe_used(self, now: float) -> None:
        """Probe the routing-table entries we sent application messages to since the last sweep
        and have not heard from for `table_probe_interval` (routed hops have acks of their own)."""
        if not self._used:
            return
        horizon = self.params.table_probe_interval
        for peer in self.table.entries():
            if peer.addr in self._used and now - self.last_heard.get(peer.id, -math.inf) >= horizon:
                self._probe(peer, now, kind=SUSPECT)
        self._used.clear()

    def _check_push(self, sender: Peer, their: list[Peer], now: float) -> None:
        """Compare a pushed leaf set with ours. A member of ours that the sender's set lacks, though
        it lies within the arc that set spans (or on a side that holds fewer than l/2 nodes), is
        either dead in the sender's eyes or unknown to it: we probe it unless we heard from it
        within `leaf_timeout`, and tell the sender about the ones that are alive."""
        s = sender.id
        dead, departed = self.dead, self._departed
        if dead or departed:
            # The sender still lists a node we declared dead. Either it missed the news (a push
            # lost, or the node heard from just before it died): our set, which lacks it, makes
            # the sender probe it (_check_push there); else the node may stay in its set for
            # good, as nobody watches a leaf member but its smaller neighbour. Or we declared it
            # dead wrongly (probes lost): probed once more, it is learned anew if it answers;
            # else it would be refused second-hand for `dead_memory` (one probe per node at a
            # time, and only nodes we declared dead: a liar cannot make us probe others).
            listed_dead = [p for p in their if p.id in departed or dead.get(p.id, 0.0) > now]
            if listed_dead:
                self._correct(sender, now)
                for p in listed_dead:
                    self._probe(p, now, kind=REVIVE)
        ids = [p.id for p in their]
        mine = self.leaf._by_id
        unlisted = mine.keys() - set(ids)
        unlisted.discard(s)
        if not unlisted:
            return  # (the usual case: neighbours' sets overlap)
        missing = [m for pid, m in mine.items() if pid in unlisted]  # in members() order
        # Each member counts on the side it is nearer to: clockwise (cw <= ccw) exactly when its
        # clockwise distance is at most half the ring (ccw is then 0 or ID_SPACE - cw), so the
        # reaches are a max and a min over the clockwise distances (builtins, not a loop: this
        # runs for most pushes).
        cws = [(i - s) & ID_MASK for i in ids]
        near = [c for c in cws if c <= _HALF_RING]
        far = [c for c in cws if c > _HALF_RING]
        count_cw, count_ccw = len(near), len(far)
        reach_cw = max(near) if near else 0
        reach_ccw = ID_SPACE - min(far) if far else 0
        half = self.leaf.half
        timeout = self.params.leaf_timeout
        tell = False
        for m in missing:
            cw = (m.id - s) & ID_MASK
            ccw = (s - m.id) & ID_MASK
            if cw <= ccw:
                inside = count_cw < half or cw < reach_cw
            else:
                inside = count_ccw < half or ccw < reach_ccw
            if not inside:
                continue
            heard = self.last_heard.get(m.id, -math.inf)
            if now - heard < timeout:
                tell = True
                # Maybe it died just after we heard from it, and the sender knows: if it stays
                # silent, probe it once `leaf_timeout` has passed since (_recheck_members).
                recheck = self._recheck
                if m.id not in recheck and len(recheck) < self.params.leaf_set_size:
                    recheck[m.id] = heard
                    due = heard + timeout
                    if self._timers.get("recheck", math.inf) > due:
                        self._timers["recheck"] = due
                        self._timers_changed = True
            else:
                self._probe(m, now, kind=SUSPECT, attempts=SUSPECT_ATTEMPTS, tell=sender)
        if tell:
            self._correct(sender, now)

    def _recheck_members(self, now: float) -> None:
        """Probe the leaf members a push lacked while we had heard from them lately, if we have
        not heard from them since, `leaf_timeout` after: a node heard from just before it died
        is otherwise kept in our set for good, since the pushes that spread its death come
        while it still counts as heard (seen at 1 % loss: repaired after 300-570 s)."""
        timeout, heard, leaf = self.params.leaf_timeout, self.last_heard, self.leaf
        later = math.inf
        for pid, then in list(self._recheck.items()):
            if then + timeout > now:
                later = min(later, then + timeout)
                continue
            del self._recheck[pid]
            member = leaf._by_id.get(pid)
            if member is not None and heard.get(pid, -math.inf) <= then:
                self._probe(member, now, kind=SUSPECT, attempts=SUSPECT_ATTEMPTS)
        if later < math.inf:
            self._timers["recheck"] = later
            self._timers_changed = True

    def _correct(self, peer: Peer, now: float) -> None:
        """Push our leaf set to a node whose view lacks nodes we know (once per keepalive interval)."""
        interval = self.params.keepalive_interval
        if now - self._corrected.get(peer.id, -math.inf) < interval:
            return
        self._corrected[peer.id] = now
        if len(self._corrected) > 4 * self.params.leaf_set_size:
            self._corrected = {k: t for k, t in self._corrected.items() if now - t < interval}
        self._send(peer.addr, self._leaf_push(peer))

    def _row_maintenance(self, now: float) -> None:
        """Proximity maintenance: for every row, ask a random member of that row and our nearest
        known node (for row 0 also some of its nearest members: ROW0_ASKED) for the nodes they
        know that would fit that row of ours. Nodes near us know nodes near them, hence near us
        (the triangle inequality), which is how tables built from random join paths become
        proximity-aware over time. Also asks each table entry for its leaf set (lookahead) when
        we do not hold it, have held it for `max_backoff` row intervals, or for at least one row
        interval while the ring has grown since it came (RING_GROWTH)."""
        interval = self.params.row_maintenance_interval
        horizon = interval * self.params.max_backoff
        held = self._entry_leaves
        for peer in self.table.cached_entries():
            got = held.get(peer.id)
            if (
                got is None
                or now - got[0] >= horizon
                or (now - got[0] >= interval and self._grown_since(got[2]))
            ):
                self._ask_leaf_set(peer, again=got is not None)
        for gone in [i for i in held if not self.table.contains(i)]:
            del held[gone]
        nearest = self._nearest_measured()
        for row in range(self.table.used_rows()):
            members = self.table.row(row)
            targets = {p.id: p for p in ([self.rng.choice(members)] if members else [])}
            if nearest is not None:
                targets.setdefault(nearest.id, nearest)
            if row == 0:
                rtt = self.rtt
                near = sorted((p for p in members if p.id in rtt), key=lambda p: rtt[p.id])[:ROW0_POOL]
                for p in self.rng.sample(near, min(ROW0_ASKED, len(near))):
                    targets.setdefault(p.id, p)
            self._request_row(row, targets.values())

    def _refresh_lookahead(self, now: float) -> None:
        """Ask every table entry for its leaf set again, LOOKAHEAD_REFRESH after a sweep: the
        sets we hold from before a wave of deaths list dead nodes and lack their replacements
        (lookahead would send lookups to dead nodes, or along longer paths)."""
        since = now - SWEEP_QUIET  # (a set got after the sweep may be older than the repairs)
        held = self._entry_leaves
        for peer in self.table.cached_entries():
            got = held.get(peer.id)
            if got is None or got[0] <= since:
                self._ask_leaf_set(peer, again=got is not None)

    def _ask_leaf_set(self, peer: Peer, *, again: bool) -> None:
        """Ask a table entry for its leaf set (lookahead). Asked `again`, in the base format: the
        entry may have gone down and come back as an older version (a rollback) since we learnt
        its version, unnoticed, as nobody probes a table entry unless it is used, and an older
        version drops a request with an RTT it does not know (tests/sim/test_mixed_ring.py). It
        knows ours from the first request."""
        rtt = None if again else self._rtt_for(peer)
        self._send(peer.addr, LeafSetRequest.built(sender=self.me, rtt=rtt))

    def _nearest_measured(self) -> Peer | None:
        """The known node with the smallest measured round-trip time (its nodes are near us too)."""
        rtt = self.rtt
        measured = [p for p in self._known() if p.id in rtt]
        return min(measured, key=lambda p: rtt[p.id]) if measured else None

    def _request_row(self, row: int, peers: Iterable[Peer]) -> None:
        """Ask each of `peers` for the nodes it knows that would fit row `row` of our table."""
        for peer in peers:
            self._send(peer.addr, RowRequest.built(sender=self.me, row=row, rtt=self._rtt_for(peer)))

    def _leaf_exchange(self) -> None:
        """Push our leaf set to one random member, which checks it against its own (_check_push):
        a node that learned of two concurrent joiners tells each about the other."""
        members = self.leaf.members()
        if members:
            to = self.rng.choice(members)
            self._send(to.addr, self._leaf_push(to))

    def _self_lookup(self) -> None:
        entries = self.table.entries() or self.leaf.members()
        if entries:
            to = self.rng.choice(entries)
            caps = self.capabilities if self._speaks(to.id, CAP_TOLERANT) else None
            self._send(to.addr, JoinRequest.built(joiner=self.me, refresh=True, caps=caps))

    # ------------------------------------------------------------------ handlers

    def _on_ping(self, msg: Ping, now: float) -> None:
        theirs = caps_in_nonce(msg.nonce)
        if self.caps.get(msg.sender.id) != theirs:  # (_learn_caps' test, inlined)
            self._learn_caps(msg.sender.id, theirs)
        caps = self.capabilities if theirs & self.capabilities & CAP_TOLERANT else None
        pong = Pong.built(sender=self.me, nonce=msg.nonce, sent=msg.sent, caps=caps)
        self._out.sends.append((msg.sender.addr, pong))  # _send, inlined
        # Not probed back: the prober measures us, and we measure it when it is offered to us as
        # a candidate (row maintenance), which halves the probes of joins.
        self._consider(msg.sender, now, firsthand=True, measure=False)

    def _on_pong(self, msg: Pong, now: float) -> None:
        sender = msg.sender
        pid = sender.id
        pending = self._pending
        probe = pending.get(msg.nonce)
        if probe is None or probe.peer.id != pid:
            return
        del pending[msg.nonce]
        self._probing.pop(pid, None)
        caps = msg.caps or 0
        if self.caps.get(pid) != caps:  # (_learn_caps' test, inlined)
            self._learn_caps(pid, caps)
        if probe.tell is not None:
            self._correct(probe.tell, now)  # it lacked this node, which is alive
        # From our own record of the ping, not the `sent` the pong echoes: a peer that echoes a
        # later time would otherwise be stored as nearer than it is, and win table slots.
        sample = max(now - probe.sent, 0.0)
        rtt = self.rtt
        old = rtt.pop(pid, None)  # to the end: the map is in recency order
        rtt[pid] = sample if old is None else 0.7 * old + 0.3 * sample
        if len(rtt) > self._rtt_limit:
            self._rtt_limit = self._trim_recent(rtt)
        # LeafSet.could_hold, inlined (this runs for every probe answered).
        leaf, me = self.leaf, self.me.id
        own = self._record(pid)
        if own is not None and own.addr != sender.addr:
            # Its own word, in answer to our probe (maybe of a new address someone told us of):
            # the node is where it says.
            self._consider(sender, now, firsthand=True)
        if pid in leaf._by_id:
            self._leaf_rtts_version += 1  # a member's RTT: the next leaf push says it (_leaf_push)
        else:
            reach = leaf._reach
            if reach is None or ((pid - me) & ID_MASK) < reach[0] or ((me - pid) & ID_MASK) < reach[1]:
                self._consider(sender, now, firsthand=True)  # a leaf candidate, verified
        candidate = self._candidates.pop(pid, None)
        if candidate is not None and candidate.id != me:
            # RoutingTable.slot and get, inlined (the ids differ, so the XOR is not 0).
            table = self.table
            b = table.b
            r = (ID_BITS - (me ^ candidate.id).bit_length()) // b
            col = (candidate.id >> (ID_BITS - b * (r + 1))) & (table.cols - 1)
            current = table._rows[r][col]
            if current is None or (
                current.id != candidate.id and rtt[candidate.id] < rtt.get(current.id, float("inf"))
            ):
                # As the node names itself in its answer: the candidate may since have been
                # offered again at another, claimed, address while this probe was out.
                table.set(r, col, sender)

    def _on_join(self, msg: JoinRequest, now: float) -> None:
        joiner = msg.joiner
        if msg.via is not None and msg.hop_nonce is not None and self.capabilities & CAP_JOIN_ACK:
            self._heard(msg.via, now)
            self._send(msg.via.addr, RouteAck.built(sender=self.me, hop_nonce=msg.hop_nonce))
        if joiner.id == self.me.id:
            return
        nxt = self.next_hop(joiner.id, exclude=(joiner.id,))
        root = nxt is None
        if (
            root
            and not self.joined
            and msg.hops == 0
            and not self.is_seed(joiner.addr)
            and now - self._join_started < JOINING_ROOT_AFTER
        ):
            # Asked straight by the joiner while still joining ourselves (as its bootstrap, or
            # a retry's target: _join_target): we know too little of the ring to be its root,
            # and the two would make a ring apart. Routed to us (hops > 0: a node took us for
            # its next hop), we may be: nodes that join at once, close in id, get in through
            # each other so. Asked by a seed of ours (two nodes each other's bootstrap, seeds
            # that start at once), or once our own join has gone unanswered for JOINING_ROOT_AFTER
            # seconds (bootstraps in a cycle, or through a node that is gone), we answer.
            return
        if root or not msg.refresh:
            upto = min(shared_prefix_len(self.me.id, joiner.id, self.params.b), self.table.rows - 1)
            rows = (
                []
                if msg.refresh
                else [p for r in range(upto + 1) for p in self.table.row(r) if p.id != joiner.id]
            )
            self._answer_join(msg, rows, root=root)
        if nxt is not None:
            self._forward_join(msg, nxt, now, set())

    def _answer_join(self, msg: JoinRequest, rows: list[Peer], *, root: bool) -> None:
        """Tell the joiner what we know: `rows` of our table and, as its root, our leaf set."""
        joiner = msg.joiner
        leaf = [p for p in self.leaf.members() if p.id != joiner.id] if root else []
        # The joiner's capabilities as its request says: a join starts a new incarnation, maybe
        # of another version (rolled back) than we knew; a refresh, as the joined node told us.
        theirs = msg.caps if msg.caps is not None else self.caps.get(joiner.id, 0) if msg.refresh else 0
        info = JoinInfo.built(sender=self.me, candidates=rows, leaf_set=leaf, root=root)
        if theirs & self.capabilities & CAP_RTT:
            rtts = {"candidate_rtts": self._rtts_of(rows), "leaf_rtts": self._rtts_of(leaf)}
            info = info.model_copy(update=rtts)
        self._send(joiner.addr, info)

    def _forward_join(self, msg: JoinRequest, nxt: Peer, now: float, tried: set[int]) -> None:
        """Send a join request on to `nxt`. A joiner's request (not a refresh) waits for the hop's
        ack if the hop acks joins (CAP_JOIN_ACK) and fewer than MAX_JOIN_WAITS wait: one that
        does not ack in time is probed and the request routed around it (_join_hop_silent), as
        MSPastry routes its joins; else a dead table entry would swallow every retry of the
        joiner's (nobody probes table entries unless they are used). A hop that does not ack
        joins (an older version) and that we have not heard from lately is probed instead: the
        request may be lost, but once it is declared dead the joiner's next retry goes around it.
        (Both only from a node that announces CAP_JOIN_ACK itself: sim.mixed_ring runs older
        versions as this core without capabilities.)"""
        hops = msg.hops + 1
        if not msg.refresh and self._speaks(nxt.id, CAP_JOIN_ACK) and self._join_waits < MAX_JOIN_WAITS:
            self._nonce += 1
            onward = JoinRequest.built(joiner=msg.joiner, hops=hops, caps=msg.caps, via=self.me,
                                       hop_nonce=self._nonce)  # fmt: skip
            self._hops[self._nonce] = _HopWait(onward, nxt, now, tried)
            self._join_waits += 1
        else:
            caps = msg.caps if self._speaks(nxt.id, CAP_TOLERANT) else None
            onward = JoinRequest.built(joiner=msg.joiner, hops=hops, refresh=msg.refresh, caps=caps)
            silent = now - self.last_heard.get(nxt.id, -math.inf) > self.params.leaf_timeout
            if silent and not msg.refresh and self.capabilities & CAP_JOIN_ACK:
                self._probe(nxt, now, kind=SUSPECT)
        self._send(nxt.addr, onward)

    def _join_hop_silent(self, wait: _HopWait, msg: JoinRequest, now: float) -> None:
        """A forwarded join request's hop did not ack: probe it (declared dead if the probes fail
        too) and send the request to the next best hop, or answer it as the root if, without the
        silent hops, we are (a lost ack then gives the joiner a second root's answer, which it
        merges like any other)."""
        self._join_waits -= 1
        self._probe(self._record(wait.next_hop.id) or wait.next_hop, now, kind=SUSPECT)
        tried = wait.tried | {wait.next_hop.id}
        if len(tried) > self.params.max_reroutes:
            return
        joiner = msg.joiner.id
        nxt = self.next_hop(joiner, exclude=tried | {joiner}, rerouting=True, now=now)
        if nxt is None:
            self._answer_join(msg, [], root=True)
        else:
            self._forward_join(msg.model_copy(update={"hops": msg.hops - 1}), nxt, now, tried)

    def _on_join_info(self, msg: JoinInfo, now: float) -> None:
        self._consider(msg.sender, now, firsthand=True)
        if self._seed_keys or self._self_keys:
            key = _addr_key(msg.sender.addr)
            self._seeds_answered.update(self._seed_keys.get(key, ()), self._self_keys.get(key, ()))
        via = self.rtt.get(msg.sender.id)
        self._consider_all(msg.candidates, now, rtts=msg.candidate_rtts, via=via)
        self._consider_all(msg.leaf_set, now, rtts=msg.leaf_rtts, via=via)
        if msg.root and not self.joined:
            self._become_joined(now)
            for peer in self._known():
                self._send(peer.addr, Hello.built(sender=self.me, rtt=self._rtt_for(peer)))

    def _on_hello(self, msg: Hello, now: float) -> None:
        self._consider(msg.sender, now, firsthand=True, bound=msg.rtt or 0.0)

    def _on_leaf_request(self, msg: LeafSetRequest, now: float) -> None:
        self._send(msg.sender.addr, self._leaf_push(msg.sender))
        self._consider(msg.sender, now, firsthand=True, bound=msg.rtt or 0.0)

    def _on_leaf_push(self, msg: LeafSetPush, now: float) -> None:
        if self.table.contains(msg.sender.id):
            cw, ccw = _reaches(msg.sender.id, msg.leaf_set)
            self._entry_leaves[msg.sender.id] = (now, msg.leaf_set, self._own_arc(), cw, ccw)
        self._consider(msg.sender, now, firsthand=True)
        # A neighbour's set is all candidates for our leaf set and deep rows; a table entry's
        # (asked for lookahead) only fills empty slots: its members would all challenge one slot.
        via = self.rtt.get(msg.sender.id)
        self._consider_all(msg.leaf_set, now, measure=msg.sender.id in self.leaf, rtts=msg.rtts, via=via)
        if self.joined:
            self._check_push(msg.sender, msg.leaf_set, now)

    def _on_heartbeat(self, msg: Heartbeat, now: float) -> None:
        """The sender takes us for its nearest smaller neighbour; if we know a node between us,
        it does not: tell it."""
        self._consider(msg.sender, now, firsthand=True)
        if self.leaf.larger and self.leaf.larger[0].id != msg.sender.id:
            self._correct(msg.sender, now)

    def _on_row_request(self, msg: RowRequest, now: float) -> None:
        """Answer with the nodes we know that would sit in row `row` of the requester's table."""
        if 0 <= msg.row < self.table.rows:
            b, requester, row = self.params.b, msg.sender.id, msg.row
            # shared_prefix_len(p.id, requester) == row, inlined as a range of the XOR's bit
            # length (which is 0 for the requester itself, below the range): this runs for every
            # node we know, at every row request.
            shortest, longest = ID_BITS - b * (row + 1), ID_BITS - b * row
            fits = [p for p in self._known() if shortest < (p.id ^ requester).bit_length() <= longest]
            if shared_prefix_len(self.me.id, requester, b) == msg.row:
                fits.append(self.me)
            fits = fits[: 2 * self.table.cols]
            rtts = self._rtts_of(fits) if self._speaks(requester, CAP_RTT) else []
            self._send(msg.sender.addr, RowReply.built(sender=self.me, row=msg.row, entries=fits, rtts=rtts))
        self._consider(msg.sender, now, firsthand=True, bound=msg.rtt or 0.0)

    def _on_row_reply(self, msg: RowReply, now: float) -> None:
        self._consider(msg.sender, now, firsthand=True)
        self._consider_all(msg.entries, now, rtts=msg.rtts, via=self.rtt.get(msg.sender.id))

    def _route(self, msg: Route, now: float, tried: set[int] | None = None) -> None:
        tried = tried or set()
        nxt = self.next_hop(msg.key, exclude=tried, rerouting=bool(tried), now=now)
        if nxt is None:
            self._out.events.append(Delivered(msg.key, msg.payload, msg.origin, msg.hops))
            return
        payload: Message | None = msg.payload
        if self.forward_hook is not None and msg.origin.id != self.me.id and not tried:
            payload = self.forward_hook(msg.key, msg.payload, nxt)
            if payload is None:
                return
        self._nonce += 1
        make = Route.built if payload is msg.payload else Route  # (a payload the hook changed: validated)
        onward = make(key=msg.key, origin=msg.origin, payload=payload, hops=msg.hops + 1, via=self.me,
                      hop_nonce=self._nonce)  # fmt: skip
        self._hops[self._nonce] = _HopWait(onward, nxt, now, tried)
        self._send(nxt.addr, onward)

    def _expire_hops(self, now: float) -> None:
        for wait in _expired(self._hops, self.params.hop_timeout, now):
            if isinstance(wait.msg, JoinRequest):
                self._join_hop_silent(wait, wait.msg, now)
                continue
            silent = wait.next_hop.id
            suspected = self._suspected(silent)  # by another message's silence, or a failed probe
            # At our own record's address if we hold the node (the wait's may be a held leaf
            # set's claim, or one the node has left since): probed and resent there.
            hop = self._record(silent) or wait.next_hop
            self._probe(hop, now, kind=SUSPECT)  # declared dead only if the probes fail too
            tried = wait.tried | {silent}
            key = wait.msg.key
            first_silence = wait.resent == 0 and not suspected
            if (
                silent != key
                and silent not in self.dead
                and (
                    first_silence
                    or (
                        wait.resent < HOP_RESENDS
                        and self.next_hop(key, exclude=tried, rerouting=True, now=now) is None
                    )
                )
            ):
                # Sent to the same hop again, with the same nonce (it acks a copy it forwarded
                # already, and does not forward it twice): once, as a silent hop is most often a
                # lost message or ack, and routing around a live hop sends a copy along a detour;
                # up to HOP_RESENDS times where routing around it would deliver here, at a node
                # that is not the root if only the ack was lost. Not when the key is the silent
                # node's own id: such a message is about that node's absence (faultD's
                # manager_missing), and the next closest node must have it at once.
                nonce = wait.msg.hop_nonce
                self._hops[nonce] = _HopWait(wait.msg, hop, now, wait.tried, wait.resent + 1)
                self._send(hop.addr, wait.msg)
                continue
            held = self._entry_leaves
            for entry in [e for e, got in held.items() if any(p.id == silent for p in got[1])]:
                del held[entry]  # a lookahead that led to a silent node: asked for again at row maintenance
            if len(tried) <= self.params.max_reroutes:
                self._route(wait.msg.model_copy(update={"hops": wait.msg.hops - 1}), now, tried)

    def _on_route(self, msg: Route, now: float) -> None:
        via = msg.via
        if via is not None:
            self._heard(via, now)
            self._send(via.addr, RouteAck.built(sender=self.me, hop_nonce=msg.hop_nonce))
            if self._seen_route((via.id, msg.hop_nonce, msg.key), now):
                return  # a resend after a lost ack: acked again, forwarded once
        self._route(msg, now)

    def _seen_route(self, ident: tuple[int, int, int], now: float) -> bool:
        """Whether we forwarded (or delivered) this routed message already, within ROUTED_MEMORY
        hop timeouts; remembers it if not. Bounded by age and by ROUTED_LIMIT: a flood of
        distinct messages does not grow memory (at worst a late resend is forwarded twice)."""
        routed = self._routed
        if ident in routed:
            return True
        horizon = now - ROUTED_MEMORY * self.params.hop_timeout
        while routed:
            first = next(iter(routed))
            if routed[first] > horizon and len(routed) < ROUTED_LIMIT:
                break
            del routed[first]
        routed[ident] = now
        return False

    def _on_route_ack(self, msg: RouteAck, now: float) -> None:
        wait = self._hops.get(msg.hop_nonce)
        if wait is not None and wait.next_hop.id == msg.sender.id:
            del self._hops[msg.hop_nonce]
            if isinstance(wait.msg, JoinRequest):
                self._join_waits -= 1

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
                    onward = Broadcast.built(origin=msg.origin, seq=msg.seq, level=r + 1, payload=msg.payload)
                    self._send(peer.addr, onward)
                    self._used.add(peer.addr)


# The handler of each message type (OverlayNode.on_message). Outside the class, and typed
# Callable[..., None] as each handler takes its own message type: so that the module compiles
# (mypyc, docs/bench/build_compiled_sim.sh), whose classes' bodies cannot refer to their methods.
_HANDLERS: dict[type[Message], Callable[..., None]] = {
    Ping: OverlayNode._on_ping,
    Pong: OverlayNode._on_pong,
    JoinRequest: OverlayNode._on_join,
    JoinInfo: OverlayNode._on_join_info,
    Hello: OverlayNode._on_hello,
    LeafSetRequest: OverlayNode._on_leaf_request,
    LeafSetPush: OverlayNode._on_leaf_push,
    RowRequest: OverlayNode._on_row_request,
    RowReply: OverlayNode._on_row_reply,
    Route: OverlayNode._on_route,
    RouteAck: OverlayNode._on_route_ack,
    Direct: OverlayNode._on_direct,
    Broadcast: OverlayNode._on_broadcast,
    Heartbeat: OverlayNode._on_heartbeat,
}
_WITH_SENDER = frozenset(t for t in _HANDLERS if "sender" in t.model_fields)  # (see on_message)

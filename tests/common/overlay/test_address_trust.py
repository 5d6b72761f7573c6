"""A node's address is its own word (issue 18, hostile peers): a ring member that names another
node at a false address, in a leaf-set push, a row reply or a join info, must not redirect that
node for us (our leaf set and table would send its traffic, and our probes, to the false address,
and the silence there would get the live node declared dead). The claim is probed; the node's
own messages, or its answer at the new address, move it. One node fed messages and timers, its
peers played by the test."""

from __future__ import annotations

import random
import time

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from common.overlay.certs import CertificateAuthority, public_key_of
from common.overlay.claims import ClaimChecker
from common.overlay.identity import NodeIdentity, TrustStore
from common.overlay.messages import (
    Hello,
    JoinInfo,
    LeafSetPush,
    Message,
    Peer,
    Ping,
    Pong,
    Route,
    RouteAck,
    RowReply,
)
from common.overlay.node import LeafSetChanged, Output, OverlayNode
from tests.common.overlay.small_ring import LEFT, ME, PARAMS, RIGHT, Note

TABLE = Peer(id=(0xA << 124) | 5, addr="table")  # a routing-table entry only (row 0, digit A)
LIAR = Peer(id=(0xC << 124) | 5, addr="liar")  # a ring member with a valid key, and a table entry
EVIL = "nowhere:1"  # where the liar says the others are: nothing answers there


def at(peer: Peer, addr: str) -> Peer:
    return Peer(id=peer.id, addr=addr)


def lies(now: float) -> list[Message]:
    """The liar's messages: LEFT, RIGHT and TABLE at EVIL, in each kind that offers nodes."""
    named = [at(LEFT, EVIL), at(RIGHT, EVIL), at(TABLE, EVIL)]
    return [
        LeafSetPush(sender=LIAR, leaf_set=named),
        RowReply(sender=LIAR, row=0, entries=named),
        RowReply(sender=LIAR, row=4, entries=named),
        JoinInfo(sender=LIAR, candidates=named, leaf_set=named),
    ]


class Ring:
    """ME among peers the test plays: each live one answers pings and acks routed hops at the
    address it lives at (`live`); nothing answers anywhere else."""

    def __init__(self, *others: Peer) -> None:
        self.node = OverlayNode(ME, PARAMS, random.Random(1))
        self.node.start(0.0)
        self.live = {p.addr: p for p in (LEFT, RIGHT, TABLE, LIAR, *others)}
        self.sent: list[tuple[float, str, Message]] = []
        self.events: list[object] = []
        for peer in (LEFT, RIGHT, TABLE, LIAR, *others):
            self.take(self.node.on_message(Hello(sender=peer), 0.0), 0.0)
        assert {p.id for p in self.node.leaf.members()} == {LEFT.id, RIGHT.id}
        assert all(self.record(p) == p for p in (LEFT, RIGHT, TABLE, LIAR, *others))

    def record(self, peer: Peer) -> Peer | None:
        """Our node's entry for `peer`: its leaf set's, else its table's; None if neither."""
        node = self.node
        held = node.leaf.get(peer.id)
        if held is not None:
            return held
        slot = node.table.slot(peer.id)
        entry = None if slot is None else node.table.get(*slot)
        return entry if entry is not None and entry.id == peer.id else None

    def take(self, out: Output, now: float) -> None:
        self.events.extend(out.events)
        for addr, msg in out.sends:
            self.sent.append((now, addr, msg))
            peer = self.live.get(addr)
            if peer is None:
                continue
            back = now + 0.02
            if isinstance(msg, Ping):
                self.take(self.node.on_message(Pong(sender=peer, nonce=msg.nonce, sent=msg.sent), back), back)
            elif isinstance(msg, Route):
                self.take(self.node.on_message(RouteAck(sender=peer, hop_nonce=msg.hop_nonce), back), back)

    def run(self, start: float, end: float, *, lying: bool = True) -> None:
        """Timers from `start` to `end`, the liar repeating its lies every 5 s. The honest peers
        only answer (their heartbeats lost, say): what keeps them in our tables is our probes."""
        t = start
        while t < end:
            if lying and t % 5.0 == 0.0:
                for msg in lies(t):
                    self.take(self.node.on_message(msg, t), t)
            self.take(self.node.on_timer(t), t)
            t += 0.5

    def sent_to(self, addr: str, kind: type[Message], since: float = 0.0) -> list[Message]:
        return [m for t, a, m in self.sent if a == addr and isinstance(m, kind) and t >= since]


def test_a_signed_push_naming_another_node_at_a_false_address_passes_the_drivers_checks() -> None:
    """Why the core must judge it: the UDP driver checks a message's own sender (its id and host
    against the signer's certificate), not the nodes it names, which come with no certificate."""
    ca = CertificateAuthority(Ed25519PrivateKey.generate())
    now = time.time()

    def identity(name: str, host: str, node_id: int) -> NodeIdentity:
        key = Ed25519PrivateKey.generate()
        cert = ca.issue(ring="poold", node_name=name, node_id=node_id, pool=name, hosts=[host],
                        public_key=public_key_of(key), not_before=now - 10, not_after=now + 8e4)  # fmt: skip
        return NodeIdentity(key, cert, TrustStore(ca.private.public_key(), "poold", frozenset()))

    me, liar = identity("me", "10.0.0.1", ME.id), identity("liar", "10.0.0.9", LIAR.id)
    sender = Peer(id=LIAR.id, addr="10.0.0.9:7640")
    push = LeafSetPush(sender=sender, leaf_set=[Peer(id=RIGHT.id, addr="10.0.0.9:7641")])
    checker = ClaimChecker(me)
    assert checker.accept(push, liar.cert, now, "10.0.0.9:7640")
    assert not checker.drops  # (and the ring key's seal: the liar is a member, it has the key)


def test_a_liar_cannot_redirect_a_leaf_member_or_a_table_entry_nor_get_them_declared_dead() -> None:
    ring = Ring()
    node = ring.node
    for msg in lies(1.0):
        ring.take(node.on_message(msg, 1.0), 1.0)
    # Our records stay; the claims are probed (as a candidate address: nothing answers there).
    for peer in (LEFT, RIGHT, TABLE):
        assert ring.record(peer) == peer
    assert ring.sent_to(EVIL, Ping)
    # Our traffic goes to the true addresses: heartbeats to LEFT, a routed message to TABLE.
    ring.take(node.route(TABLE.id | 1, Note(n=1), 2.0), 2.0)
    assert ring.sent_to(TABLE.addr, Route) and not ring.sent_to(EVIL, Route)
    # Minutes of lies and timers: the watch, the sweeps and the failed probes of EVIL declare
    # nobody dead; RIGHT is probed (watched) at its own address, and answers.
    ring.run(2.5, 300.0)
    for peer in (LEFT, RIGHT, TABLE):
        assert ring.record(peer) == peer
        assert peer.id not in node.dead and peer.id not in node._departed
    assert ring.sent_to(RIGHT.addr, Ping, since=20.0)
    assert ring.sent_to(LEFT.addr, Message, since=200.0)  # heartbeats
    assert not ring.sent_to(EVIL, Route) and not ring.sent_to(EVIL, LeafSetPush)


def test_lookahead_sends_a_member_we_know_to_our_own_address_not_the_held_sets() -> None:
    """A table entry's leaf set we hold (lookahead) names a node we hold at a false address: a
    lookup the lookahead sends to that node goes to our record's address."""
    # Ids near 0xB0..: LEFT and RIGHT span 2^121 of the ring (the liar's set must span at most
    # LOOKAHEAD_ARC times that), the liar holds slot (1, 5), M slot (1, 6), and the key sits
    # just below M, across the digit boundary: M is closer to it than the liar.
    me = Peer(id=0xB0 << 120, addr="me")
    left, right = Peer(id=(0xAF << 120) | 1, addr="left"), Peer(id=(0xB1 << 120) | 1, addr="right")
    liar = Peer(id=(0xB5 << 120) | 1, addr="liar")
    m = Peer(id=(0xB6 << 120) | 1, addr="m")
    key = (0xB6 << 120) - 1
    node = OverlayNode(me, PARAMS, random.Random(1))
    node.start(0.0)
    for peer in (left, right, liar, m):
        node.on_message(Hello(sender=peer), 0.0)
    assert node.table.get(1, 5) == liar and node.table.get(1, 6) == m
    held = [Peer(id=(0xB4 << 120) | 1, addr="b4"), at(m, EVIL)]
    node.on_message(LeafSetPush(sender=liar, leaf_set=held), 1.0)
    assert liar.id in node._entry_leaves and node.table.get(1, 6) == m
    out = node.route(key, Note(n=2), 2.0)
    assert [(a, type(msg)) for a, msg in out.sends if isinstance(msg, Route)] == [(m.addr, Route)]


def test_a_silent_hop_is_probed_and_resent_at_our_records_address() -> None:
    """A lookahead hop taken at a held set's address (a node we did not know then), learnt
    first-hand at its own address before the hop timed out: the hop is probed and the message
    resent there, and the node, which answers, is not declared dead."""
    me = Peer(id=0xB0 << 120, addr="me")
    left, right = Peer(id=(0xAF << 120) | 1, addr="left"), Peer(id=(0xB1 << 120) | 1, addr="right")
    liar = Peer(id=(0xB5 << 120) | 1, addr="liar")
    m = Peer(id=(0xB6 << 120) | 1, addr="m")
    node = OverlayNode(me, PARAMS, random.Random(1))
    node.start(0.0)
    for peer in (left, right, liar):
        node.on_message(Hello(sender=peer), 0.0)
    node.on_message(
        LeafSetPush(sender=liar, leaf_set=[Peer(id=(0xB4 << 120) | 1, addr="b4"), at(m, EVIL)]), 1.0
    )
    out = node.route((0xB6 << 120) - 1, Note(n=3), 2.0)
    assert [a for a, msg in out.sends if isinstance(msg, Route)] == [EVIL]  # the best we knew of it
    node.on_message(Hello(sender=m), 2.5)  # its own word
    now, sent = 2.5, []
    while now < 40.0:
        now += 0.5
        for addr, msg in node.on_timer(now).sends:
            sent.append((addr, msg))
            if addr == m.addr and isinstance(msg, Ping):
                node.on_message(Pong(sender=m, nonce=msg.nonce, sent=msg.sent), now + 0.02)
            if addr == m.addr and isinstance(msg, Route):
                node.on_message(RouteAck(sender=m, hop_nonce=msg.hop_nonce), now + 0.02)
    assert (m.addr, Route) in [(a, type(msg)) for a, msg in sent]  # resent at its own address
    assert not [a for a, msg in sent if a == EVIL and isinstance(msg, Ping)]
    assert node.table.get(1, 6) == m and m.id not in node.dead and m.id not in node._departed


def test_a_node_that_moved_is_learnt_from_its_own_word() -> None:
    """RIGHT restarted at another address: its first message (hello, ping, heartbeat...) moves
    it in our leaf set and table, and the application hears of the leaf set's change."""
    ring = Ring()
    node = ring.node
    moved = at(RIGHT, "right-again")
    ring.live[moved.addr] = moved
    del ring.live[RIGHT.addr]
    ring.events.clear()
    ring.take(node.on_message(Ping(sender=moved, nonce=7, sent=10.0), 10.0), 10.0)
    assert node.leaf.get(RIGHT.id) == moved
    slot = node.table.slot(RIGHT.id)
    assert slot is not None and node.table.get(*slot) == moved
    assert any(isinstance(e, LeafSetChanged) and moved in e.members for e in ring.events)
    ring.run(10.5, 100.0, lying=False)
    assert node.leaf.get(RIGHT.id) == moved and RIGHT.id not in node.dead


def test_a_node_that_moved_is_learnt_second_hand_once_it_answers_there() -> None:
    """Told by another node that TABLE (which never writes to us) is now elsewhere: our record
    stays until TABLE answers our probe at the new address, then moves."""
    ring = Ring()
    node = ring.node
    moved = at(TABLE, "table-again")
    del ring.live[TABLE.addr]
    out = node.on_message(RowReply(sender=LEFT, row=0, entries=[moved]), 10.0)
    assert ring.record(TABLE) == TABLE  # not yet: only LEFT's word
    probes = [msg for addr, msg in out.sends if addr == moved.addr and isinstance(msg, Ping)]
    assert len(probes) == 1
    node.on_message(Pong(sender=moved, nonce=probes[0].nonce, sent=probes[0].sent), 10.05)
    assert ring.record(TABLE) == moved
    ring.live[moved.addr] = moved
    ring.take(node.route(TABLE.id | 1, Note(n=4), 11.0), 11.0)
    assert ring.sent_to(moved.addr, Route, since=11.0)


def test_a_suspicion_of_our_record_takes_over_a_probe_of_a_claimed_address() -> None:
    """One probe per node at a time: while one of RIGHT at a liar's address is out, the watch
    suspects RIGHT; the suspicion probes RIGHT at our record's address (where it answers), so
    that the claimed address's silence cannot count against RIGHT."""
    ring = Ring()
    node = ring.node
    ring.run(0.5, 20.0, lying=False)
    # RIGHT (which only answers probes) is due to be suspected then:
    t = max(node._timers["watch"], node.last_heard[RIGHT.id] + PARAMS.leaf_timeout)
    ring.take(node.on_message(LeafSetPush(sender=LIAR, leaf_set=[at(RIGHT, EVIL)]), t), t)
    assert ring.sent_to(EVIL, Ping, since=t) and not ring.sent_to(RIGHT.addr, Ping, since=t)
    ring.take(node.on_timer(t), t)
    assert ring.sent_to(RIGHT.addr, Ping, since=t)
    ring.run(t + 0.5, t + 30.0, lying=False)
    assert ring.record(RIGHT) == RIGHT and RIGHT.id not in node.dead

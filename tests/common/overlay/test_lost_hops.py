"""Routed messages under loss (issue 18): a silent hop is sent the same message again before it is
routed around, and a hop acks a copy it forwarded already without forwarding it twice. Routing
around a live hop whose ack was lost delivered a second copy along a detour (at 1 % loss 2 % of
lookups, which doubled their path). One node fed messages and timers, its peers played by the test."""

from __future__ import annotations

import random

from common.overlay.messages import Hello, Peer, Ping, Pong, Route, RouteAck
from common.overlay.node import ROUTED_LIMIT, Delivered, Output, OverlayNode
from tests.common.overlay.small_ring import LEFT, ME, PARAMS, RIGHT, Note

A = Peer(id=(0xA << 124) | 5, addr="a")  # row 0 of ME's table
B = Peer(id=(0xB << 124) | 5, addr="b")  # row 0 too, and nearer to A's keys than ME


def node_with_table() -> OverlayNode:
    node = OverlayNode(ME, PARAMS, random.Random(1))
    node.start(0.0)
    peers = {p.addr: p for p in (LEFT, RIGHT, A, B)}
    for peer in peers.values():
        for addr, msg in node.on_message(Hello(sender=peer), 0.0).sends:
            if isinstance(msg, Ping):  # answered: measured, and not suspected later
                node.on_message(Pong(sender=peers[addr], nonce=msg.nonce, sent=msg.sent), 0.05)
    assert node.table.contains(A.id) and node.table.contains(B.id)
    return node


def routes(out: Output) -> list[tuple[str, Route]]:
    return [(addr, msg) for addr, msg in out.sends if isinstance(msg, Route)]


def test_a_silent_hop_gets_the_same_message_again_before_it_is_routed_around() -> None:
    node = node_with_table()
    key = A.id + 2
    hop = PARAMS.hop_timeout
    [(addr, first)] = routes(node.route(key, Note(n=1), 10.0))
    assert addr == A.addr
    # Silent once: most likely a lost message or ack. Sent to A again, as the same hop message
    # (A acks a copy it forwarded already without forwarding it twice), not to B along a detour.
    [(addr, again)] = routes(node.on_timer(10.0 + hop))
    assert (addr, again.hop_nonce) == (A.addr, first.hop_nonce)
    # Silent twice: routed around A.
    [(addr, around)] = routes(node.on_timer(10.0 + 2 * hop))
    assert addr != A.addr and around.key == key


def test_a_resend_that_got_its_ack_stops_there() -> None:
    node = node_with_table()
    hop = PARAMS.hop_timeout
    [(_, first)] = routes(node.route(A.id + 2, Note(n=2), 10.0))
    node.on_timer(10.0 + hop)  # the resend
    node.on_message(RouteAck(sender=A, hop_nonce=first.hop_nonce), 10.0 + hop + 0.1)
    assert not routes(node.on_timer(10.0 + 3 * hop))


def test_a_hop_acks_a_copy_it_forwarded_already_and_does_not_forward_or_deliver_it_twice() -> None:
    node = node_with_table()
    onward = Route(key=A.id + 2, origin=LEFT, payload=Note(n=3), hops=1, via=LEFT, hop_nonce=7)
    out = node.on_message(onward, 20.0)
    assert [a for a, _ in routes(out)] == [A.addr]
    out = node.on_message(onward, 21.0)  # our ack was lost: LEFT sent it again
    assert [(a, type(m)) for a, m in out.sends] == [(LEFT.addr, RouteAck)]
    # At the root likewise: delivered once.
    here = Route(key=ME.id + 1, origin=LEFT, payload=Note(n=4), hops=1, via=LEFT, hop_nonce=8)
    first = node.on_message(here, 22.0)
    second = node.on_message(here, 23.0)
    assert [type(e) for e in first.events] == [Delivered]
    assert not second.events and [type(m) for _, m in second.sends] == [RouteAck]
    # Another message (another hop nonce) is forwarded as usual.
    other = onward.model_copy(update={"hop_nonce": 9})
    assert [a for a, _ in routes(node.on_message(other, 23.0))] == [A.addr]


def test_the_memory_of_forwarded_messages_is_bounded_by_age_and_size() -> None:
    """A flood of distinct routed messages (a hostile peer) does not grow a node's memory."""
    node = node_with_table()
    for nonce in range(3 * ROUTED_LIMIT):
        msg = Route(key=A.id + 2, origin=LEFT, payload=Note(n=nonce), hops=1, via=LEFT, hop_nonce=nonce)
        node.on_message(msg, 30.0)
        assert len(node._routed) <= ROUTED_LIMIT
    late = Route(key=A.id + 2, origin=LEFT, payload=Note(n=0), hops=1, via=RIGHT, hop_nonce=1)
    node.on_message(late, 60.0)  # long after: the old ones are forgotten
    assert len(node._routed) == 1


def test_a_pong_that_echoes_a_later_send_time_does_not_make_its_sender_look_nearer() -> None:
    """The round-trip time comes from our own record of the ping: a lying peer cannot make us
    store a false (smaller) RTT and win table slots with it."""
    node = node_with_table()
    liar = Peer(id=(0xC << 124) | 5, addr="liar")
    out = node.on_message(Hello(sender=liar), 40.0)
    [ping] = [m for a, m in out.sends if a == liar.addr and isinstance(m, Ping)]
    node.on_message(Pong(sender=liar, nonce=ping.nonce, sent=ping.sent + 0.299), 40.3)
    assert node.rtt[liar.id] >= 0.299


def test_pongs_sent_ahead_for_predicted_nonces_do_not_make_their_sender_look_nearer() -> None:
    """A peer that saw one of our nonces answers the pings that would follow before they exist:
    none matches (the nonce has random bits, as the UDP driver sets up), and its RTT is the real
    round trip."""
    node = node_with_table()
    node._nonce_rng = random.Random(7)  # (the driver's: OverlayNode's nonce_rng)
    scout = Peer(id=(0xC << 124) | 5, addr="scout")
    liar = Peer(id=(0xD << 124) | 5, addr="liar")
    out = node.on_message(Hello(sender=scout), 40.0)
    [seen] = [m for a, m in out.sends if a == scout.addr and isinstance(m, Ping)]
    out = node.on_message(Hello(sender=liar), 41.0)
    [ping] = [m for a, m in out.sends if a == liar.addr and isinstance(m, Ping)]
    for ahead in range(1, 64):  # every counter value that could follow, with the seen high bits
        node.on_message(Pong(sender=liar, nonce=seen.nonce + ahead, sent=ping.sent), 41.001)
    assert liar.id not in node.rtt
    node.on_message(Pong(sender=liar, nonce=ping.nonce, sent=ping.sent), 41.3)
    assert abs(node.rtt[liar.id] - 0.3) < 1e-9


def test_a_hop_already_suspected_is_routed_around_at_once() -> None:
    """A second message silent at the same hop is not sent there again: the first one's silence
    made it a suspect (probed), and waiting another hop timeout on it would only delay this one."""
    node = node_with_table()
    hop = PARAMS.hop_timeout
    assert [addr for addr, _ in routes(node.route(A.id + 2, Note(n=5), 10.0))] == [A.addr]
    assert [addr for addr, _ in routes(node.route(A.id + 3, Note(n=6), 10.0))] == [A.addr]
    sent = {msg.payload.n: addr for addr, msg in routes(node.on_timer(10.0 + hop))}  # type: ignore[attr-defined]
    assert sent[5] == A.addr  # the first silence: sent to A again
    assert sent[6] not in (A.addr, None)  # A suspected by then: routed around it

"""Liveness and repair rules of the pure core (issue 18), one node fed messages and timers."""

from __future__ import annotations

import random

from common.overlay.messages import (
    AppMessage,
    Heartbeat,
    Hello,
    LeafSetRequest,
    Peer,
    Ping,
    Pong,
    Route,
    RowReply,
    app_message,
)
from common.overlay.node import (
    HOP_RESENDS,
    LEAF_REPAIR_RETRIES,
    Delivered,
    Output,
    OverlayNode,
    OverlayParams,
)


@app_message
class Note(AppMessage):
    TYPE = "test.maintenance.note"
    n: int


ME = Peer(id=1000, addr="me")
RIGHT = Peer(id=2000, addr="right")  # our nearest larger neighbour


def founded_with_right_neighbour() -> OverlayNode:
    node = OverlayNode(ME, OverlayParams(), random.Random(1))
    node.start(0.0)
    node.on_message(Hello(sender=RIGHT), 0.0)  # first-hand: straight into the leaf set
    assert RIGHT.id in node.leaf
    return node


def sends_of(out: Output, kind: type) -> list[tuple[str, object]]:
    return [(addr, msg) for addr, msg in out.sends if isinstance(msg, kind)]


def test_watching_a_neighbour_at_the_float_edge_does_not_wake_at_the_same_instant() -> None:
    """`now - since < timeout` can hold while `since + timeout == now`; the watch then asked to be
    woken at `now` again, forever (the simulator hung at 2 % loss)."""
    node = founded_with_right_neighbour()
    node.on_timer(1.0)  # starts watching RIGHT
    heard = 31.989011570781432
    due = heard + 15.0
    assert due - heard < 15.0  # the edge itself
    node.on_message(Heartbeat(sender=RIGHT), heard)
    out = node.on_timer(due)
    assert out.wakeup is not None and out.wakeup > due


def test_a_node_heard_of_second_hand_enters_the_table_only_once_it_answers() -> None:
    """Unused table entries are never probed, so a teller's table may list a dead node: it must
    not spread."""
    node = founded_with_right_neighbour()
    other = Peer(id=(0xA << 124) | 5, addr="other")  # row 0: another first digit than ours
    out = node.on_message(RowReply(sender=RIGHT, row=0, entries=[other]), 5.0)
    assert other.id not in {p.id for p in node.known()}
    [ping] = [m for a, m in sends_of(out, Ping) if a == other.addr]
    assert isinstance(ping, Ping)
    node.on_message(Pong(sender=other, nonce=ping.nonce, sent=ping.sent), 5.1)
    assert node.table.contains(other.id)


def test_a_lost_ack_on_the_last_hop_sends_it_again_before_delivering_here() -> None:
    """Without the silent hop we would be the root; if only the ack was lost, delivering here
    would deliver the message at a node that is not its root."""
    node = founded_with_right_neighbour()
    key = RIGHT.id - 50  # RIGHT is the root
    hop = node.params.hop_timeout
    out = node.route(key, Note(n=1), 10.0)
    assert [a for a, _ in sends_of(out, Route)] == [RIGHT.addr]
    for k in range(1, HOP_RESENDS + 1):
        out = node.on_timer(10.0 + k * hop)
        assert [a for a, _ in sends_of(out, Route)] == [RIGHT.addr]
        assert not [e for e in out.events if isinstance(e, Delivered)]
    out = node.on_timer(10.0 + (HOP_RESENDS + 1) * hop)
    assert [e.key for e in out.events if isinstance(e, Delivered)] == [key]


def test_a_message_keyed_to_the_silent_node_itself_is_delivered_here_at_once() -> None:
    """faultD's manager_missing is keyed to the silent manager's id: the next closest node takes
    it after one hop timeout, as before."""
    node = founded_with_right_neighbour()
    node.route(RIGHT.id, Note(n=2), 10.0)
    out = node.on_timer(10.0 + node.params.hop_timeout)
    assert [e.key for e in out.events if isinstance(e, Delivered)] == [RIGHT.id]
    assert not sends_of(out, Route)


def test_a_short_leaf_set_asks_again_for_replacements_a_bounded_number_of_times() -> None:
    """A leaf-set request after a death, or its answer, may be lost, and the next leaf exchange
    may be minutes away: asked again, a fixed number of times."""
    node = founded_with_right_neighbour()
    left = Peer(id=500, addr="left")
    node.on_message(Hello(sender=left), 0.0)
    requests, dead_at, t = [], None, 0.0
    while t < 50.0:  # RIGHT is silent from the start; row maintenance begins after 54 s
        node.on_message(Heartbeat(sender=left), t)  # LEFT stays heard
        out = node.on_timer(t)
        if dead_at is None and RIGHT.id not in node.leaf:
            dead_at = t
        requests += [t for _, m in sends_of(out, LeafSetRequest)]
        assert out.wakeup is not None and out.wakeup > t
        t = min(out.wakeup, t + 1.0)
    assert dead_at is not None
    assert len([r for r in requests if r >= dead_at]) == 1 + LEAF_REPAIR_RETRIES

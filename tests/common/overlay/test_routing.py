"""Routing properties of the pure core: no network, no clock."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from common.overlay.ids import ID_SPACE, closeness, cw_distance, digit, node_id_from_name, shared_prefix_len
from common.overlay.leafset import LeafSet
from common.overlay.messages import LeafSetPush, LeafSetRequest, Peer, Ping, Pong, RowRequest
from common.overlay.node import OverlayNode, OverlayParams
from common.overlay.table import RoutingTable

ids_strategy = st.lists(
    st.integers(min_value=0, max_value=ID_SPACE - 1), min_size=1, max_size=80, unique=True
)


def fully_informed_ring(ids: list[int], params: OverlayParams) -> dict[int, OverlayNode]:
    """Every node has learned of every other (what a converged ring approximates)."""
    nodes = {i: OverlayNode(Peer(id=i, addr=f"n{i:x}"), params, random.Random(i)) for i in ids}
    peers = [n.me for n in nodes.values()]
    for node in nodes.values():
        node.start(0.0)
        for p in peers:
            node._consider(p, 0.0, firsthand=True)
        node._flush()
    return nodes


def walk(nodes: dict[int, OverlayNode], src: int, key: int) -> tuple[int, int]:
    here, hops = src, 0
    while (nxt := nodes[here].next_hop(key)) is not None:
        here, hops = nxt.id, hops + 1
        assert hops <= len(nodes), "routing loop"
    return here, hops


@settings(max_examples=150, deadline=None)
@given(
    ids_strategy,
    st.lists(st.integers(min_value=0, max_value=ID_SPACE - 1), min_size=1, max_size=20),
    st.data(),
)
def test_routing_ends_at_numerically_closest_node(
    ids: list[int], keys: list[int], data: st.DataObject
) -> None:
    nodes = fully_informed_ring(ids, OverlayParams(leaf_set_size=8))
    for key in keys:
        src = data.draw(st.sampled_from(ids))
        root, hops = walk(nodes, src, key)
        assert root == min(ids, key=lambda i: closeness(key, i))
        assert hops <= 32 + 1  # one digit per hop at worst, plus the leaf-set step


@settings(max_examples=150, deadline=None)
@given(ids_strategy)
def test_leaf_set_holds_exactly_the_closest_on_each_side(ids: list[int]) -> None:
    me, others = ids[0], ids[1:]
    leaf = LeafSet(Peer(id=me, addr="me"), 8)
    for i in random.Random(len(ids)).sample(others, len(others)):
        leaf.add(Peer(id=i, addr=f"n{i}"))
    assert [p.id for p in leaf.larger] == sorted(others, key=lambda x: cw_distance(me, x))[:4]
    assert [p.id for p in leaf.smaller] == sorted(others, key=lambda x: cw_distance(x, me))[:4]


def test_ids_and_digits() -> None:
    a = node_id_from_name("poolA")
    assert a == node_id_from_name("poolA") and 0 <= a < ID_SPACE
    assert shared_prefix_len(a, a, 4) == 32
    x = 0xABC << 116
    assert [digit(x, r, 4) for r in range(4)] == [0xA, 0xB, 0xC, 0]
    assert shared_prefix_len(0xAB << 120, 0xAC << 120, 4) == 1
    assert closeness(10, ID_SPACE - 5) < closeness(10, 30)  # the id space is a ring


def learn(node: OverlayNode, peer: Peer, now: float) -> list:
    """The node hears of a peer second-hand (as from a row reply); returns what it sends."""
    node._consider(peer, now)
    return node._flush().sends


def test_routing_table_prefers_lower_rtt_for_the_same_slot() -> None:
    """Proximity neighbour selection: a candidate for an occupied slot is probed, and replaces
    the entry only if its measured round-trip time is lower."""
    node = OverlayNode(Peer(id=0x1 << 124, addr="me"), OverlayParams(), random.Random(0))
    node.start(0.0)
    far = Peer(id=0x5 << 124, addr="far")
    near = Peer(id=(0x5 << 124) + 1, addr="near")
    slower = Peer(id=(0x5 << 124) + 2, addr="slower")

    def answer(peer: Peer, out_sends: list, now: float) -> None:
        ping = next(m for a, m in out_sends if a == peer.addr and isinstance(m, Ping))
        node.on_message(Pong(sender=peer, nonce=ping.nonce, sent=ping.sent), now)

    answer(far, learn(node, far, 0.0), 0.200)  # empty slot: taken, RTT 0.2
    assert node.table.get(0, 5) == far
    answer(slower, learn(node, slower, 1.0), 1.300)  # RTT 0.3: stays a candidate
    assert node.table.get(0, 5) == far
    answer(near, learn(node, near, 2.0), 2.050)  # RTT 0.05: replaces
    assert node.table.get(0, 5) == near


def test_used_rows_follows_every_change_of_the_table() -> None:
    """used_rows() is remembered between changes; set and remove must both refresh it."""
    table = RoutingTable(Peer(id=0, addr="me"), b=4)
    assert table.used_rows() == 0
    deep = Peer(id=0x0003 << 112, addr="deep")  # shares 3 digits with us: row 3
    table.set(*table.slot(deep.id), deep)
    assert table.used_rows() == 4
    table.set(0, 1, Peer(id=0x1 << 124, addr="shallow"))
    assert table.used_rows() == 4
    assert table.remove(deep.id) == (3, 3)
    assert table.used_rows() == 1
    table.set(0, 1, None)
    assert table.used_rows() == 0


def _node_with_held_set(growth: int) -> tuple[OverlayNode, Peer, int]:
    """A joined node whose leaf set spans 16 nodes `gap` apart, and one table entry far away
    whose leaf set (16 nodes `gap` apart) it holds (lookahead), received when its own leaf set's
    nodes were `growth` times farther apart (the ring has grown since); and a key that set
    spans, next to its member entry + 3 * gap."""
    gap = 1 << 100
    me = Peer(id=0x1 << 124, addr="me")
    node = OverlayNode(me, OverlayParams(), random.Random(0))
    node.start(0.0)

    def neighbours(spacing: int) -> None:
        for k in range(1, 9):
            for pid in (me.id + k * spacing, me.id - k * spacing):
                node._consider(Peer(id=pid, addr=f"n{pid:x}"), 0.0, firsthand=True)

    neighbours(growth * gap)
    entry = Peer(id=0x9 << 124, addr="entry")
    node._consider(entry, 0.0, firsthand=True)
    held = [Peer(id=entry.id + s * k * gap, addr=f"h{s * k}") for k in range(1, 9) for s in (1, -1)]
    node.on_message(LeafSetPush(sender=entry, leaf_set=held), 0.0)
    neighbours(gap)  # (with growth 1: the same nodes again)
    node._flush()
    return node, entry, entry.id + 3 * gap + 1


def _asked_for_leaf_set(node: OverlayNode, entry: Peer, now: float) -> bool:
    node._row_maintenance(now)
    return any(a == entry.addr and isinstance(m, LeafSetRequest) for a, m in node._flush().sends)


def test_lookahead_goes_to_the_root_through_a_held_leaf_set() -> None:
    """A held leaf set that spans the key: the lookahead skips the hop through the entry,
    straight to the set's member closest to the key. While the ring keeps its size, the set is
    asked for again only `max_backoff` row intervals after it came. (The key's own slot entry's
    set: this held before any entry's set was used; here, the control for RING_GROWTH.)"""
    node, entry, key = _node_with_held_set(1)
    assert node.next_hop(key).addr == "h3"
    assert not _asked_for_leaf_set(node, entry, 61.0)
    assert _asked_for_leaf_set(node, entry, 60.0 * 8)


def test_a_held_leaf_set_is_not_used_once_its_entry_left_the_table() -> None:
    """The set of an entry declared dead, or replaced by a nearer node, is no longer refreshed:
    lookups do not follow it (the key's slot is used instead)."""
    node, entry, key = _node_with_held_set(1)
    node.table.remove(entry.id)  # as a nearer node taking its slot does (_on_pong)
    assert node.next_hop(key).addr != "h3"
    node, entry, key = _node_with_held_set(1)
    node._declare_dead(entry, 1.0)
    assert entry.id not in node._entry_leaves
    assert node.next_hop(key).addr != "h3"


def test_a_held_leaf_set_from_a_sparser_ring_is_asked_for_again_a_row_interval_later() -> None:
    """A held set that came while our own leaf set spanned twice the arc it spans now: the ring
    has grown since, and the entry's set likely misses nodes that joined near it (its member
    closest to a key may not be the root). Row maintenance asks the entry for it again a row
    interval after it came; meanwhile it is still used (its member is at least near the root)."""
    node, entry, key = _node_with_held_set(2)
    assert node.next_hop(key).addr == "h3"
    assert not _asked_for_leaf_set(node, entry, 30.0)
    assert _asked_for_leaf_set(node, entry, 61.0)


def test_row_maintenance_asks_near_members_of_row_zero_for_their_row_zero() -> None:
    """Row 0's slots have the most candidates, and its hop starts nearly every lookup: besides a
    random member and our nearest node, row maintenance asks two of row 0's four nearest
    measured members for their row-0 nodes (nodes near us know the nodes near them)."""
    me = Peer(id=0x1 << 124, addr="me")
    node = OverlayNode(me, OverlayParams(), random.Random(0))
    node.start(0.0)
    row0 = [Peer(id=(c << 124) + 5, addr=f"c{c}") for c in range(2, 16)]
    for rank, p in enumerate(row0):
        node._consider(p, 0.0, firsthand=True)
        node.rtt[p.id] = 0.010 * (rank + 1)  # c2 the nearest, c5 the fourth nearest
    node._flush()
    nearest_four = {"c2", "c3", "c4", "c5"}
    seen: set[str] = set()
    for _ in range(20):  # rounds: the near members asked vary, always two of the four nearest
        node._row_maintenance(60.0)
        asked = {a for a, m in node._flush().sends if isinstance(m, RowRequest) and m.row == 0}
        assert len(asked & nearest_four) >= 2
        assert len(asked) <= 4  # two near members, a random one and our nearest node (maybe the same)
        seen |= asked & nearest_four
    assert seen == nearest_four


def test_lookahead_uses_any_held_leaf_set_that_spans_the_key() -> None:
    """The key (column 8 of row 0) sits just below a digit boundary, and the leaf set we hold of
    our column-9 entry, just above it, spans the key: its member closest to the key is the
    root, reached in one hop, not through the key's own slot (column 8). A set spanning far more
    than our own leaf set's arc (stale, or a liar's claim to know every root) is not used."""
    node, entry, _ = _node_with_held_set(1)
    gap = 1 << 100
    slot = Peer(id=(0x8 << 124) + 5, addr="slot")
    node._consider(slot, 0.0, firsthand=True)
    node._flush()
    key = entry.id - 3 * gap - 1
    assert node.table.get(0, 8) == slot
    assert node.next_hop(key).addr == "h-3"
    wide = [Peer(id=entry.id + s * k * (gap << 8), addr=f"w{s * k}") for k in range(1, 9) for s in (1, -1)]
    node.on_message(LeafSetPush(sender=entry, leaf_set=wide), 2.0)
    assert node.next_hop(key) == slot

"""Application hooks on the simulator: broadcast, row and leaf-set sends, per-hop forwarding."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

from common.overlay.messages import AppMessage, Peer, app_message
from common.overlay.node import BroadcastReceived, Delivered, Event, Received
from common.wire import Message
from sim.network import SimNetwork


@app_message
class Note(AppMessage):
    TYPE = "test.hooks.note"
    text: str


def small_ring(n: int, seed: int) -> tuple[SimNetwork, list[tuple[int, Event]]]:
    events: list[tuple[int, Event]] = []
    rng = random.Random(seed)
    net = SimNetwork(
        lambda a, b: 0.01 + 0.001 * abs(a - b), seed=seed, on_event=lambda i, e, t: events.append((i, e))
    )
    for i in range(n):
        net.add_node(i, rng.getrandbits(128), bootstrap=None if i == 0 else rng.randrange(i), at=i * 0.5)
    net.run_until(n * 0.5 + 120)
    events.clear()
    return net, events


def test_broadcast_reaches_every_other_node_exactly_once() -> None:
    net, events = small_ring(60, seed=4)
    net.broadcast(7, Note(text="alive"))
    net.run_until(net.now + 10)
    got = Counter(
        i for i, e in events if isinstance(e, BroadcastReceived) and e.payload == Note(text="alive")
    )
    assert got == Counter({i: 1 for i in range(60) if i != 7})
    assert all(e.origin.addr == "n7" for _, e in events if isinstance(e, BroadcastReceived))


def test_row_and_leaf_set_sends_reach_exactly_those_nodes() -> None:
    net, events = small_ring(40, seed=5)
    core = net.nodes[3].core
    row0 = {int(p.addr[1:]) for p in core.table.row(0)}
    net._apply(net.nodes[3], core.send_to_row(0, Note(text="row0")))
    leaf = {int(p.addr[1:]) for p in core.leaf.members()}
    net._apply(net.nodes[3], core.send_to_leaf_set(Note(text="leaf")))
    net.run_until(net.now + 5)
    received = [
        (i, e.payload.text) for i, e in events if isinstance(e, Received) and isinstance(e.payload, Note)
    ]
    assert {i for i, text in received if text == "row0"} == row0 and row0
    assert {i for i, text in received if text == "leaf"} == leaf and len(leaf) == 16
    assert all(e.sender.addr == "n3" for _, e in events if isinstance(e, Received))


def test_forward_hook_sees_each_hop_and_can_rewrite_or_stop() -> None:
    net, events = small_ring(200, seed=6)
    seen: list[tuple[int, str]] = []

    def hook_for(index: int) -> Callable[[int, Message, Peer], Message | None]:
        def hook(key: int, payload: Message, next_hop: Peer) -> Message | None:
            assert isinstance(payload, Note)
            seen.append((index, payload.text))
            if payload.text.endswith("stop"):
                return None
            return Note(text=payload.text + ">")

        return hook

    for index, node in net.nodes.items():
        node.core.forward_hook = hook_for(index)
    keys = [random.Random(k).getrandbits(128) for k in range(30)]
    for key in keys:
        net.route(0, key, Note(text="x"))
    net.run_until(net.now + 10)
    delivered = [e for _, e in events if isinstance(e, Delivered)]
    assert len(delivered) == len(keys)
    for d in delivered:  # each intermediate hop appended one '>'; the origin's send is not a hop
        assert isinstance(d.payload, Note) and d.payload.text == "x" + ">" * max(d.hops - 1, 0)
    assert len(seen) == sum(max(d.hops - 1, 0) for d in delivered)  # one hook call per forward

    # A key the origin's first hop must forward on: that hop's hook stops it, nothing is delivered.
    def forwarder(key: int) -> int | None:
        first = net.nodes[0].core.next_hop(key)
        if first is None or net.nodes[int(first.addr[1:])].core.next_hop(key) is None:
            return None
        return int(first.addr[1:])

    far_key, first_hop = next((k, hop) for k in keys if (hop := forwarder(k)) is not None)
    events.clear()
    seen.clear()
    net.route(0, far_key, Note(text="stop"))
    net.run_until(net.now + 10)
    assert seen == [(first_hop, "stop")]
    assert not [e for _, e in events if isinstance(e, Delivered)]

"""The core's fast paths (issue 18, simulator speed) decide exactly as the plain code: peers
considered in bulk, the cached listings of the table and of known nodes, the cached earliest
timer, the reused leaf push and the leaf set's inline distances."""

from __future__ import annotations

import random

from common.overlay.messages import CAPABILITIES, Hello, Peer, Ping, Pong
from common.overlay.node import OverlayNode, OverlayParams

ME = Peer(id=1 << 127, addr="me")


def stranger(rng: random.Random) -> Peer:
    """A random node, often close to ME in id (deep rows, leaf-set candidates)."""
    bits = rng.choice([128, 128, 124, 120, 116, 112, 100])
    return Peer(id=ME.id ^ rng.getrandbits(bits), addr=f"p{rng.getrandbits(24)}")


def grown_node(seed: int) -> tuple[OverlayNode, list[Peer]]:
    """A joined node with a full leaf set, a routing table and measured RTTs, built from a seeded
    history of first-hand hellos and answered probes (the same seed, the same node); and every
    peer it met (many measured but holding no slot: they lost to a nearer node)."""
    rng = random.Random(seed)
    met = []
    node = OverlayNode(ME, OverlayParams(), random.Random(seed))
    node.start(0.0)
    now = 1.0
    for _ in range(120):
        peer = stranger(rng)
        met.append(peer)
        out = node.on_message(Hello(sender=peer), now)
        for _addr, msg in out.sends:
            if isinstance(msg, Ping) and rng.random() < 0.8:  # some stay unmeasured
                rtt = rng.uniform(0.01, 0.3)
                node.on_message(Pong(sender=peer, nonce=msg.nonce, sent=msg.sent), now + rtt)
        now += 0.5
    return node, met


def offers(node: OverlayNode, met: list[Peer], rng: random.Random, now: float) -> list[Peer]:
    """Peers as pushes and replies name them: known ones, known ones at a new address, nodes met
    before, strangers, nodes remembered dead, and ourselves."""
    known = node.known()
    peers = []
    for _ in range(40):
        roll = rng.random()
        if roll < 0.3:
            peers.append(rng.choice(known))
        elif roll < 0.4:
            peers.append(Peer(id=rng.choice(known).id, addr=f"moved{rng.getrandbits(16)}"))
        elif roll < 0.65:
            peers.append(rng.choice(met))
        elif roll < 0.9:
            peers.append(stranger(rng))
        elif roll < 0.95:
            gone = Peer(id=rng.getrandbits(128), addr="gone")
            node.dead[gone.id] = now + 60.0
            peers.append(gone)
        else:
            peers.append(ME)
    return peers


def state(node: OverlayNode) -> tuple[object, ...]:
    return (
        node.leaf.members(),
        node.table.entries(),
        dict(node.rtt),
        dict(node.last_heard),
        dict(node._candidates),
        {nonce: (p.peer, p.kind, p.attempt) for nonce, p in node._pending.items()},
        dict(node._timers),
    )


def test_considering_peers_in_bulk_decides_as_considering_them_one_by_one() -> None:
    for seed in range(6):
        (bulk, met), (single, _) = grown_node(seed), grown_node(seed)
        assert state(bulk) == state(single)
        rng = random.Random(100 + seed)
        now = 100.0
        for round_ in range(25):
            measure = round_ % 3 != 0
            for p in rng.sample(met, 3):  # re-measured: some now nearer than their slot's holder
                bulk.rtt[p.id] = single.rtt[p.id] = rng.uniform(0.001, 0.3)
            peers = offers(bulk, met, rng, now)
            for p in peers:  # the same dead marks on both nodes
                if p.id in bulk.dead:
                    single.dead[p.id] = bulk.dead[p.id]
            bulk._consider_all(peers, now, measure=measure)
            for p in peers:
                single._consider(p, now, measure=measure)
            assert bulk._flush().sends == single._flush().sends
            assert state(bulk) == state(single)
            now += 1.0


def test_known_nodes_and_table_entries_follow_every_change() -> None:
    node, _ = grown_node(1)
    entries = node.table.entries()
    entries.clear()  # a copy: the cached listing is not changed through it
    assert node.table.entries()
    victim = node.table.entries()[0]
    row, col = node.table.slot(victim.id)
    node.table.remove(victim.id)
    assert victim.id not in {p.id for p in node.table.entries()}
    node.table.set(row, col, victim)
    assert victim.id in {p.id for p in node.table.entries()}
    member = node.leaf.members()[0]
    node.leaf.remove(member.id)
    listed = {p.id for p in node.known()}
    if not node.table.contains(member.id):
        assert member.id not in listed
    node.leaf.add(member)
    assert member.id in {p.id for p in node.known()}
    expected = {p.id for p in node.table.entries()} | {p.id for p in node.leaf.members()}
    assert {p.id for p in node.known()} == expected


def test_a_leaf_set_change_wakes_the_node_at_once_to_watch_its_neighbour() -> None:
    """The earliest timer is kept between messages; a write of the watch timer must show."""
    node = OverlayNode(ME, OverlayParams(), random.Random(1))
    first = node.start(0.0)
    assert first.wakeup is not None and first.wakeup > 5.0
    out = node.on_message(Hello(sender=Peer(id=(1 << 127) + 5, addr="next")), 7.0)
    assert out.wakeup == 7.0
    later = node.on_timer(7.0)
    assert later.wakeup is not None and later.wakeup > 7.0


def fresh_push_fields(node: OverlayNode) -> tuple[list[Peer], list[float | None]]:
    """What a leaf push built from scratch says: the members and our RTT to each."""
    members = node.leaf.members()
    return members, [node.rtt.get(p.id) for p in members]


def test_a_reused_leaf_push_says_what_a_fresh_one_would() -> None:
    """_leaf_push reuses the last push until the leaf set or a member's RTT changes: after answered
    probes of members and of others, and after members come and go, it says what it would say
    built anew (and is reused only while nothing changed); to a peer that announced no
    capabilities, the same members without RTTs."""
    node, met = grown_node(3)
    rng = random.Random(7)
    reader, old = Peer(id=(1 << 127) + 77, addr="reader"), Peer(id=(1 << 127) - 77, addr="old")
    now = 200.0
    reused = 0
    for _ in range(200):
        node._learn_caps(reader.id, CAPABILITIES)
        before = node._leaf_push(reader)
        again = node._leaf_push(reader)
        assert again is before
        roll = rng.random()
        if roll < 0.5:  # a probe answered, by a member or by another node, at a new RTT
            target = rng.choice(node.leaf.members() if roll < 0.3 else met)
            node._probe(target, now)
            nonce = node._probing.get(target.id)
            if nonce is not None:
                node.on_message(Pong(sender=target, nonce=nonce, sent=now), now + rng.uniform(0.01, 0.3))
        elif roll < 0.7:  # a member declared dead
            node._declare_dead(rng.choice(node.leaf.members()), now)
        else:  # a newcomer heard first-hand
            node.on_message(Hello(sender=stranger(rng)), now)
        node._flush()
        push = node._leaf_push(reader)
        assert (push.leaf_set, push.rtts) == fresh_push_fields(node)
        base = node._leaf_push(old)
        assert (base.leaf_set, base.rtts) == (push.leaf_set, [])
        reused += push is before
        now += 1.0
    assert 0 < reused < 200  # both cases were met


def test_leaf_set_sides_are_the_nearest_nodes_in_order() -> None:
    """LeafSet._insert (distances computed inline) keeps each side the l/2 nearest of the nodes
    added, nearest first, as sorting them all by distance does; a node added again at a new
    address keeps its place with the new address."""
    rng = random.Random(5)
    node = OverlayNode(ME, OverlayParams(leaf_set_size=8), random.Random(5))
    added: dict[int, Peer] = {}
    for _ in range(400):
        if added and rng.random() < 0.2:
            peer = Peer(id=rng.choice(list(added)), addr=f"moved{rng.getrandbits(16)}")
        else:
            peer = stranger(rng)
        node.leaf.add(peer)
        added[peer.id] = peer
        larger = sorted(added.values(), key=lambda p: (p.id - ME.id) % (1 << 128))[:4]
        smaller = sorted(added.values(), key=lambda p: (ME.id - p.id) % (1 << 128))[:4]
        assert node.leaf.larger == larger
        assert node.leaf.smaller == smaller

"""Join requests acknowledged hop by hop (MSPastry's join), on the pure core and virtual time.

Before them, a bootstrap whose routing-table slot towards a joiner's id still held a crashed
node forwarded every one of the joiner's requests (one per join_retry) to that node, where it
was lost: nobody probes a table entry unless it is used, so the joiner never joined
(docs/bench/overlay_crash_midupgrade.py 60 1: node 7, 300 s after its restart)."""

from __future__ import annotations

import random
from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

import sim.legacy_overlay_wire as legacy
from common.overlay.messages import (
    CAP_RTT,
    CAP_TOLERANT,
    CAPABILITIES,
    CAPS_SHIFT,
    Hello,
    JoinInfo,
    JoinRequest,
    Peer,
    Ping,
    Pong,
    RouteAck,
    overlay_codec,
)
from common.overlay.node import (
    JOINING_ROOT_AFTER,
    MAX_JOIN_WAITS,
    SWEEP_QUIET,
    Output,
    OverlayNode,
    OverlayParams,
)
from common.wire import Message

PARAMS = OverlayParams(leaf_set_size=2)
ME = Peer(id=1000, addr="me")
LEFT = Peer(id=500, addr="left")
RIGHT = Peer(id=2000, addr="right")
JOINER = Peer(id=(0xA << 124) | 5, addr="joiner")
DEAD = Peer(id=(0xA << 124) | 9, addr="dead")  # our table's slot towards the joiner: crashed
ALIVE = Peer(id=(0x9F << 120), addr="alive")  # in row 0 of our table, nearer to the joiner than us


def meet(node: OverlayNode, peer: Peer, caps: int, now: float) -> None:
    """`peer` (announcing `caps`) says hello and answers the probes `node` sends it."""
    out = node.on_message(Ping(sender=peer, nonce=caps << CAPS_SHIFT | 7, sent=now), now)
    out.sends += node.on_message(Hello(sender=peer), now).sends
    for addr, msg in out.sends:
        if isinstance(msg, Ping) and addr == peer.addr:
            node.on_message(Pong(sender=peer, nonce=msg.nonce, sent=msg.sent, caps=caps or None), now + 0.01)


def bootstrap(
    *peers: tuple[Peer, int], capabilities: int = CAPABILITIES, leaf: tuple[Peer, ...] = (LEFT, RIGHT)
) -> OverlayNode:
    """A joined node with `leaf` as its leaf set and `peers` (with their capabilities) in its
    routing table, all measured at t = 0."""
    node = OverlayNode(ME, PARAMS, random.Random(1), capabilities=capabilities)
    node.start(0.0)
    for peer, caps in ((p, CAPABILITIES) for p in leaf):
        meet(node, peer, caps, 0.0)
    for peer, caps in peers:
        meet(node, peer, caps, 0.0)
        assert node.table.contains(peer.id) and peer.id not in node.leaf
    assert {p.id for p in node.leaf.members()} == {p.id for p in leaf}
    return node


def sent_to(out: Output, peer: Peer, kind: type[Message]) -> list[Message]:
    return [m for addr, m in out.sends if addr == peer.addr and isinstance(m, kind)]


def test_a_join_forwarded_to_a_silent_hop_goes_to_the_next_best_hop_and_the_hop_is_probed() -> None:
    node = bootstrap((DEAD, CAPABILITIES), (ALIVE, CAPABILITIES))
    t = SWEEP_QUIET + 1.0  # ALIVE, measured at t = 0, not heard from lately
    out = node.on_message(JoinRequest(joiner=JOINER), t)
    [info] = sent_to(out, JOINER, JoinInfo)
    assert not info.root
    [first] = sent_to(out, DEAD, JoinRequest)
    assert first.via == ME and first.hop_nonce is not None and first.hops == 1

    later = node.on_timer(t + PARAMS.hop_timeout)  # DEAD never acks
    assert sent_to(later, DEAD, Ping)  # suspected: declared dead if the probes fail too
    # Around a silent hop, leaf members that make progress (watched) go before table entries
    # not heard from lately: LEFT (500) is nearer to the joiner than we are (1000), the way
    # round through 0.
    [rerouted] = sent_to(later, LEFT, JoinRequest)
    assert rerouted.joiner == JOINER and rerouted.hops == 1 and rerouted.via == ME
    node.on_message(RouteAck(sender=LEFT, hop_nonce=rerouted.hop_nonce), t + PARAMS.hop_timeout + 0.02)
    assert not node._hops and node._join_waits == 0


def test_around_a_silent_hop_a_table_entry_heard_from_lately_counts_as_live() -> None:
    """ALIVE answered 1 s before: as trusted as a leaf member, and its longer prefix wins."""
    node = bootstrap((DEAD, CAPABILITIES), (ALIVE, CAPABILITIES))
    node.on_message(JoinRequest(joiner=JOINER), 1.0)
    later = node.on_timer(1.0 + PARAMS.hop_timeout)  # DEAD never acks
    assert sent_to(later, DEAD, Ping) and not sent_to(later, LEFT, JoinRequest)
    [rerouted] = sent_to(later, ALIVE, JoinRequest)
    assert rerouted.joiner == JOINER and rerouted.via == ME


def test_without_the_silent_hop_the_forwarder_answers_as_the_root() -> None:
    """Our larger neighbour crashed (not noticed yet) and the joiner's id lies between us: it
    was the root, we are the next closest node."""
    neighbour = Peer(id=3000, addr="neighbour")
    node = bootstrap(leaf=(LEFT, neighbour))
    joiner = Peer(id=2500, addr="joiner")
    out = node.on_message(JoinRequest(joiner=joiner), 1.0)
    assert [m.via for m in sent_to(out, neighbour, JoinRequest)] == [ME]
    later = node.on_timer(1.0 + PARAMS.hop_timeout)
    [info] = sent_to(later, joiner, JoinInfo)
    assert info.root and {p.id for p in info.leaf_set} == {LEFT.id, neighbour.id}
    assert node._join_waits == 0 and sent_to(later, neighbour, Ping)


def test_an_acked_join_is_not_sent_again() -> None:
    node = bootstrap((DEAD, CAPABILITIES), (ALIVE, CAPABILITIES))
    [first] = sent_to(node.on_message(JoinRequest(joiner=JOINER), 1.0), DEAD, JoinRequest)
    node.on_message(RouteAck(sender=DEAD, hop_nonce=first.hop_nonce), 1.05)
    later = node.on_timer(1.0 + PARAMS.hop_timeout)
    assert not [m for _, m in later.sends if isinstance(m, JoinRequest | JoinInfo)]
    assert not sent_to(later, DEAD, Ping)


def test_a_hop_acks_a_join_that_asks_for_it_and_forwards_it() -> None:
    node = bootstrap((ALIVE, CAPABILITIES))
    out = node.on_message(JoinRequest(joiner=JOINER, hops=1, via=LEFT, hop_nonce=42), 1.0)
    assert [m.hop_nonce for m in sent_to(out, LEFT, RouteAck)] == [42]
    assert sent_to(out, ALIVE, JoinRequest)
    # A node of a version before join acks (as the simulator runs one) does not ack.
    old = bootstrap((ALIVE, 0), capabilities=0)
    out = old.on_message(JoinRequest(joiner=JOINER, via=LEFT, hop_nonce=42), 1.0)
    assert sent_to(out, ALIVE, JoinRequest) and not sent_to(out, LEFT, RouteAck)


def test_a_hop_that_does_not_ack_joins_gets_the_base_format_and_is_probed_if_silent() -> None:
    """An older hop (CAP_RTT | CAP_TOLERANT, or nothing) is sent no `via`: it would not ack (or
    would drop the request); it is probed if we have not heard from it for leaf_timeout, so that
    if it died, the joiner's next retry goes around it."""
    for caps in (0, CAP_RTT | CAP_TOLERANT):
        node = bootstrap((DEAD, caps))
        out = node.on_message(JoinRequest(joiner=JOINER), PARAMS.leaf_timeout + 1.0)
        [onward] = sent_to(out, DEAD, JoinRequest)
        assert onward.via is None and onward.hop_nonce is None
        assert legacy.overlay_codec().decode(overlay_codec().encode(onward), "test") is not None
        assert sent_to(out, DEAD, Ping) and not node._hops
    node = bootstrap((DEAD, 0))
    assert not sent_to(node.on_message(JoinRequest(joiner=JOINER), 1.0), DEAD, Ping)  # heard at 0


def test_refreshes_are_not_acked_and_waiting_joins_are_bounded() -> None:
    """Self-lookups (refresh) are periodic: a lost one is replaced by the next. And a flood of
    joiners does not grow the waits beyond MAX_JOIN_WAITS: the rest go on unwatched."""
    node = bootstrap((DEAD, CAPABILITIES))
    [refresh] = sent_to(node.on_message(JoinRequest(joiner=JOINER, refresh=True), 1.0), DEAD, JoinRequest)
    assert refresh.via is None and not node._hops
    for i in range(MAX_JOIN_WAITS + 10):
        node.on_message(JoinRequest(joiner=Peer(id=(0xA << 124) | (100 + i), addr=f"j{i}")), 1.0)
    assert node._join_waits == len(node._hops) == MAX_JOIN_WAITS
    node.on_timer(1.0 + PARAMS.hop_timeout)
    assert node._join_waits == len(node._hops)  # rerouted ones wait again, never more than the bound
    assert node._join_waits <= MAX_JOIN_WAITS


# ----------------------------------------------------------------------------- the joiner's retries

BOOT = Peer(id=(0x3 << 124), addr="boot")
NEAR_OLD = Peer(id=(0xA << 124) | 7, addr="near-old")  # nearest our id, of a version before acks
NEAR = Peer(id=(0xA << 124) | 11, addr="near")  # next nearest, acks joins
SILENT = Peer(id=(0xA << 124) | 6, addr="silent")  # named by the bootstrap, never answers


def joining() -> OverlayNode:
    """JOINER, joining through BOOT, which answered as a hop (naming NEAR_OLD, NEAR and SILENT)
    and forwarded the request to where it was lost; NEAR_OLD and NEAR answered our probes."""
    node = OverlayNode(JOINER, PARAMS, random.Random(1))
    [first] = [m for addr, m in node.start(0.0, bootstrap="boot").sends if addr == "boot"]
    assert isinstance(first, JoinRequest) and first.caps == CAPABILITIES
    out = node.on_message(JoinInfo(sender=BOOT, candidates=[NEAR_OLD, NEAR, SILENT]), 0.1)
    for peer, caps in ((NEAR_OLD, 0), (NEAR, CAPABILITIES)):
        [ping] = sent_to(out, peer, Ping)
        node.on_message(Pong(sender=peer, nonce=ping.nonce, sent=ping.sent, caps=caps or None), 0.2)
    assert sent_to(out, SILENT, Ping) and not node.joined
    return node


def test_a_joiner_sends_every_other_retry_past_its_bootstrap_to_the_nodes_that_answered_it() -> None:
    """A bootstrap of a version before join acks, whose table slot towards the joiner's id holds
    a crashed node, loses every request it forwards (it never probes the entry); so the joiner's
    retries from the third on alternate with nodes it heard from (those that ack joins first,
    nearest its id first, two tries each), in the format each speaks."""
    node = joining()
    targets, boot_formats = [], []
    for k in range(1, 12):
        out = node.on_timer(k * PARAMS.join_retry)
        [(addr, request)] = [(a, m) for a, m in out.sends if isinstance(m, JoinRequest)]
        targets.append(addr)
        assert set(node._join_tried) <= {NEAR.id, NEAR_OLD.id}  # never SILENT, never more than known
        if addr == NEAR_OLD.addr:
            assert request.caps is None  # it would drop a request that announces them
        elif addr == NEAR.addr:
            assert request.caps == CAPABILITIES
        else:  # the bootstrap, of a version we do not know: every other request announces them
            boot_formats.append(request.caps)
    assert targets == [
        "boot", "near", "boot", "near", "boot", "near-old", "boot", "near-old", "boot", "near", "boot"
    ]  # fmt: skip
    assert boot_formats == [None, CAPABILITIES, None, CAPABILITIES, None, CAPABILITIES]  # the 1st: caps
    node.on_message(JoinInfo(sender=NEAR, candidates=[], root=True, leaf_set=[NEAR_OLD]), 60.0)
    assert node.joined and not node._join_tried


def test_a_node_still_joining_answers_as_the_root_only_a_join_routed_to_it_or_its_bootstraps() -> None:
    """Asked straight (as a bootstrap or a retry's target) it knows too little to be the root,
    and the two would make a ring apart; routed to it by a joined node, it answers, so that
    nodes joining at once close in id get in through each other; and two nodes started each
    as the other's bootstrap make a ring of two."""
    node = OverlayNode(ME, PARAMS, random.Random(1))
    node.start(0.0, bootstrap="boot")
    assert not sent_to(node.on_message(JoinRequest(joiner=JOINER), 1.0), JOINER, JoinInfo)
    [info] = sent_to(node.on_message(JoinRequest(joiner=JOINER, hops=1), 1.0), JOINER, JoinInfo)
    assert info.root
    a, b = OverlayNode(ME, PARAMS, random.Random(1)), OverlayNode(JOINER, PARAMS, random.Random(2))
    [(_, a_asks)] = a.start(0.0, bootstrap=JOINER.addr).sends
    [(_, b_asks)] = b.start(0.0, bootstrap=ME.addr).sends
    [b_answers] = sent_to(b.on_message(a_asks, 0.1), ME, JoinInfo)
    a.on_message(b_answers, 0.2)
    [a_answers] = sent_to(a.on_message(b_asks, 0.3), JOINER, JoinInfo)
    b.on_message(a_answers, 0.4)
    assert b_answers.root and a_answers.root and a.joined and b.joined
    assert [p.id for p in a.leaf.members()] == [JOINER.id] and [p.id for p in b.leaf.members()] == [ME.id]


def test_a_node_still_joining_answers_a_straight_asker_as_its_root_only_after_a_while() -> None:
    node = OverlayNode(ME, PARAMS, random.Random(1))
    node.start(10.0, bootstrap="gone")
    late = 10.0 + JOINING_ROOT_AFTER
    assert not sent_to(node.on_message(JoinRequest(joiner=JOINER), late - 0.5), JOINER, JoinInfo)
    [info] = sent_to(node.on_message(JoinRequest(joiner=JOINER), late), JOINER, JoinInfo)
    assert info.root and not node.joined  # it lets the joiner in; its own join goes on
    unstarted = OverlayNode(ME, PARAMS, random.Random(1))  # (a simulator may deliver before start)
    assert not unstarted.on_message(JoinRequest(joiner=JOINER), 10 * JOINING_ROOT_AFTER).sends


def test_a_node_named_as_its_own_bootstrap_founds_the_ring() -> None:
    """Every machine given the same seed address, the seed's own included."""
    for spelling in (ME.addr, ME.addr.upper() + "."):  # case and a trailing dot do not count
        node = OverlayNode(ME, PARAMS, random.Random(1))
        out = node.start(0.0, bootstrap=spelling)
        assert node.joined and node.seeds == ()
        assert not [m for _, m in out.sends if isinstance(m, JoinRequest)]


def ring_of(
    bootstraps: Mapping[str, str | list[str] | None],
    gone: frozenset[str] = frozenset(),
    starts: dict[str, float] | None = None,
    until: float = 600.0,
    apart: tuple[frozenset[str], float] = (frozenset(), 0.0),
) -> dict[str, OverlayNode]:
    """Nodes started at once (or at their `starts`), each through its bootstrap or seeds
    (None: founds), messages delivered at once (to a `gone` address or a node not started yet:
    lost; between the nodes of `apart[0]` and the others: lost until `apart[1]`), timers every
    half second until `until`."""
    rng = random.Random(1)
    nodes = {
        name: OverlayNode(Peer(id=rng.getrandbits(128), addr=name), OverlayParams(), random.Random(i))
        for i, name in enumerate(bootstraps)
    }
    starts = starts or {}
    side, joined_at = apart
    started: set[str] = set()
    queue: list[tuple[str, str, Message]] = []
    t = 0.0
    while t < until:
        for name, node in nodes.items():
            if name not in started and starts.get(name, 0.0) <= t:
                started.add(name)
                queue += [(name, a, m) for a, m in node.start(t, bootstrap=bootstraps[name]).sends]
        while queue:
            src, addr, msg = queue.pop(0)
            if addr in started and addr not in gone and (t >= joined_at or (src in side) == (addr in side)):
                queue += [(addr, a, m) for a, m in nodes[addr].on_message(msg, t).sends]
        t += 0.5
        for name in started:
            queue += [(name, a, m) for a, m in nodes[name].on_timer(t).sends]
    return nodes


def test_nodes_up_long_before_their_founder_join_its_ring_when_it_comes() -> None:
    """A chain of bootstraps whose founder starts last, 200 s after the others (a central
    manager that boots slowly): meanwhile they make a ring of their own (JOINING_ROOT_AFTER);
    when it comes, the node that names it is heard by it at last (_bootstrap_watch) and the
    two rings become one."""
    bootstraps: dict[str, str | None] = {"f": None, "a": "f", "b": "a", "c": "b", "d": "c"}
    nodes = ring_of(bootstraps, starts={"f": 200.0}, until=400.0)
    for name, node in nodes.items():
        assert node.joined, name
        assert {p.addr for p in node.leaf.members()} == set(nodes) - {name}, name


def test_nodes_whose_bootstraps_are_all_still_joining_make_one_ring() -> None:
    """No node founds the ring: bootstraps in a cycle (a whole federation restarted), each
    other's (one under another name than it advertises), or through a node that is gone.
    Nodes still joining refuse to be a straight asker's root only for their first
    JOINING_ROOT_AFTER seconds."""
    for bootstraps, gone in (
        ({"a": "b", "b": "c", "c": "a"}, frozenset()),
        ({"a": "b", "b": "a"}, frozenset()),
        ({"a": "b", "b": "a-alias"}, frozenset()),
        ({"b": "x", "c": "b", "d": "b"}, frozenset({"x"})),
    ):
        nodes = ring_of(bootstraps, gone)
        for name, node in nodes.items():
            assert node.joined, (bootstraps, name)
            assert {p.addr for p in node.leaf.members()} == set(nodes) - {name}, (bootstraps, name)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-2, 7), min_size=2, max_size=8))
def test_any_bootstrap_graph_ends_as_one_ring_per_group_of_nodes_that_name_each_other(
    choices: list[int],
) -> None:
    """Every node names one bootstrap: another node (an index), none (it founds a ring: -1) or
    an address nobody answers (-2). Each group of nodes linked by their bootstraps (each group
    has one founder or one cycle, or a gone address, at its end) ends as one ring, every node
    of it joined with the group's other nodes as its leaf set (l = 16 holds them all); only a
    node alone (none names it, its own bootstrap is gone) stays out."""
    n = len(choices)
    names = [f"n{i}" for i in range(n)]
    bootstraps: dict[str, str | None] = {}
    for i, c in enumerate(choices):
        if c == -1:
            bootstraps[names[i]] = None
        elif c == -2 or c % n == i:
            bootstraps[names[i]] = f"gone{i}"
        else:
            bootstraps[names[i]] = names[c % n]
    group = {name: {name} for name in names}  # union of the bootstrap links, either way
    for name, boot in bootstraps.items():
        if boot in group and group[boot] is not group[name]:
            merged = group[name] | group[boot]
            for member in merged:
                group[member] = merged
    nodes = ring_of(bootstraps, frozenset(f"gone{i}" for i in range(n)))
    for name, node in nodes.items():
        if len(group[name]) == 1 and bootstraps[name] is not None:
            assert not node.joined
            continue
        assert node.joined, (bootstraps, name)
        assert {p.addr for p in node.leaf.members()} == group[name] - {name}, (bootstraps, name)

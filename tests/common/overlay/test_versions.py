"""Rolling upgrades: what a node sends a peer depends on the capabilities the peer announced (in
its pings' nonce, its pongs' caps); a peer that announced none (a node before 2026-11-27, whose
strict decoding drops a message with a field it does not know) gets the base format, which the
old version's own wire models (sim.legacy_overlay_wire, a frozen copy) decode. Unknown fields
are ignored from now on, within bounds."""

from __future__ import annotations

import random

import msgpack
import pytest

import sim.legacy_overlay_wire as legacy
from common.overlay.messages import (
    CAP_RTT,
    CAP_TOLERANT,
    CAPABILITIES,
    CAPS_SHIFT,
    MAX_CAPS,
    MAX_FIELDS,
    Hello,
    JoinInfo,
    JoinRequest,
    LeafSetPush,
    LeafSetRequest,
    Peer,
    Ping,
    Pong,
    RowReply,
    RowRequest,
    caps_in_nonce,
    overlay_codec,
)
from common.overlay.node import Output, OverlayNode, OverlayParams
from common.wire import PROTOCOL_VERSION, Message

ME = Peer(id=1000, addr="me")
LEFT = Peer(id=500, addr="left")
RIGHT = Peer(id=2000, addr="right")
OLD = Peer(id=(0xB << 124) | 9, addr="old")  # a node before capabilities
NEW = Peer(id=(0xC << 124) | 9, addr="new")  # a node of this version


def joined_node(**kw: int) -> OverlayNode:
    """A joined node (l = 2) that measured LEFT and RIGHT, both of this version."""
    node = OverlayNode(ME, OverlayParams(leaf_set_size=2), random.Random(1), **kw)
    node.start(0.0)
    for peer in (LEFT, RIGHT):
        out = node.on_message(Hello(sender=peer), 0.0)
        for addr, msg in out.sends:
            if isinstance(msg, Ping) and addr == peer.addr:
                node.on_message(Pong(sender=peer, nonce=msg.nonce, sent=msg.sent, caps=CAPABILITIES), 0.05)
    assert node.rtt.keys() >= {LEFT.id, RIGHT.id}
    return node


def announce(node: OverlayNode, peer: Peer, caps: int, now: float = 1.0) -> Output:
    """`peer` pings `node`, announcing `caps` in the nonce as nodes of its version do."""
    return node.on_message(Ping(sender=peer, nonce=caps << CAPS_SHIFT | 7, sent=now), now)


def meet(node: OverlayNode, peer: Peer, caps: int, now: float = 1.0) -> None:
    """`peer`, a node announcing `caps`, pings `node` and answers its probes (RTT 0.01 s)."""
    out = announce(node, peer, caps, now)
    out.sends += node.measure(peer, now).sends
    for addr, msg in out.sends:
        if isinstance(msg, Ping) and addr == peer.addr:
            node.on_message(Pong(sender=peer, nonce=msg.nonce, sent=msg.sent, caps=caps or None), now + 0.01)


def offers_to(node: OverlayNode, peer: Peer, now: float = 2.0) -> list[Message]:
    """Every kind of offer and request the node sends `peer`: a row reply, a leaf set (asked for
    and corrective), a join info; and, once `peer` holds a table slot and dies, a row request."""
    sends: list[tuple[str, Message]] = []
    sends += node.on_message(RowRequest(sender=peer, row=0), now).sends
    sends += node.on_message(LeafSetRequest(sender=peer), now).sends
    sends += node.on_message(JoinRequest(joiner=peer), now).sends  # forwarded to others, too
    return [m for addr, m in sends if addr == peer.addr and not isinstance(m, Ping | Pong)]


def old_decodes(msg: Message) -> bool:
    """Whether a node of 3715ee6 accepts `msg` as this version encodes it."""
    return legacy.overlay_codec().decode(overlay_codec().encode(msg), "test") is not None


def test_pings_announce_the_capabilities_and_an_old_pinger_is_seen_as_old() -> None:
    node = joined_node()
    out = node.measure(NEW, 1.0)
    [ping] = [m for _, m in out.sends if isinstance(m, Ping)]
    assert caps_in_nonce(ping.nonce) == CAPABILITIES
    bare = joined_node(capabilities=0).measure(NEW, 1.0)
    [old_ping] = [m for _, m in bare.sends if isinstance(m, Ping)]
    assert caps_in_nonce(old_ping.nonce) == 0 and old_ping.nonce < 1 << CAPS_SHIFT
    announce(node, OLD, 0)
    assert node.caps[OLD.id] == 0


def test_a_pong_tells_our_capabilities_only_to_a_pinger_that_takes_them() -> None:
    node = joined_node()
    [new_pong] = [m for _, m in announce(node, NEW, CAPABILITIES).sends if isinstance(m, Pong)]
    assert new_pong.caps == CAPABILITIES
    [old_pong] = [m for _, m in announce(node, OLD, 0).sends if isinstance(m, Pong)]
    assert old_pong.caps is None and old_decodes(old_pong)


def test_offers_to_an_old_or_unknown_peer_are_in_the_base_format_the_old_version_decodes() -> None:
    """No RTT fields for a peer that announced nothing (old) or that we never heard announce;
    the old version's own models accept every message."""
    for peer, caps in ((OLD, 0), (NEW, None)):
        node = joined_node()
        if caps is not None:
            announce(node, peer, caps)
        sent = offers_to(node, peer)
        assert {type(m) for m in sent} >= {RowReply, LeafSetPush, JoinInfo}
        for msg in sent:
            assert not any(getattr(msg, f) for f in type(msg).EXTENSIONS), msg
            assert old_decodes(msg), msg


def test_offers_to_a_peer_that_announced_rtts_carry_them() -> None:
    node = joined_node()
    announce(node, NEW, CAPABILITIES)
    sent = {type(m): m for m in offers_to(node, NEW)}
    assert sent[RowReply].rtts and len(sent[RowReply].rtts) == len(sent[RowReply].entries)
    push = sent[LeafSetPush]
    assert dict(zip([p.id for p in push.leaf_set], push.rtts, strict=True)) == {
        p.id: node.rtt[p.id] for p in (LEFT, RIGHT)
    }
    assert not old_decodes(push)  # which is why an old peer is never sent one


def test_a_peer_that_goes_back_to_an_old_version_gets_the_base_format_again() -> None:
    """Knowledge follows the latest announcement: a downgraded node's first ping (or pong)
    without capabilities puts it back on the base format."""
    node = joined_node()
    announce(node, NEW, CAPABILITIES, now=1.0)
    assert any(isinstance(m, LeafSetPush) and m.rtts for m in offers_to(node, NEW, now=1.5))
    announce(node, NEW, 0, now=2.0)  # restarted as an old version
    assert all(old_decodes(m) for m in offers_to(node, NEW, now=2.5))
    out = node.measure(Peer(id=(0xD << 124), addr="d"), 3.0)  # an old node's pong carries no caps
    [ping] = [m for _, m in out.sends if isinstance(m, Ping)]
    node.caps[(0xD << 124)] = CAPABILITIES
    node.on_message(Pong(sender=Peer(id=(0xD << 124), addr="d"), nonce=ping.nonce, sent=3.0), 3.1)
    assert node.caps[(0xD << 124)] == 0


def test_a_node_without_capabilities_never_sends_an_extension() -> None:
    """A node built with capabilities=0 (how the simulator runs an old node) speaks the base
    format even to peers that announced everything."""
    node = joined_node(capabilities=0)
    announce(node, NEW, CAPABILITIES)
    sent = offers_to(node, NEW) + [m for _, m in announce(node, NEW, CAPABILITIES).sends]
    assert sent and all(old_decodes(m) for m in sent)


def test_joins_alternate_an_announcing_and_a_base_request() -> None:
    """The bootstrap's version is unknown: the first request announces (hops answer with RTTs),
    the retry does not (an old bootstrap drops the first and takes the second)."""
    node = OverlayNode(ME, OverlayParams(), random.Random(1))
    [(_, first)] = node.start(0.0, "boot").sends
    assert isinstance(first, JoinRequest) and first.caps == CAPABILITIES and not old_decodes(first)
    retry = [m for _, m in node.on_timer(OverlayParams().join_retry).sends if isinstance(m, JoinRequest)]
    assert retry and retry[0].caps is None and old_decodes(retry[0])


def test_a_hop_answers_a_joiner_as_its_request_says_and_forwards_the_claim_only_to_tolerant_hops() -> None:
    node = joined_node()
    far = Peer(id=(0xE << 124) | 1, addr="far")  # row 0: our next hop towards the joiner below
    meet(node, far, 0)
    meet(node, NEW, CAPABILITIES)
    assert node.table.contains(far.id) and node.table.contains(NEW.id)
    joiner = Peer(id=(0xE << 124) | 2, addr="joiner")
    out = node.on_message(JoinRequest(joiner=joiner, caps=CAPABILITIES), 2.0)
    [info] = [m for _, m in out.sends if isinstance(m, JoinInfo)]
    assert info.candidate_rtts  # the joiner said it takes them
    [(to, forwarded)] = [(a, m) for a, m in out.sends if isinstance(m, JoinRequest)]
    assert to == far.addr and forwarded.caps is None and old_decodes(forwarded)
    out = node.on_message(JoinRequest(joiner=joiner), 3.0)
    [info] = [m for _, m in out.sends if isinstance(m, JoinInfo)]
    assert not info.candidate_rtts and old_decodes(info)


def test_a_dead_node_is_forgotten_with_its_capabilities() -> None:
    node = joined_node()
    announce(node, RIGHT, CAPABILITIES)
    node._declare_dead(RIGHT, 5.0)
    assert RIGHT.id not in node.caps


def test_hellos_and_requests_carry_our_rtt_only_to_peers_that_take_it() -> None:
    node = OverlayNode(ME, OverlayParams(leaf_set_size=2), random.Random(1))
    node.start(0.0, "boot")
    meet(node, LEFT, CAPABILITIES, 0.0)
    meet(node, RIGHT, 0, 0.0)
    out = node.on_message(JoinInfo(sender=LEFT, candidates=[], leaf_set=[RIGHT], root=True), 1.0)
    hellos = {a: m for a, m in out.sends if isinstance(m, Hello)}
    assert hellos[LEFT.addr].rtt is not None and hellos[RIGHT.addr].rtt is None
    assert old_decodes(hellos[RIGHT.addr])


# ----------------------------------------------------------------------------- decoding


def _packed(kind: str, body: dict) -> bytes:
    return msgpack.packb([PROTOCOL_VERSION, kind, body], use_bin_type=True)


def test_unknown_fields_are_ignored_and_never_kept() -> None:
    """What a later version adds does not cost its message here: top level or in a peer."""
    codec = overlay_codec()
    sender = {"id": bytes(15) + b"\x05", "addr": "n5", "zone": "eu-1"}
    data = _packed("hello", {"sender": sender, "rtt": 0.1, "future": {"x": [1, 2, 3]}, "flag": True})
    msg = codec.decode(data, "later")
    assert isinstance(msg, Hello) and msg.sender == Peer(id=5, addr="n5") and msg.rtt == 0.1
    assert msg.model_extra in (None, {}) and "future" not in msg.model_dump()


@pytest.mark.parametrize(
    ("kind", "body"),
    [
        ("hello", {"sender": {"id": bytes(16), "addr": "a"}, **{f"f{i}": i for i in range(MAX_FIELDS)}}),
        ("hello", {"sender": {"id": bytes(16), "addr": "a", **{f"f{i}": i for i in range(MAX_FIELDS)}}}),
        ("pong", {"sender": {"id": bytes(16), "addr": "a"}, "nonce": 1, "sent": 0.0, "caps": -1}),
        ("pong", {"sender": {"id": bytes(16), "addr": "a"}, "nonce": 1, "sent": 0.0, "caps": MAX_CAPS + 1}),
        ("pong", {"sender": {"id": bytes(16), "addr": "a"}, "nonce": 1, "sent": 0.0, "caps": "all"}),
        ("join", {"joiner": {"id": bytes(16), "addr": "a"}, "caps": [CAP_RTT]}),
        ("ping", {"sender": {"id": bytes(16), "addr": "a"}, "nonce": -1, "sent": 0.0}),
    ],
)
def test_too_many_fields_and_bad_capabilities_are_dropped(kind: str, body: dict) -> None:
    codec = overlay_codec()
    assert codec.decode(_packed(kind, body), "hostile") is None
    assert sum(codec.drops.values()) == 1


def test_a_claimed_capability_set_is_only_a_format_choice() -> None:
    """Whatever a peer announces, it changes only the format of what we send it: never an RTT
    of ours, never our tables."""
    node = joined_node()
    before = (dict(node.rtt), node.table.entries(), node.leaf.members())
    announce(node, NEW, MAX_CAPS)
    assert node.caps[NEW.id] == MAX_CAPS and node._speaks(NEW.id, CAP_RTT | CAP_TOLERANT)
    assert NEW.id not in node.rtt and before[0].items() <= node.rtt.items()

"""Probe pruning (issue 18): a node that offers candidates sends its measured RTT to each, and the
receiver skips the probe of a candidate whose lower bound |rtt(us, sender) - rtt(sender, cand)|
is no nearer than the measured holder of the candidate's table slot. A lying sender can only make
us skip a probe or send one."""

from __future__ import annotations

import math
import random

import msgpack
import pytest

from common.overlay.messages import (
    CAPABILITIES,
    CAPS_SHIFT,
    Hello,
    JoinInfo,
    LeafSetPush,
    LeafSetRequest,
    Peer,
    Ping,
    Pong,
    RowReply,
    RowRequest,
    overlay_codec,
)
from common.overlay.node import Output, OverlayNode, OverlayParams
from common.wire import PROTOCOL_VERSION

ME = Peer(id=1000, addr="me")
RIGHT = Peer(id=2000, addr="right")  # in our leaf set, measured at RIGHT_RTT
LEFT = Peer(id=500, addr="left")  # the other side: with l = 2, our leaf set is full
RIGHT_RTT = 0.100
HOLDER = Peer(id=(0xA << 124) | 5, addr="holder")  # row 0, digit A: measured at HOLDER_RTT
HOLDER_RTT = 0.010
CANDIDATE = Peer(id=(0xA << 124) | 7, addr="cand")  # the same slot as HOLDER


def answer(node: OverlayNode, out: Output, now: float, rtts: dict[str, float]) -> None:
    """Answer the pings in `out` to the addresses in `rtts`, each after its round-trip time, as
    nodes of this version (which announce their capabilities: test_versions)."""
    for addr, msg in out.sends:
        if isinstance(msg, Ping) and addr in rtts:
            peer = {p.addr: p for p in (LEFT, RIGHT, HOLDER, CANDIDATE)}[addr]
            pong = Pong(sender=peer, nonce=msg.nonce, sent=msg.sent, caps=CAPABILITIES)
            node.on_message(pong, now + rtts[addr])


def pinged(out: Output) -> set[str]:
    return {addr for addr, msg in out.sends if isinstance(msg, Ping)}


def node_with_measured_holder() -> OverlayNode:
    """A joined node with a full leaf set (LEFT, RIGHT: l = 2, so that candidates far off in the
    ring are candidates for the table only) and HOLDER in HOLDER's slot, all measured."""
    node = OverlayNode(ME, OverlayParams(leaf_set_size=2), random.Random(1))
    node.start(0.0)
    answer(node, node.on_message(Hello(sender=RIGHT), 0.0), 0.0, {RIGHT.addr: RIGHT_RTT})
    answer(node, node.on_message(Hello(sender=LEFT), 0.0), 0.0, {LEFT.addr: 0.2})
    out = node.on_message(RowReply(sender=RIGHT, row=0, entries=[HOLDER]), 1.0)
    answer(node, out, 1.0, {HOLDER.addr: HOLDER_RTT})
    assert node.table.get(0, 0xA) == HOLDER
    assert math.isclose(node.rtt[HOLDER.id], HOLDER_RTT) and math.isclose(node.rtt[RIGHT.id], RIGHT_RTT)
    return node


def test_a_candidate_that_cannot_be_nearer_than_the_holder_is_not_probed() -> None:
    """RIGHT is 0.1 s from us and 0.3 s from the candidate: the candidate is at least 0.2 s from
    us, farther than the holder (0.01 s), so probing it cannot change the table."""
    node = node_with_measured_holder()
    out = node.on_message(RowReply(sender=RIGHT, row=0, entries=[CANDIDATE], rtts=[0.300]), 2.0)
    assert CANDIDATE.addr not in pinged(out)
    assert node.table.get(0, 0xA) == HOLDER


@pytest.mark.parametrize("theirs", [None, 0.105, 0.095])
def test_a_candidate_that_may_be_nearer_is_probed_and_takes_the_slot_if_it_is(theirs: float | None) -> None:
    """No RTT from the sender, or a bound below the holder's RTT: probed as before, and it takes
    the slot when its measured RTT is lower than the holder's."""
    node = node_with_measured_holder()
    rtts = [] if theirs is None else [theirs]
    out = node.on_message(RowReply(sender=RIGHT, row=0, entries=[CANDIDATE], rtts=rtts), 2.0)
    assert CANDIDATE.addr in pinged(out)
    answer(node, out, 2.0, {CANDIDATE.addr: 0.005})
    assert node.table.get(0, 0xA) == CANDIDATE


def test_join_info_and_leaf_pushes_are_pruned_the_same_way() -> None:
    node = node_with_measured_holder()
    out = node.on_message(JoinInfo(sender=RIGHT, candidates=[CANDIDATE], candidate_rtts=[0.5]), 2.0)
    assert CANDIDATE.addr not in pinged(out)
    out = node.on_message(LeafSetPush(sender=RIGHT, leaf_set=[CANDIDATE], rtts=[0.5]), 3.0)
    assert CANDIDATE.addr not in pinged(out)


@pytest.mark.parametrize("kind", [Hello, LeafSetRequest, RowRequest])
def test_a_sender_passing_its_rtt_to_us_is_not_probed_back_when_it_cannot_be_nearer(kind: type) -> None:
    """Round trips are symmetric: a sender that measured us 0.2 s away cannot beat the holder."""
    node = node_with_measured_holder()
    extra = {"row": 0} if kind is RowRequest else {}
    out = node.on_message(kind(sender=CANDIDATE, rtt=0.2, **extra), 2.0)
    assert CANDIDATE.addr not in pinged(out)
    out = node_with_measured_holder().on_message(kind(sender=CANDIDATE, rtt=0.001, **extra), 2.0)
    assert CANDIDATE.addr in pinged(out)


def test_offers_carry_the_senders_measured_rtts() -> None:
    """What a node sends to peers that take them (announced: test_versions): its own RTT to each
    peer it offers (0 to itself), the asker's RTT in requests and hellos."""
    node = node_with_measured_holder()
    asker = Peer(id=(0xB << 124) | 9, addr="asker")  # row 0 of its table: our digit 0, HOLDER's A
    node.on_message(Ping(sender=asker, nonce=CAPABILITIES << CAPS_SHIFT | 1, sent=0.0), 1.5)
    out = node.on_message(RowRequest(sender=asker, row=0), 2.0)
    [reply] = [m for _, m in out.sends if isinstance(m, RowReply)]
    by_id = dict(zip([p.id for p in reply.entries], reply.rtts, strict=True))
    assert by_id[HOLDER.id] == node.rtt[HOLDER.id] and by_id.get(ME.id, 0.0) == 0.0
    [push] = [
        m for _, m in node.on_message(LeafSetRequest(sender=RIGHT), 3.0).sends if isinstance(m, LeafSetPush)
    ]
    assert dict(zip([p.id for p in push.leaf_set], push.rtts, strict=True)) == {
        p.id: node.rtt[p.id] for p in (LEFT, RIGHT)
    }


# ----------------------------------------------------------------------------- hostile senders


@pytest.mark.parametrize("lie", [0.0, 1e-300, 1e300, 0.1])
def test_a_lying_rtt_never_puts_a_node_in_the_table_nor_into_our_measurements(lie: float) -> None:
    """Whatever a sender claims, the candidate gets no RTT of ours until it answers a probe, and
    takes the holder's slot only if it is measured nearer; the bound only skips or sends a probe."""
    node = node_with_measured_holder()
    out = node.on_message(RowReply(sender=RIGHT, row=0, entries=[CANDIDATE], rtts=[lie]), 2.0)
    out2 = node.on_message(Hello(sender=CANDIDATE, rtt=lie), 2.0)
    assert CANDIDATE.id not in node.rtt
    assert len([a for a, m in out.sends + out2.sends if isinstance(m, Ping) and a == CANDIDATE.addr]) <= 1
    answer(node, out, 2.0, {CANDIDATE.addr: 0.050})  # it is farther than the holder in truth
    assert node.table.get(0, 0xA) == HOLDER
    assert math.isclose(node.rtt.get(CANDIDATE.id, 0.050), 0.050)


def test_lying_rtts_that_break_the_bounds_are_dropped_by_the_codec() -> None:
    """Negative, infinite, not-a-number, non-numeric values and lists that do not pair with the
    peers fail validation: the datagram is dropped and counted, nothing raises."""
    codec = overlay_codec()
    sender = RIGHT.model_dump(mode="python")
    entry = CANDIDATE.model_dump(mode="python")
    bad = [
        ("row", {"sender": sender, "row": 0, "entries": [entry], "rtts": [-1.0]}),
        ("row", {"sender": sender, "row": 0, "entries": [entry], "rtts": [math.inf]}),
        ("row", {"sender": sender, "row": 0, "entries": [entry], "rtts": [math.nan]}),
        ("row", {"sender": sender, "row": 0, "entries": [entry], "rtts": ["near"]}),
        ("row", {"sender": sender, "row": 0, "entries": [entry], "rtts": [0.1, 0.2]}),
        ("row", {"sender": sender, "row": 0, "entries": [], "rtts": [0.1] * 2000}),
        ("leaf_set", {"sender": sender, "leaf_set": [entry, entry], "rtts": [0.1]}),
        ("join_info", {"sender": sender, "candidates": [entry], "candidate_rtts": [0.1, 0.1]}),
        ("join_info", {"sender": sender, "candidates": [], "leaf_set": [entry], "leaf_rtts": [-0.5]}),
        ("hello", {"sender": sender, "rtt": -3.0}),
        ("hello", {"sender": sender, "rtt": math.inf}),
        ("leaf_req", {"sender": sender, "rtt": [0.1]}),
        ("row_req", {"sender": sender, "row": 0, "rtt": math.nan}),
    ]
    for kind, body in bad:
        data = msgpack.packb([PROTOCOL_VERSION, kind, body], use_bin_type=True)
        assert codec.decode(data, "liar") is None, (kind, body)
    assert sum(codec.drops.values()) == len(bad)
    good = msgpack.packb(
        [PROTOCOL_VERSION, "row", {"sender": sender, "row": 0, "entries": [entry], "rtts": [None]}],
        use_bin_type=True,
    )
    assert isinstance(codec.decode(good, "honest"), RowReply)


def test_the_core_ignores_rtts_that_do_not_pair_with_the_peers() -> None:
    """A message built without validation (model_construct) with a short RTT list: the core
    treats the offer as carrying no RTTs (probes as before) instead of failing."""
    node = node_with_measured_holder()
    reply = RowReply.model_construct(sender=RIGHT, row=0, entries=[CANDIDATE, HOLDER], rtts=[0.5])
    out = node.on_message(reply, 2.0)
    assert CANDIDATE.addr in pinged(out)

"""Messages the core builds without validation (OverlayMessage.built, issue 18, simulator speed)
equal the validated ones and encode to the same bytes, while what comes off the network is still
validated: a datagram the core could never have built is dropped by the codec."""

from __future__ import annotations

import math
import random

import pytest

from common.framing import pack
from common.overlay.messages import (
    CAPABILITIES,
    JoinInfo,
    JoinRequest,
    LeafSetPush,
    LeafSetRequest,
    OverlayMessage,
    Peer,
    Ping,
    Pong,
    RouteAck,
    RowReply,
    RowRequest,
    overlay_codec,
)
from common.overlay.node import OverlayNode, OverlayParams
from common.wire import PROTOCOL_VERSION

ME = Peer(id=(1 << 127) + 5, addr="10.0.0.1:9618")
OTHERS = [Peer(id=(7919 * i) << 100, addr=f"10.0.0.{i}:9618") for i in range(2, 18)]
RTTS = [0.01 * i if i % 3 else None for i in range(16)]

CASES: list[tuple[type[OverlayMessage], dict]] = [
    (Ping, {"sender": ME, "nonce": 7 | CAPABILITIES << 48, "sent": 12.5}),
    (Pong, {"sender": ME, "nonce": 7, "sent": 12.5}),
    (Pong, {"sender": ME, "nonce": 7, "sent": 12.5, "caps": CAPABILITIES}),
    (JoinRequest, {"joiner": ME}),
    (JoinRequest, {"joiner": ME, "hops": 3, "caps": 7, "via": OTHERS[0], "hop_nonce": 9}),
    (JoinRequest, {"joiner": ME, "refresh": True}),
    (JoinInfo, {"sender": ME, "candidates": OTHERS[:5], "leaf_set": OTHERS[5:], "root": True}),
    (JoinInfo, {"sender": ME, "candidates": OTHERS, "candidate_rtts": RTTS}),
    (LeafSetPush, {"sender": ME, "leaf_set": OTHERS}),
    (LeafSetPush, {"sender": ME, "leaf_set": OTHERS, "rtts": RTTS}),
    (LeafSetRequest, {"sender": ME}),
    (LeafSetRequest, {"sender": ME, "rtt": 0.25}),
    (RowRequest, {"sender": ME, "row": 3, "rtt": None}),
    (RowReply, {"sender": ME, "row": 2, "entries": OTHERS, "rtts": RTTS}),
    (RouteAck, {"sender": ME, "hop_nonce": 11}),
]


@pytest.mark.parametrize(("cls", "fields"), CASES)
def test_a_built_message_is_the_validated_one(cls: type[OverlayMessage], fields: dict) -> None:
    built, validated = cls.built(**fields), cls(**fields)
    codec = overlay_codec()
    assert built == validated
    assert repr(built) == repr(validated)
    assert built.model_fields_set == validated.model_fields_set
    assert codec.encode(built) == codec.encode(validated)
    assert codec.decode(codec.encode(built), "peer") == validated


def test_built_refuses_a_field_the_message_lacks() -> None:
    with pytest.raises(TypeError, match="no field"):
        Ping.built(sender=ME, nonce=1, sent=0.0, rtt=0.1)


@pytest.mark.parametrize(
    ("kind", "body"),
    [
        ("ping", {"sender": {"id": bytes(16), "addr": "a:1"}, "nonce": -1, "sent": 0.0}),
        ("ping", {"sender": {"id": bytes(16), "addr": "a:1"}, "nonce": 1, "sent": math.nan}),
        ("pong", {"sender": {"id": bytes(15), "addr": "a:1"}, "nonce": 1, "sent": 0.0}),
        ("leaf_req", {"sender": {"id": bytes(16), "addr": "a:1"}, "rtt": -0.5}),
        ("row_req", {"sender": {"id": bytes(16), "addr": "a:1"}, "row": 500}),
        ("row", {"sender": {"id": bytes(16), "addr": "a:1"}, "row": 1, "entries": [], "rtts": [0.1]}),
    ],
)
def test_what_comes_off_the_network_is_still_validated(kind: str, body: dict) -> None:
    codec = overlay_codec()
    assert codec.decode(pack([PROTOCOL_VERSION, kind, body]), "peer") is None
    assert codec.drops["invalid"] == 1


def test_every_message_a_busy_core_builds_encodes_and_decodes_to_itself() -> None:
    """The core's own messages (built, not validated) are valid on the wire: a node fed a seeded
    mix of hellos, pushes, row requests and replies, joins and pings from peers that announce
    their capabilities; every send round-trips through the codec unchanged."""
    rng = random.Random(3)
    node = OverlayNode(ME, OverlayParams(), random.Random(3))
    node.start(0.0, OTHERS[0].addr)
    codec = overlay_codec()
    kinds = set()
    now = 1.0
    for step in range(400):
        peer = rng.choice(OTHERS)
        roll = step % 6
        if roll == 0:
            msg: OverlayMessage = Ping(sender=peer, nonce=step | CAPABILITIES << 48, sent=now)
        elif roll == 1:
            msg = JoinInfo(sender=peer, candidates=rng.sample(OTHERS, 6), leaf_set=OTHERS[:8], root=True)
        elif roll == 2:
            msg = LeafSetPush(sender=peer, leaf_set=rng.sample(OTHERS, 8), rtts=[0.05] * 8)
        elif roll == 3:
            msg = RowRequest(sender=peer, row=rng.randrange(3), rtt=0.1)
        elif roll == 4:
            msg = JoinRequest(joiner=Peer(id=rng.getrandbits(128), addr="10.9.9.9:1"), caps=CAPABILITIES)
        else:
            msg = LeafSetRequest(sender=peer, rtt=None)
        out = node.on_message(msg, now)
        out_timer = node.on_timer(now + 0.5) if step % 25 == 0 else None
        by_addr = {p.addr: p for p in OTHERS}
        for addr, sent in out.sends + (out_timer.sends if out_timer else []):
            kinds.add(type(sent).__name__)
            assert codec.decode(codec.encode_datagram(sent), "peer") == sent
            if isinstance(sent, Ping) and addr in by_addr:  # answered: measured peers, fuller tables
                pong = Pong(sender=by_addr[addr], nonce=sent.nonce, sent=sent.sent, caps=CAPABILITIES)
                node.on_message(pong, now + 0.02)
        now += 0.7
    assert {"Pong", "Ping", "LeafSetPush", "RowReply", "JoinInfo", "JoinRequest"} <= kinds

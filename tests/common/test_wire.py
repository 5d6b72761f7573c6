"""common.wire: well-formed messages round-trip; anything else is dropped and counted."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from common.wire import (
    HEADER,
    DropReason,
    FrameDecoder,
    FrameTooLarge,
    Message,
    MessageCodec,
    frame,
    pack,
)


class Alive(Message):
    TYPE = "alive"
    node: str
    seq: int
    epoch: int = 0


class Announce(Message):
    TYPE = "announce"
    pool: str
    free_slots: int
    ttl: int
    blob: bytes = b""


def codec(max_size: int = 4096) -> MessageCodec:
    return MessageCodec([Alive, Announce], max_size=max_size, name="test")


def test_round_trip_frame_and_datagram() -> None:
    c = codec()
    msg = Announce(pool="poolA", free_slots=3, ttl=2, blob=b"\x00\xff")
    assert c.decode(c.encode(msg), "peer") == msg
    assert c.decode_datagram(c.encode_datagram(msg), "peer") == msg
    dec = FrameDecoder()
    dec.feed(c.encode_frame(msg))
    assert c.decode(dec.next_frame() or b"", "peer") == msg
    assert not c.drops


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"\xc1\xc1\xc1", DropReason.GARBAGE),  # 0xc1 is never valid msgpack
        (pack({"not": "an envelope"}), DropReason.GARBAGE),
        (pack([1, "alive"]), DropReason.GARBAGE),
        (pack([2, "alive", {"node": "a", "seq": 1}]), DropReason.BAD_VERSION),
        (pack([1, "gossip", {}]), DropReason.UNKNOWN_TYPE),
        (pack([1, 7, {}]), DropReason.UNKNOWN_TYPE),
        (pack([1, "alive", {"node": "a", "seq": "one"}]), DropReason.INVALID),
        (pack([1, "alive", {"node": "a", "seq": 1, "extra": 1}]), DropReason.INVALID),
        (pack([1, "alive", "not a map"]), DropReason.INVALID),
        (pack([1, "alive", {"node": "a", "seq": 1}]) + b"\x00", DropReason.GARBAGE),  # trailing bytes
    ],
)
def test_bad_payloads_are_dropped_and_counted(payload: bytes, reason: DropReason) -> None:
    c = codec()
    assert c.decode(payload, "10.0.0.9:7000") is None
    assert c.drops == {reason: 1}


def test_oversized_datagram_dropped_before_decoding() -> None:
    c = codec(max_size=64)
    assert c.decode_datagram(b"\x00" * 65, "peer") is None
    assert c.drops == {DropReason.OVERSIZED: 1}


def test_oversized_frame_rejected_from_header_alone() -> None:
    dec = FrameDecoder(max_size=1024)
    dec.feed(HEADER.pack(1 << 31) + b"abc")  # announces 2 GiB, only the header has arrived
    with pytest.raises(FrameTooLarge):
        dec.next_frame()
    assert dec.pending == HEADER.size + 3  # nothing was allocated for the announced body


def test_encode_refuses_oversized_and_foreign_messages() -> None:
    c = codec(max_size=64)
    with pytest.raises(ValueError, match=r"announce message of \d+ bytes exceeds 64"):
        c.encode(Announce(pool="p" * 100, free_slots=1, ttl=1))

    class Stranger(Message):
        TYPE = "alive"
        x: int

    with pytest.raises(TypeError, match="Stranger is not a message of protocol test"):
        c.encode(Stranger(x=1))


@given(st.binary(max_size=512))
@example(pack([1, "alive", {"node": "a", "seq": 1}]))
@example(b"\xc1")
def test_arbitrary_bytes_never_raise(data: bytes) -> None:
    """Whatever arrives is either a valid message of the protocol or dropped with one count;
    nothing raises."""
    c = codec()
    for decode in (c.decode, c.decode_datagram):
        before = sum(c.drops.values())
        msg = decode(data, "fuzz")
        if msg is None:
            assert sum(c.drops.values()) == before + 1
        else:
            assert type(msg) in (Alive, Announce) and sum(c.drops.values()) == before
            assert c.decode(c.encode(msg), "self") == msg


@given(
    st.lists(st.binary(max_size=300), max_size=8),
    st.lists(st.integers(min_value=1, max_value=50), min_size=1, max_size=20),
)
def test_frames_survive_any_chunking(payloads: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(frame(p) for p in payloads)
    dec = FrameDecoder(max_size=1000)
    got, pos, i = [], 0, 0
    while pos < len(stream):
        step = cuts[i % len(cuts)]
        dec.feed(stream[pos : pos + step])
        pos, i = pos + step, i + 1
        while (p := dec.next_frame()) is not None:
            got.append(p)
    assert got == payloads and dec.pending == 0


def test_the_gateway_worker_frames_without_pydantic_or_structlog() -> None:
    """The worker (whose start every gateway call waits for first) imports the framing only:
    pydantic and structlog took most of its start-up."""
    import subprocess
    import sys

    code = (
        "import sys, common.condor.worker; "
        "print(sorted(m for m in ('pydantic', 'structlog', 'rich') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_wire_still_offers_the_framing() -> None:
    from common import framing, wire

    assert wire.frame is framing.frame and wire.FrameDecoder is framing.FrameDecoder
    decoder = framing.FrameDecoder()
    decoder.feed(wire.frame(wire.pack({"a": 1})))
    payload = decoder.next_frame()
    assert payload is not None and wire.unpack(payload) == {"a": 1}

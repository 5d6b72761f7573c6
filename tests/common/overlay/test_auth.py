"""common.overlay.auth: authentic fresh datagrams open once; anything else is dropped and counted."""

from __future__ import annotations

import math
import os
import stat
import struct
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from common.overlay.auth import (
    MIN_KEY_BYTES,
    AuthDrop,
    KeyFileError,
    Sealer,
    generate_key_file,
    load_ring_key,
)
from common.wire import pack, unpack

KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))
T0 = 1_700_000_000.0


def nonce(i: int) -> bytes:
    return i.to_bytes(16, "big")


def sealer(**kwargs: Any) -> Sealer:
    return Sealer(KEY, name="test", **kwargs)


# --- sealing and opening ---------------------------------------------------------------------------


def test_round_trip() -> None:
    s = sealer()
    for i, payload in enumerate([b"", b"hello", bytes(range(256)) * 10]):
        assert s.open(s.seal(payload, T0 + i, nonce(i)), T0 + i, "peer") == payload
    assert not s.drops
    assert s.remembered == 3


def test_seal_layout() -> None:
    d = sealer().seal(b"body", T0, nonce(7))
    timestamp, n, payload, mac = unpack(d)
    assert (timestamp, n, payload) == (T0, nonce(7), b"body")
    assert isinstance(mac, bytes) and len(mac) == 32


def test_two_sealers_with_one_key_interoperate() -> None:
    a, b = Sealer(KEY), Sealer(KEY)
    assert b.open(a.seal(b"x", T0, nonce(1)), T0 + 1.5, "a") == b"x"


def test_wrong_key_is_bad_mac() -> None:
    s = sealer()
    d = Sealer(OTHER_KEY).seal(b"forged", T0, nonce(1))
    assert s.open(d, T0, "mallory") is None
    assert s.drops == Counter({AuthDrop.BAD_MAC: 1})
    assert s.remembered == 0  # a forged message must not burn a nonce


def test_drop_is_logged_like_wire() -> None:
    s = sealer()
    with capture_logs() as logs:
        assert s.open(Sealer(OTHER_KEY).seal(b"x", T0, nonce(1)), T0, ("10.0.0.9", 4000)) is None
    assert len(logs) == 1
    entry = logs[0]
    assert entry["event"] == "message dropped"
    assert entry["log_level"] == "warning"
    assert entry["protocol"] == "test"
    assert entry["peer"] == "('10.0.0.9', 4000)"
    assert entry["reason"] == "bad_mac"
    assert isinstance(entry["detail"], str) and entry["detail"]


def _flip_float(value: float, bit: int) -> float:
    (bits,) = struct.unpack(">Q", struct.pack(">d", value))
    (flipped,) = struct.unpack(">d", struct.pack(">Q", bits ^ (1 << bit)))
    return flipped


def _flip_bytes(value: bytes, bit: int) -> bytes:
    out = bytearray(value)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


@given(
    field=st.sampled_from(["timestamp", "nonce", "payload", "mac"]),
    payload=st.binary(min_size=1, max_size=64),
    data=st.data(),
)
def test_any_flipped_bit_in_a_field_is_dropped(field: str, payload: bytes, data: st.DataObject) -> None:
    s = sealer()
    timestamp, n, body, mac = unpack(s.seal(payload, T0, nonce(1)))
    if field == "timestamp":
        timestamp = _flip_float(timestamp, data.draw(st.integers(0, 63), label="bit"))
    elif field == "nonce":
        n = _flip_bytes(n, data.draw(st.integers(0, 8 * len(n) - 1), label="bit"))
    elif field == "payload":
        body = _flip_bytes(body, data.draw(st.integers(0, 8 * len(body) - 1), label="bit"))
    else:
        mac = _flip_bytes(mac, data.draw(st.integers(0, 8 * len(mac) - 1), label="bit"))
    assert s.open(pack([timestamp, n, body, mac]), T0, "peer") is None
    # A flipped timestamp may become NaN or infinite, which is refused before the MAC is computed.
    expected = AuthDrop.MALFORMED if not math.isfinite(timestamp) else AuthDrop.BAD_MAC
    assert s.drops == Counter({expected: 1})


@given(payload=st.binary(max_size=64), data=st.data())
def test_any_flipped_bit_in_the_datagram_is_dropped(payload: bytes, data: st.DataObject) -> None:
    s = sealer()
    d = s.seal(payload, T0, nonce(1))
    bit = data.draw(st.integers(0, 8 * len(d) - 1), label="bit")
    assert s.open(_flip_bytes(d, bit), T0, "peer") is None
    assert sum(s.drops.values()) == 1
    assert set(s.drops) <= {AuthDrop.MALFORMED, AuthDrop.BAD_MAC}


def test_every_truncation_is_malformed() -> None:
    s = sealer()
    d = s.seal(b"some payload", T0, nonce(1))
    for cut in range(len(d)):
        assert s.open(d[:cut], T0, "peer") is None
    assert s.drops == Counter({AuthDrop.MALFORMED: len(d)})
    assert s.open(d, T0, "peer") == b"some payload"  # truncated copies burned nothing


def test_trailing_bytes_are_malformed() -> None:
    s = sealer()
    assert s.open(s.seal(b"x", T0, nonce(1)) + b"\x00", T0, "peer") is None
    assert s.drops == Counter({AuthDrop.MALFORMED: 1})


@given(st.binary(max_size=512))
def test_random_garbage_never_raises(garbage: bytes) -> None:
    s = sealer(max_size=256)
    assert s.open(garbage, T0, "peer") is None
    assert sum(s.drops.values()) == 1
    assert set(s.drops) <= {AuthDrop.MALFORMED, AuthDrop.BAD_MAC, AuthDrop.OVERSIZED}


msgpack_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text() | st.binary(),
    lambda inner: st.lists(inner, max_size=5),
    max_leaves=10,
)


@given(st.lists(msgpack_values, max_size=6))
def test_well_formed_msgpack_of_any_shape_never_raises(envelope: list[object]) -> None:
    s = sealer()
    assert s.open(pack(envelope), T0, "peer") is None
    assert sum(s.drops.values()) == 1
    assert set(s.drops) <= {AuthDrop.MALFORMED, AuthDrop.BAD_MAC}


@pytest.mark.parametrize(
    "envelope",
    [
        {"not": "a list"},
        [T0, nonce(1), b"x"],  # no mac
        [T0, nonce(1), b"x", bytes(32), b"extra"],
        [int(T0), nonce(1), b"x", bytes(32)],  # integer timestamp
        [math.nan, nonce(1), b"x", bytes(32)],
        [math.inf, nonce(1), b"x", bytes(32)],
        [T0, b"short", b"x", bytes(32)],
        [T0, "0123456789abcdef", b"x", bytes(32)],  # str, not bytes
        [T0, nonce(1), "x", bytes(32)],
        [T0, nonce(1), b"x", bytes(31)],
        [T0, nonce(1), b"x", None],
    ],
)
def test_wrong_shape_or_types_are_malformed(envelope: object) -> None:
    s = sealer()
    assert s.open(pack(envelope), T0, "peer") is None
    assert s.drops == Counter({AuthDrop.MALFORMED: 1})


@pytest.mark.parametrize("skew", [-30.001, 30.001, -1e6, 1e6])
def test_timestamp_outside_window_is_stale(skew: float) -> None:
    s = sealer(window=30.0)
    d = s.seal(b"x", T0, nonce(1))
    assert s.open(d, T0 + skew, "peer") is None
    assert s.drops == Counter({AuthDrop.STALE: 1})


@pytest.mark.parametrize("skew", [-30.0, -29.9, 0.0, 29.9, 30.0])
def test_timestamp_inside_window_is_accepted(skew: float) -> None:
    s = sealer(window=30.0)
    assert s.open(s.seal(b"x", T0, nonce(1)), T0 + skew, "peer") == b"x"


def test_same_datagram_twice_is_replayed() -> None:
    s = sealer()
    d = s.seal(b"x", T0, nonce(1))
    assert s.open(d, T0, "peer") == b"x"
    assert s.open(d, T0 + 1, "peer") is None
    assert s.open(d, T0 + 2, "other peer") is None
    assert s.drops == Counter({AuthDrop.REPLAYED: 2})


def test_same_nonce_in_a_new_message_is_replayed() -> None:
    s = sealer()
    assert s.open(s.seal(b"x", T0, nonce(1)), T0, "peer") == b"x"
    assert s.open(s.seal(b"y", T0 + 1, nonce(1)), T0 + 1, "peer") is None
    assert s.drops == Counter({AuthDrop.REPLAYED: 1})


def test_replay_after_the_window_is_stale_and_memory_is_freed() -> None:
    s = sealer(window=30.0)
    d = s.seal(b"x", T0, nonce(1))
    assert s.open(d, T0, "peer") == b"x"
    assert s.open(s.seal(b"y", T0 + 31, nonce(2)), T0 + 31, "peer") == b"y"  # prunes nonce 1
    assert s.remembered == 1
    assert s.open(d, T0 + 31, "peer") is None
    assert s.open(d, T0 + 1000, "peer") is None
    assert s.drops == Counter({AuthDrop.STALE: 2})


def test_replay_after_the_clock_steps_back_is_still_refused() -> None:
    s = sealer(window=30.0)
    d = s.seal(b"x", T0, nonce(1))
    assert s.open(d, T0, "peer") == b"x"
    assert s.open(s.seal(b"y", T0 + 100, nonce(2)), T0 + 100, "peer") == b"y"  # forgets nonce 1
    assert s.remembered == 1
    assert s.open(d, T0 + 5, "peer") is None  # local clock stepped back: d is within the window again
    assert s.drops == Counter({AuthDrop.STALE: 1})


def test_eviction_never_lets_a_replay_through() -> None:
    s = sealer(max_nonces=10)
    sent = [s.seal(f"m{i}".encode(), T0 + i * 0.1, nonce(i)) for i in range(25)]
    now = T0 + 3.0
    for i, d in enumerate(sent):
        assert s.open(d, now, "peer") == f"m{i}".encode()
        assert s.remembered <= 10
    assert s.remembered == 10
    for d in sent:
        assert s.open(d, now, "peer") is None
    assert s.drops == Counter({AuthDrop.STALE: 15, AuthDrop.REPLAYED: 10})


def test_eviction_of_the_newcomer_itself() -> None:
    s = sealer(max_nonces=2)
    for i in range(2):
        assert s.open(s.seal(b"new", T0 + 10 + i, nonce(i)), T0 + 10, "peer") == b"new"
    late = s.seal(b"late", T0, nonce(99))  # older than everything remembered: evicted on arrival
    assert s.open(late, T0 + 10, "peer") == b"late"
    assert s.remembered == 2
    assert s.open(late, T0 + 10, "peer") is None
    assert s.drops == Counter({AuthDrop.STALE: 1})


@settings(max_examples=200)
@given(
    max_nonces=st.integers(1, 10),
    steps=st.lists(
        st.tuples(
            st.sampled_from(["send", "replay"]),
            st.floats(-40.0, 40.0),  # timestamp offset for a send
            st.floats(-20.0, 60.0),  # clock step before the step; may go backwards
            st.integers(0, 1000),  # which earlier datagram to replay
        ),
        max_size=60,
    ),
)
def test_no_datagram_is_ever_accepted_twice(
    max_nonces: int, steps: list[tuple[str, float, float, int]]
) -> None:
    s = sealer(window=30.0, max_nonces=max_nonces)
    now = T0
    sent: list[bytes] = []
    accepted: Counter[bytes] = Counter()
    opened = 0
    for i, (action, offset, step, pick) in enumerate(steps):
        now += step
        if action == "send" or not sent:
            d = s.seal(b"%d" % i, now + offset, nonce(i))
            sent.append(d)
        else:
            d = sent[pick % len(sent)]
        opened += 1
        if s.open(d, now, "peer") is not None:
            accepted[d] += 1
        assert s.remembered <= max_nonces
    assert all(n == 1 for n in accepted.values())
    assert opened == accepted.total() + s.drops.total()


@given(
    offsets=st.lists(st.floats(-30.0, 30.0), max_size=50), steps=st.lists(st.floats(0.0, 5.0), max_size=50)
)
def test_monotonic_clock_without_overload_refuses_nothing_genuine(
    offsets: list[float], steps: list[float]
) -> None:
    s = sealer(window=30.0)
    now = T0
    for i, (offset, step) in enumerate(zip(offsets, steps, strict=False)):
        now += step
        assert s.open(s.seal(b"ok", now + offset, nonce(i)), now, "peer") == b"ok"
    assert not s.drops


def test_oversized_is_dropped_before_unpacking() -> None:
    s = sealer(max_size=100)
    assert s.open(b"\xc1" * 101, T0, "peer") is None  # garbage, but refused on size alone
    big = Sealer(KEY, max_size=1000).seal(b"x" * 200, T0, nonce(1))
    assert s.open(big, T0, "peer") is None
    assert s.drops == Counter({AuthDrop.OVERSIZED: 2})


def test_seal_refuses_oversized_result_and_accepts_exact_fit() -> None:
    s = sealer(max_size=200)
    overhead = len(s.seal(b"", T0, nonce(1)))
    fits = b"x" * (200 - overhead)  # payloads of up to 255 bytes keep the same 2-byte bin header
    d = s.seal(fits, T0, nonce(1))
    assert len(d) == 200
    assert s.open(d, T0, "peer") == fits
    with pytest.raises(ValueError, match="exceeds 200"):
        s.seal(fits + b"x", T0, nonce(2))


def test_default_max_size_is_one_udp_datagram() -> None:
    s = Sealer(KEY)
    with pytest.raises(ValueError, match="exceeds 65507"):
        s.seal(b"x" * 65507, T0, nonce(1))


@pytest.mark.parametrize("bad", [b"", b"x" * 15, b"x" * 17])
def test_seal_refuses_wrong_nonce_length(bad: bytes) -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        sealer().seal(b"x", T0, bad)


@pytest.mark.parametrize("now", [math.nan, math.inf, -math.inf])
def test_seal_refuses_non_finite_time(now: float) -> None:
    with pytest.raises(ValueError, match="finite"):
        sealer().seal(b"x", now, nonce(1))


def test_sealer_refuses_short_key_and_bad_limits() -> None:
    with pytest.raises(ValueError, match="at least 32"):
        Sealer(b"k" * 31)
    with pytest.raises(ValueError, match="window"):
        Sealer(KEY, window=0)
    with pytest.raises(ValueError, match="max_nonces"):
        Sealer(KEY, max_nonces=0)


def test_counters_are_exact() -> None:
    s = sealer(window=10.0, max_size=300)
    good = s.seal(b"good", T0, nonce(1))
    events = [
        (good, T0),  # accepted
        (good, T0 + 1),  # replayed
        (Sealer(OTHER_KEY).seal(b"forged", T0, nonce(2)), T0),  # bad mac
        (b"\xc1", T0),  # malformed
        (good[:-1], T0),  # malformed
        (b"\x00" * 301, T0),  # oversized
        (s.seal(b"old", T0 - 11, nonce(3)), T0),  # stale
        (s.seal(b"future", T0 + 11, nonce(4)), T0),  # stale
        (good, T0 + 2),  # replayed again
        (s.seal(b"fine", T0 + 1, nonce(5)), T0 + 1),  # accepted
    ]
    results = [s.open(d, now, "peer") for d, now in events]
    assert [r for r in results if r is not None] == [b"good", b"fine"]
    assert s.drops == Counter(
        {
            AuthDrop.REPLAYED: 2,
            AuthDrop.BAD_MAC: 1,
            AuthDrop.MALFORMED: 2,
            AuthDrop.OVERSIZED: 1,
            AuthDrop.STALE: 2,
        }
    )
    assert s.drops["replayed"] == 2  # StrEnum members and their values count the same key


# --- key files -----------------------------------------------------------------------------------------


def test_generate_and_load_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "ring.key"
    generate_key_file(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    key = load_ring_key(path)
    assert len(key) == MIN_KEY_BYTES
    assert path.read_text().strip() == key.hex()
    assert load_ring_key(str(path)) == key
    other = tmp_path / "other.key"
    generate_key_file(str(other))
    assert load_ring_key(other) != key


def test_generate_is_0600_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o277)
    try:
        generate_key_file(tmp_path / "ring.key")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "ring.key").stat().st_mode) == 0o600


def test_generate_refuses_to_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "ring.key"
    generate_key_file(path)
    before = path.read_bytes()
    with pytest.raises(KeyFileError, match="already exists"):
        generate_key_file(path)
    assert path.read_bytes() == before


def test_generate_refuses_to_follow_a_symlink(tmp_path: Path) -> None:
    link = tmp_path / "ring.key"
    link.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(KeyFileError, match="already exists"):
        generate_key_file(link)
    assert not (tmp_path / "elsewhere").exists()


def write_key(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def test_load_strips_whitespace(tmp_path: Path) -> None:
    key = bytes(range(40))
    hexkey = key.hex()
    path = write_key(tmp_path / "ring.key", f"  {hexkey[:30]}\n{hexkey[30:]}  \n\n")
    assert load_ring_key(path) == key


@pytest.mark.parametrize(
    ("mode", "verb"),
    [(0o644, "read"), (0o640, "read"), (0o604, "read"), (0o620, "change"), (0o666, "read or change")],
)
def test_load_refuses_permissions_open_to_others(tmp_path: Path, mode: int, verb: str) -> None:
    path = write_key(tmp_path / "ring.key", KEY.hex(), mode)
    with pytest.raises(KeyFileError) as err:
        load_ring_key(path)
    message = str(err.value)
    assert message.startswith(f"{path}: permissions {mode:04o} let other users {verb} the key")
    assert message.endswith(f"chmod 600 {path}")
    assert "\n" not in message


def test_load_refuses_permissions_0644_message(tmp_path: Path) -> None:
    path = write_key(tmp_path / "ring.key", KEY.hex(), 0o644)
    with pytest.raises(KeyFileError, match=r"ring\.key: permissions 0644 .* chmod 600 .*ring\.key$"):
        load_ring_key(path)


def test_load_accepts_owner_read_only(tmp_path: Path) -> None:
    assert load_ring_key(write_key(tmp_path / "ring.key", KEY.hex(), 0o400)) == KEY


@pytest.mark.parametrize("text", ["not hex at all", KEY.hex() + "zz", KEY.hex()[:-1], "é" * 64])
def test_load_refuses_non_hex(tmp_path: Path, text: str) -> None:
    path = write_key(tmp_path / "ring.key", text)
    with pytest.raises(KeyFileError, match="not hex") as err:
        load_ring_key(path)
    assert str(path) in str(err.value)
    assert text not in str(err.value)  # never echo what might be a secret


@pytest.mark.parametrize("length", [0, 1, MIN_KEY_BYTES - 1])
def test_load_refuses_short_key(tmp_path: Path, length: int) -> None:
    path = write_key(tmp_path / "ring.key", bytes(length).hex())
    with pytest.raises(KeyFileError, match=f"has {length} bytes, at least {MIN_KEY_BYTES}") as err:
        load_ring_key(path)
    assert str(path) in str(err.value)


def test_load_refuses_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.key"
    with pytest.raises(KeyFileError, match=r"absent\.key: cannot open"):
        load_ring_key(path)


def test_load_refuses_a_directory(tmp_path: Path) -> None:
    path = tmp_path / "ring.key"
    path.mkdir(mode=0o700)
    with pytest.raises(KeyFileError, match=r"ring\.key: not a regular file"):
        load_ring_key(path)


def test_load_refuses_a_fifo_without_hanging(tmp_path: Path) -> None:
    path = tmp_path / "ring.key"
    os.mkfifo(path, 0o600)
    with pytest.raises(KeyFileError, match=r"ring\.key: not a regular file"):
        load_ring_key(path)

"""llic/lean_msgpack.py against msgpack itself: the same bytes out, the same objects back, and
what msgpack refuses (or the protocol does not use) refused."""

from __future__ import annotations

import enum
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llic import lean_msgpack as lean

# every integer msgpack can hold, with the edges of each encoding
integers = st.one_of(
    st.integers(min_value=-(1 << 63), max_value=(1 << 64) - 1),
    st.sampled_from(
        [
            *(0, 127, 128, 255, 256, 65535, 65536, (1 << 32) - 1, 1 << 32, (1 << 64) - 1),
            *(-1, -32, -33, -128, -129, -32768, -32769, -(1 << 31), -(1 << 31) - 1, -(1 << 63)),
        ]
    ),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    integers,
    st.floats(allow_nan=False),
    st.text(max_size=300),
    st.binary(max_size=300),
)
objects = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=20),
        st.dictionaries(st.one_of(st.text(max_size=40), st.binary(max_size=5)), inner, max_size=20),
    ),
    max_leaves=60,
)


@settings(max_examples=400, deadline=None)
@given(objects)
def test_same_bytes_as_msgpack_and_the_same_object_back(obj: Any) -> None:
    data = msgpack.packb(obj, use_bin_type=True)
    assert lean.packb(obj) == data
    assert lean.unpackb(data) == msgpack.unpackb(data, raw=False, strict_map_key=True)


def test_large_containers_and_strings_take_the_wide_headers() -> None:
    for obj in ("x" * 70_000, b"y" * 70_000, list(range(70_000)), {str(i): i for i in range(70_000)}):
        data = msgpack.packb(obj, use_bin_type=True)
        assert lean.packb(obj) == data
        assert lean.unpackb(data) == obj


def test_tuples_str_enums_and_dict_subclasses_pack_as_their_plain_kind() -> None:
    class Kind(str, enum.Enum):  # noqa: UP042 (the shape of llic.task.Mode, for Python 3.9)
        A = "a"

    class Map(dict):  # type: ignore[type-arg]
        pass

    obj = {"t": Kind.A, "m": Map(x=(1, 2)), "i": True}
    assert lean.packb(obj) == msgpack.packb({"t": "a", "m": {"x": [1, 2]}, "i": True}, use_bin_type=True)


@pytest.mark.parametrize("value", [object(), {1, 2}, 1 << 64, -(1 << 63) - 1])
def test_what_msgpack_cannot_hold_is_refused(value: Any) -> None:
    with pytest.raises((TypeError, OverflowError)):
        lean.packb({"v": value})


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"\xc7\x01\x05x", id="ext8"),
        pytest.param(b"\xd4\x01\x00", id="fixext1"),
        pytest.param(b"\xc1", id="never-used"),
        pytest.param(b"\x81\x01\x02", id="int-key"),
        pytest.param(b"\x81\xc0\x02", id="nil-key"),
        pytest.param(b"\xa3ab", id="short-str"),
        pytest.param(b"\xda\x00", id="short-str16-header"),
        pytest.param(b"\xc4\x05abc", id="short-bin"),
        pytest.param(b"\x92\x01", id="short-list"),
        pytest.param(b"\xdd\xff\xff\xff\xff", id="huge-list-count"),
        pytest.param(b"\x01\x02", id="trailing-byte"),
        pytest.param(b"\xa2\xff\xfe", id="not-utf8"),
        pytest.param(b"\x91" * 100_000 + b"\x00", id="deep-nesting"),
        pytest.param(b"\xcb\x00\x00", id="short-float"),
    ],
)
def test_malformed_or_foreign_input_is_a_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        lean.unpackb(data)


def _has_extension(value: object) -> bool:
    """Whether msgpack decoded an extension type (ExtType, or a Timestamp) anywhere in `value`."""
    if isinstance(value, msgpack.ExtType | msgpack.Timestamp):
        return True
    if isinstance(value, list | tuple):
        return any(_has_extension(v) for v in value)
    if isinstance(value, dict):
        return any(_has_extension(k) or _has_extension(v) for k, v in value.items())
    return False


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40))
def test_arbitrary_bytes_read_as_msgpack_reads_them_or_refused(data: bytes) -> None:
    try:
        expected = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception:  # msgpack raises many kinds; the codec must refuse too
        with pytest.raises(ValueError):
            lean.unpackb(data)
        return
    if _has_extension(expected):  # the protocol allows no extension types, at any depth
        with pytest.raises(ValueError):
            lean.unpackb(data)
        return
    assert lean.unpackb(data) == expected

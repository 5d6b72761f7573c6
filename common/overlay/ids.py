"""128-bit node ids and the arithmetic of Pastry's circular id space.

Ids are plain ints in memory (fast to compare and XOR) and 16 bytes on the wire (msgpack has no
128-bit integers). "Closest" always means circular distance, ties going to the smaller id, so
that every node computes the same root for a key.
"""

from __future__ import annotations

import hashlib
from typing import Final

# Final: constants to a compiled build (docs/bench/build_compiled_sim.sh), not a global looked up at each use.
ID_BITS: Final = 128
ID_SPACE: Final = 1 << ID_BITS
ID_MASK: Final = ID_SPACE - 1


def node_id_from_name(name: str) -> int:
    """The id of a node configured by name: the first 128 bits of SHA-1(name)."""
    return int.from_bytes(hashlib.sha1(name.encode("utf-8")).digest()[:16], "big")


def id_to_bytes(node_id: int) -> bytes:
    """An id as its 16 bytes on the wire, big-endian."""
    return node_id.to_bytes(16, "big")


def id_from_bytes(data: bytes) -> int:
    """An id from its 16 wire bytes; ValueError for any other length."""
    if len(data) != 16:
        raise ValueError(f"a node id is 16 bytes, not {len(data)}")
    return int.from_bytes(data, "big")


def id_hex(node_id: int) -> str:
    """An id as 32 hex digits, for logs and configuration."""
    return f"{node_id:032x}"


def parse_id(text: str) -> int:
    """An id given in configuration as 32 hex digits."""
    value = int(text, 16)
    if not 0 <= value < ID_SPACE or len(text) > 32:
        raise ValueError(f"{text!r} is not a 128-bit id in hex")
    return value


def digit(node_id: int, row: int, b: int) -> int:
    """The row-th base-2^b digit of an id, most significant first."""
    return (node_id >> (ID_BITS - b * (row + 1))) & ((1 << b) - 1)


def shared_prefix_len(a: int, c: int, b: int) -> int:
    """How many leading base-2^b digits two ids share."""
    x = a ^ c
    if x == 0:
        return ID_BITS // b
    return (ID_BITS - x.bit_length()) // b


def cw_distance(src: int, dst: int) -> int:
    """Distance going clockwise (increasing ids) from src to dst."""
    return (dst - src) & ID_MASK


def ring_distance(a: int, c: int) -> int:
    """Distance between two ids the shorter way round the ring."""
    d = (a - c) & ID_MASK
    return min(d, ID_SPACE - d)


def closeness(key: int, node_id: int) -> tuple[int, int]:
    """Sort key: smaller is closer to `key`; ties go to the smaller id."""
    return (ring_distance(node_id, key), node_id)

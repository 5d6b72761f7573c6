"""Msgpack and length-prefixed frames: the part of the wire format (common.wire) that needs
neither pydantic nor structlog, so that a process that only frames bytes (the gateway's worker,
whose start every daemon and master_submitter wait for) starts without importing them."""

from __future__ import annotations

import struct
from typing import Any

import msgpack

DEFAULT_MAX_FRAME = 1 << 20  # 1 MiB: far above any protocol message, far below memory trouble
MAX_DATAGRAM = 65507  # the largest UDP payload over IPv4
HEADER = struct.Struct(">I")


class FrameTooLarge(Exception):
    """A frame header announced more bytes than the receiver accepts."""


def pack(obj: Any) -> bytes:
    """Msgpack bytes, with bytes kept binary and str as text."""
    return msgpack.packb(obj, use_bin_type=True)


def unpack(data: bytes) -> Any:
    """Strict msgpack decoding; raises ValueError (or a subclass) on anything malformed."""
    return msgpack.unpackb(data, raw=False, strict_map_key=True)


def unpack_array(data: bytes, length: int, shape: str) -> list[Any] | str:
    """A msgpack array of exactly `length` items, or a text saying why the data is not one."""
    try:
        value = unpack(data)
    except Exception as e:  # msgpack raises several unrelated types for malformed input
        return f"not msgpack: {type(e).__name__}: {e}"
    if not (isinstance(value, list) and len(value) == length):
        return f"not a {shape} envelope"
    return value


def frame(payload: bytes) -> bytes:
    """A payload with its 4-byte length header, for a stream."""
    return HEADER.pack(len(payload)) + payload


class FrameDecoder:
    """Splits a byte stream into frames, without I/O (fed by the bulk channel's TCP streams and
    the gateway's pipe)."""

    def __init__(self, max_size: int = DEFAULT_MAX_FRAME) -> None:
        self.max_size = max_size
        self._buffer = bytearray()

    def feed(self, data: bytes) -> None:
        """Append received bytes; take frames out with next_frame."""
        self._buffer += data

    @property
    def pending(self) -> int:
        """Bytes received that do not yet make a whole frame (non-zero at EOF means truncation)."""
        return len(self._buffer)

    def next_frame(self) -> bytes | None:
        """The next complete payload, or None if more bytes are needed.

        Raises FrameTooLarge as soon as the header is seen, so an oversized frame is never read.
        """
        if len(self._buffer) < HEADER.size:
            return None
        (length,) = HEADER.unpack_from(self._buffer)
        if length > self.max_size:
            raise FrameTooLarge(f"frame of {length} bytes exceeds limit of {self.max_size}")
        end = HEADER.size + length
        if len(self._buffer) < end:
            return None
        payload = bytes(self._buffer[HEADER.size : end])
        del self._buffer[:end]
        return payload

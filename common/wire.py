"""The wire format shared by every daemon: msgpack, typed by pydantic, versioned.

Two carriers:
- streams (TCP, pipes): each frame is a 4-byte big-endian length followed by that many bytes;
- datagrams (UDP): one message per datagram, no length prefix.

A message travels as the msgpack array `[version, type, body]`. Receiving is defensive by
design: a peer can send anything, so a frame that is too large (checked from the header, before
any buffer is grown), truncated, not msgpack, of another protocol version, of an unknown type or
failing validation is counted in `MessageCodec.drops`, logged with the peer's name (rate-limited
per peer and reason, `common.droplog`), and dropped.
Nothing raises into the caller's receive loop.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from enum import StrEnum
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from common.droplog import DropLog

# the framing itself (msgpack and length headers only) lives in common.framing, which the
# gateway's worker imports without pydantic and structlog; re-exported here
from common.framing import (  # noqa: F401
    DEFAULT_MAX_FRAME,
    HEADER,
    MAX_DATAGRAM,
    FrameDecoder,
    FrameTooLarge,
    frame,
    pack,
    unpack,
    unpack_array,
)

PROTOCOL_VERSION = 1


class DropReason(StrEnum):
    """Why a codec dropped a message: the keys of `MessageCodec.drops`."""

    OVERSIZED = "oversized"
    TRUNCATED = "truncated"
    GARBAGE = "garbage"
    BAD_VERSION = "bad_version"
    UNKNOWN_TYPE = "unknown_type"
    INVALID = "invalid"
    BROKEN = "broken_connection"


class Message(BaseModel):
    """Base of every typed protocol message. Subclasses set TYPE, a name unique in their codec."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    TYPE: ClassVar[str]


class MessageCodec:
    """Encodes and decodes one protocol's messages; counts what it had to drop and why."""

    def __init__(
        self,
        types: Iterable[type[Message]],
        *,
        version: int = PROTOCOL_VERSION,
        max_size: int = DEFAULT_MAX_FRAME,
        name: str = "wire",
    ) -> None:
        self.version = version
        self.max_size = max_size
        self.name = name
        self.types: dict[str, type[Message]] = {}
        for t in types:
            if t.TYPE in self.types:
                raise ValueError(f"message type {t.TYPE!r} registered twice")
            self.types[t.TYPE] = t
        self.drops: Counter[str] = Counter()
        self.drop_log = DropLog("wire")

    def encode(self, msg: Message) -> bytes:
        """A message as `[version, type, body]` msgpack; TypeError for another protocol's message."""
        if self.types.get(msg.TYPE) is not type(msg):
            raise TypeError(f"{type(msg).__name__} is not a message of protocol {self.name}")
        payload = pack([self.version, msg.TYPE, msg.model_dump(mode="python")])
        if len(payload) > self.max_size:
            raise ValueError(f"{msg.TYPE} message of {len(payload)} bytes exceeds {self.max_size}")
        return payload

    def encode_frame(self, msg: Message) -> bytes:
        """An encoded message with its length header, for a stream."""
        return frame(self.encode(msg))

    def encode_datagram(self, msg: Message) -> bytes:
        """An encoded message, checked to fit one UDP datagram."""
        payload = self.encode(msg)
        if len(payload) > min(self.max_size, MAX_DATAGRAM):
            raise ValueError(f"{msg.TYPE} message of {len(payload)} bytes does not fit a datagram")
        return payload

    def drop(self, reason: DropReason, peer: object, detail: str) -> None:
        """Count a dropped message under its reason; the log line is rate-limited (common.droplog)."""
        self.drops[reason] += 1
        self.drop_log.drop(self.name, peer, str(reason), detail)

    def decode(self, payload: bytes, peer: object) -> Message | None:
        """The message in a payload, or None after logging and counting why it was dropped."""
        envelope = unpack_array(payload, 3, "[version, type, body]")
        if isinstance(envelope, str):
            self.drop(DropReason.GARBAGE, peer, envelope)
            return None
        version, type_name, body = envelope
        if version != self.version:
            self.drop(DropReason.BAD_VERSION, peer, f"version {version!r}, expected {self.version}")
            return None
        cls = self.types.get(type_name) if isinstance(type_name, str) else None
        if cls is None:
            self.drop(DropReason.UNKNOWN_TYPE, peer, f"type {type_name!r}")
            return None
        try:
            return cls.model_validate(body)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "body"
            self.drop(DropReason.INVALID, peer, f"{type_name}.{where}: {first['msg']}")
            return None

    def decode_datagram(self, data: bytes, peer: object) -> Message | None:
        """The message in a datagram, or None if it is oversized or does not decode."""
        if len(data) > self.max_size:
            self.drop(DropReason.OVERSIZED, peer, f"datagram of {len(data)} bytes exceeds {self.max_size}")
            return None
        return self.decode(data, peer)

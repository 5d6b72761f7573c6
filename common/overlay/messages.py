"""The overlay's messages, and typed application payloads carried inside them.

Applications (poolD, faultD) declare their payloads with `@app_message`; the overlay carries them
as `[type, body]` and validates them back into their classes on receipt, so an unknown or
malformed payload fails validation and the whole datagram is dropped and counted by the codec.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import BeforeValidator, ConfigDict, PlainSerializer

from common.overlay.ids import id_from_bytes, id_to_bytes
from common.wire import Message, MessageCodec

_APP_TYPES: dict[str, type[Message]] = {}
T = TypeVar("T", bound=type[Message])


def app_message(cls: T) -> T:
    """Register an application payload type (its TYPE must be unique across the suite)."""
    existing = _APP_TYPES.get(cls.TYPE)
    if existing is not None and existing is not cls:
        raise ValueError(f"application message type {cls.TYPE!r} registered twice")
    _APP_TYPES[cls.TYPE] = cls
    return cls


def _load_app(value: Any) -> Message:
    if isinstance(value, Message):
        return value
    if not (isinstance(value, list | tuple) and len(value) == 2 and isinstance(value[0], str)):
        raise ValueError("application payload must be [type, body]")
    cls = _APP_TYPES.get(value[0])
    if cls is None:
        raise ValueError(f"unknown application payload type {value[0]!r}")
    return cls.model_validate(value[1])


def _dump_app(value: Message) -> list[Any]:
    return [value.TYPE, value.model_dump(mode="python")]


def _load_id(value: Any) -> int:
    if isinstance(value, bytes):
        return id_from_bytes(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 128:
        return value
    raise ValueError("a node id is 16 bytes")


AppPayload = Annotated[Message, BeforeValidator(_load_app), PlainSerializer(_dump_app)]
NodeId = Annotated[int, BeforeValidator(_load_id), PlainSerializer(id_to_bytes)]


class Peer(Message):
    """A node as others know it: id and transport address ("host:port", or a simulator name)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    TYPE = "peer"
    id: NodeId
    addr: str


class Ping(Message):
    """Probe and keepalive; `sent` is the sender's own clock, echoed so it can measure RTT."""

    TYPE = "ping"
    sender: Peer
    nonce: int
    sent: float


class Pong(Message):
    """Answer to a Ping, echoing its nonce and the sender's `sent` time."""

    TYPE = "pong"
    sender: Peer
    nonce: int
    sent: float


class JoinRequest(Message):
    """Routed towards the joiner's id; every hop tells the joiner what it knows. A `refresh`
    request is a joined node's periodic self-lookup: only the root answers, with its leaf set."""

    TYPE = "join"
    joiner: Peer
    hops: int = 0
    refresh: bool = False


class JoinInfo(Message):
    """A hop's routing rows (and, from the root, its leaf set) for a joining node."""

    TYPE = "join_info"
    sender: Peer
    candidates: list[Peer]
    leaf_set: list[Peer] = []
    root: bool = False


class Hello(Message):
    """A node that finished joining tells the nodes it should be known to."""

    TYPE = "hello"
    sender: Peer


class LeafSetRequest(Message):
    """Asks a node for its leaf set, to replace a dead leaf member."""

    TYPE = "leaf_req"
    sender: Peer


class LeafSetPush(Message):
    """A node's leaf set, sent on request, to new leaf members, and periodically to neighbours."""

    TYPE = "leaf_set"
    sender: Peer
    leaf_set: list[Peer]


class RowRequest(Message):
    """Asks a node for the nodes it knows that fit row `row` of the asker's routing table."""

    TYPE = "row_req"
    sender: Peer
    row: int


class RowReply(Message):
    """The nodes that fit the requested row of the asker's routing table."""

    TYPE = "row"
    sender: Peer
    row: int
    entries: list[Peer]


class Route(Message):
    """An application payload routed by key to the live node numerically closest to it."""

    TYPE = "route"
    key: NodeId
    origin: Peer
    payload: AppPayload
    hops: int = 0
    via: Peer | None = None  # the previous hop, which waits for our RouteAck
    hop_nonce: int = 0


class RouteAck(Message):
    """Per-hop acknowledgement: a hop that does not ack in time is routed around."""

    TYPE = "route_ack"
    sender: Peer
    hop_nonce: int


class Direct(Message):
    """An application payload for one node (row sends, leaf-set sends)."""

    TYPE = "direct"
    sender: Peer
    payload: AppPayload


class Broadcast(Message):
    """Tree broadcast over routing-table rows: a receiver at `level` covers rows >= level."""

    TYPE = "bcast"
    origin: Peer
    seq: int
    level: int
    payload: AppPayload


OVERLAY_MESSAGES: list[type[Message]] = [
    Ping, Pong, JoinRequest, JoinInfo, Hello, LeafSetRequest, LeafSetPush, RowRequest, RowReply,
    Route, RouteAck, Direct, Broadcast,
]  # fmt: skip


def overlay_codec(name: str = "overlay", max_size: int = 65507) -> MessageCodec:
    """A codec for the overlay's own messages (application payloads ride inside them)."""
    return MessageCodec(OVERLAY_MESSAGES, name=name, max_size=max_size)

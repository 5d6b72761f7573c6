"""The overlay's messages, and typed application payloads carried inside them.

Applications (poolD, faultD) declare their payloads with `@app_message`, as subclasses of
`AppMessage`; the overlay carries them as `[type, body]` (or `[type, body, proof]`, see below) and
validates them back into their classes on receipt, so an unknown or malformed payload fails
validation and the whole datagram is dropped and counted by the codec. Every field a peer sends
is bounded here (counts, list lengths, finite floats), so that the pure core can do arithmetic on
what it receives without a check of its own.

Identity: an application payload says who it comes from (`AppMessage.claims`: a node, a pool,
hosts). The real driver signs each payload it originates (the `proof`, made and checked in
`common.overlay.claims`), and receivers check those claims against the signer's certificate
before the payload reaches a core; a proof travels with the payload when it is forwarded (an
offer along a row, an alive down the broadcast tree) so that the origin, not the last hop, is what
is checked. The simulator carries payloads as objects and never sets a proof.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Self, TypeVar

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from common.overlay.ids import id_from_bytes, id_to_bytes
from common.wire import Message, MessageCodec

MAX_ADDR = 261  # a DNS name (253) and a port
ADDR = r"^[A-Za-z0-9._:\[\]-]{1,261}$"


@dataclass(frozen=True)
class Claims:
    """Who an application payload says it comes from; checked against the signer's certificate.

    `node`: the node it speaks for (id and address); `pool`: the pool it names as its own;
    `hosts`: hosts it names as the sender's (a collector's host), each of which the certificate
    must list."""

    node: Peer | None = None
    pool: str | None = None
    hosts: tuple[str, ...] = ()


class AppMessage(Message):
    """Base of application payloads: what they claim, and the proof that travels with them."""

    FORWARD_MUTABLE: ClassVar[frozenset[str]] = frozenset()
    """Fields a forwarder changes (an offer's ttl): left out of what the origin signs."""

    _proof: bytes | None = PrivateAttr(None)

    def claims(self) -> Claims:
        """Who this payload says it comes from (nothing, unless a subclass says so)."""
        return Claims()

    @property
    def proof(self) -> bytes | None:
        """The origin's signature with its certificate (common.overlay.claims), if any."""
        return self._proof

    def with_proof(self, proof: bytes) -> AppMessage:
        """A copy of this payload carrying `proof`."""
        copy = self.model_copy()
        copy._proof = proof
        return copy


_APP_TYPES: dict[str, type[AppMessage]] = {}
T = TypeVar("T", bound=type[AppMessage])
MAX_PROOF = 8192


def app_message(cls: T) -> T:
    """Register an application payload type (its TYPE must be unique across the suite)."""
    if not issubclass(cls, AppMessage):
        raise TypeError(f"{cls.__name__} must derive from AppMessage to be an application payload")
    existing = _APP_TYPES.get(cls.TYPE)
    if existing is not None and existing is not cls:
        raise ValueError(f"application message type {cls.TYPE!r} registered twice")
    _APP_TYPES[cls.TYPE] = cls
    return cls


def _load_app(value: Any) -> Message:
    if isinstance(value, Message):
        return value
    if not (isinstance(value, list | tuple) and len(value) in (2, 3) and isinstance(value[0], str)):
        raise ValueError("application payload must be [type, body] or [type, body, proof]")
    cls = _APP_TYPES.get(value[0])
    if cls is None:
        raise ValueError(f"unknown application payload type {value[0]!r}")
    msg = cls.model_validate(value[1])
    if len(value) == 3:
        proof = value[2]
        if not (isinstance(proof, bytes) and len(proof) <= MAX_PROOF):
            raise ValueError(f"an application payload's proof is at most {MAX_PROOF} bytes")
        msg._proof = proof
    return msg


def _dump_app(value: Message) -> list[Any]:
    proof = getattr(value, "_proof", None)
    body = [value.TYPE, value.model_dump(mode="python")]
    return body if proof is None else [*body, proof]


def _load_id(value: Any) -> int:
    if isinstance(value, bytes):
        return id_from_bytes(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 128:
        return value
    raise ValueError("a node id is 16 bytes")


MAX_ROW = 127  # rows of a routing table: 128 / b, b >= 1
MAX_LEAF_SET = 256

AppPayload = Annotated[Message, BeforeValidator(_load_app), PlainSerializer(_dump_app)]
NodeId = Annotated[int, BeforeValidator(_load_id), PlainSerializer(id_to_bytes)]
Rtt = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
"""A round-trip time in seconds the sender measured. Receivers use one only as a bound that lets
them skip a probe (common.overlay.node: `_consider`), never as a measurement of their own, so a
lying value can only make them skip a probe or send one."""
OptRtt = Rtt | None  # None: the sender has not measured that node


def _check_paired(peers: list[Peer], rtts: list[float | None], name: str) -> None:
    """An RTT list, when sent, has one value (or None) per listed peer."""
    if rtts and len(rtts) != len(peers):
        raise ValueError(f"{name}: {len(rtts)} round-trip times for {len(peers)} peers")


# ----------------------------------------------------------------------------- versions
# Rolling upgrades mix versions in one ring. Nodes before 2026-11-27 (e.g. 3715ee6) and those of
# 41371ec..6fcd0b1 decode strictly: a message with a field they do not know is dropped. So a
# field added since is optional (a default the receiver assumes when it is absent), listed in
# its message's EXTENSIONS, left off the wire while unset, and set only for a peer that announced
# the capability it belongs to (common.overlay.node: `caps`). A node announces its capabilities
# in the high bits of its pings' nonce, a field every version echoes in its pong without reading
# it (an old node, which knows no announcement, then simply is never sent an extension), and in
# its pongs' `caps` to a pinger that announced CAP_TOLERANT. From CAP_TOLERANT on, unknown
# fields are ignored (OverlayMessage): a later version may send a new optional field to any
# CAP_TOLERANT peer, and needs a capability bit of its own only to know that a peer acts on it.

CAP_RTT = 1
"""Offers and requests may carry the sender's measured RTTs (2026-11-27)."""
CAP_TOLERANT = 2
"""Ignores unknown fields; understands Pong.caps and JoinRequest.caps."""
CAP_JOIN_ACK = 4
"""Acks a join request that carries `hop_nonce` with a RouteAck to its `via` (2026-11-27): a
forwarder routes the request around a hop that does not (common.overlay.node: `_forward_join`)."""
CAPABILITIES = CAP_RTT | CAP_TOLERANT | CAP_JOIN_ACK
"""What this version speaks."""
CAPS_SHIFT = 48
MAX_CAPS = (1 << 16) - 1  # a nonce is a msgpack uint64: 16 bits above CAPS_SHIFT
MAX_FIELDS = 32
"""Fields an overlay message (or a Peer) may hold, unknown ones included: ignoring unknown fields
must not mean accepting any map (the datagram's size bounds it too)."""


def caps_in_nonce(nonce: int) -> int:
    """The capabilities a ping's sender announced in its nonce (0 from a node before them)."""
    return (nonce >> CAPS_SHIFT) & MAX_CAPS


def _few_fields(data: Any) -> Any:
    if isinstance(data, dict) and len(data) > MAX_FIELDS:
        raise ValueError(f"{len(data)} fields, at most {MAX_FIELDS}")
    return data


class OverlayMessage(Message):
    """Base of the overlay's own messages: unknown fields are ignored (at most MAX_FIELDS in
    all), and the optional fields in EXTENSIONS are left off the wire while unset, so that a
    message without them is exactly what nodes before them decode."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    EXTENSIONS: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="before")
    @classmethod
    def _bounded(cls, data: Any) -> Any:
        return _few_fields(data)

    @model_serializer(mode="wrap")
    def _without_unset_extensions(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        for name in self.EXTENSIONS:
            value = data.get(name)
            if value is None or (isinstance(value, list) and not value):
                del data[name]
        return data

    @classmethod
    def built(cls, **fields: Any) -> Self:
        """A message the core builds from what it holds (its own peer, peers and values it
        validated when they arrived, its clock and counters), without validating them again:
        validation was ~5 % of the simulator's time, and what comes off the network is still
        validated (MessageCodec.decode; the core's messages are encoded as they are). The caller
        passes every required field, each value of its field's type (a list is kept, not copied:
        pass a new one). Equal to `cls(**fields)` (tests/common/overlay/test_built_messages.py)."""
        shape = _SHAPES.get(cls)
        if shape is None:
            shape = _SHAPES[cls] = _shape_of(cls)
        data = shape | fields
        if len(data) != len(shape):
            raise TypeError(f"{cls.__name__} has no field {sorted(fields.keys() - shape.keys())}")
        msg = _new(cls)
        _set_slot(msg, "__dict__", data)
        _set_slot(msg, "__pydantic_fields_set__", set(fields))
        _set_slot(msg, "__pydantic_extra__", None)
        _set_slot(msg, "__pydantic_private__", None)
        return msg


_new = object.__new__
_set_slot = object.__setattr__
_SHAPES: dict[type[OverlayMessage], dict[str, Any]] = {}


def _shape_of(cls: type[OverlayMessage]) -> dict[str, Any]:
    """A message type's fields in order, with their defaults (None for required ones): what
    `OverlayMessage.built` fills in."""
    fields = cls.model_fields
    if any(f.default_factory is not None for f in fields.values()):
        raise TypeError(f"{cls.__name__}: OverlayMessage.built knows no default factories")
    return {name: None if f.is_required() else f.default for name, f in fields.items()}


class Peer(Message):
    """A node as others know it: id and transport address ("host:port", or a simulator name).
    Unknown fields are ignored, as in OverlayMessage."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _bounded(cls, data: Any) -> Any:
        return _few_fields(data)

    TYPE = "peer"
    id: NodeId
    addr: str = Field(pattern=ADDR)


class Ping(OverlayMessage):
    """Probe and keepalive; `sent` is the sender's own clock, echoed so it can measure RTT. The
    nonce's bits from CAPS_SHIFT up announce the sender's capabilities (caps_in_nonce)."""

    TYPE = "ping"
    sender: Peer
    nonce: int = Field(ge=0)
    sent: float = Field(allow_inf_nan=False)


class Pong(OverlayMessage):
    """Answer to a Ping, echoing its nonce and the sender's `sent` time; `caps`: the answering
    node's capabilities, for a pinger that announced CAP_TOLERANT (None: none, or not told)."""

    TYPE = "pong"
    EXTENSIONS = ("caps",)
    sender: Peer
    nonce: int = Field(ge=0)
    sent: float = Field(allow_inf_nan=False)
    caps: int | None = Field(None, ge=0, le=MAX_CAPS)


class JoinRequest(OverlayMessage):
    """Routed towards the joiner's id; every hop tells the joiner what it knows. A `refresh`
    request is a joined node's periodic self-lookup: only the root answers, with its leaf set.
    `via` and `hop_nonce`: the previous hop, which waits for our RouteAck (sent only to a hop
    that announced CAP_JOIN_ACK; None: nobody waits)."""

    TYPE = "join"
    EXTENSIONS = ("caps", "via", "hop_nonce")
    joiner: Peer
    hops: int = Field(0, ge=0)  # no upper bound: the core adds one per hop without validating
    refresh: bool = False
    caps: int | None = Field(None, ge=0, le=MAX_CAPS)  # the joiner's, for hops that are CAP_TOLERANT
    via: Peer | None = None
    hop_nonce: int | None = Field(None, ge=0)


class JoinInfo(OverlayMessage):
    """A hop's routing rows (and, from the root, its leaf set) for a joining node; `*_rtts`: the
    hop's measured round-trip time to each (None where it has none), or empty."""

    TYPE = "join_info"
    EXTENSIONS = ("candidate_rtts", "leaf_rtts")
    sender: Peer
    candidates: list[Peer] = Field(max_length=4096)
    leaf_set: list[Peer] = Field([], max_length=MAX_LEAF_SET)
    root: bool = False
    candidate_rtts: list[OptRtt] = Field([], max_length=4096)
    leaf_rtts: list[OptRtt] = Field([], max_length=MAX_LEAF_SET)

    @model_validator(mode="after")
    def _paired(self) -> JoinInfo:
        _check_paired(self.candidates, self.candidate_rtts, "candidate_rtts")
        _check_paired(self.leaf_set, self.leaf_rtts, "leaf_rtts")
        return self


class Hello(OverlayMessage):
    """A node that finished joining tells the nodes it should be known to; `rtt`: its measured
    round-trip time to the receiver, if it has one (round trips are symmetric)."""

    TYPE = "hello"
    EXTENSIONS = ("rtt",)
    sender: Peer
    rtt: OptRtt = None


class LeafSetRequest(OverlayMessage):
    """Asks a node for its leaf set, to replace a dead leaf member; `rtt` as in Hello."""

    TYPE = "leaf_req"
    EXTENSIONS = ("rtt",)
    sender: Peer
    rtt: OptRtt = None


class LeafSetPush(OverlayMessage):
    """A node's leaf set, sent on request, to new leaf members, and periodically to neighbours;
    `rtts`: the sender's measured round-trip time to each member (None where it has none), or empty."""

    TYPE = "leaf_set"
    EXTENSIONS = ("rtts",)
    sender: Peer
    leaf_set: list[Peer] = Field(max_length=MAX_LEAF_SET)
    rtts: list[OptRtt] = Field([], max_length=MAX_LEAF_SET)

    @model_validator(mode="after")
    def _paired(self) -> LeafSetPush:
        _check_paired(self.leaf_set, self.rtts, "rtts")
        return self


class RowRequest(OverlayMessage):
    """Asks a node for the nodes it knows that fit row `row` of the asker's routing table; `rtt`
    as in Hello."""

    TYPE = "row_req"
    EXTENSIONS = ("rtt",)
    sender: Peer
    row: int = Field(ge=0, le=MAX_ROW)
    rtt: OptRtt = None


class RowReply(OverlayMessage):
    """The nodes that fit the requested row of the asker's routing table; `rtts`: the sender's
    measured round-trip time to each (0 for itself, None where it has none), or empty."""

    TYPE = "row"
    EXTENSIONS = ("rtts",)
    sender: Peer
    row: int = Field(ge=0, le=MAX_ROW)
    entries: list[Peer] = Field(max_length=1024)
    rtts: list[OptRtt] = Field([], max_length=1024)

    @model_validator(mode="after")
    def _paired(self) -> RowReply:
        _check_paired(self.entries, self.rtts, "rtts")
        return self


class Route(OverlayMessage):
    """An application payload routed by key to the live node numerically closest to it."""

    TYPE = "route"
    key: NodeId
    origin: Peer
    payload: AppPayload
    hops: int = Field(0, ge=0)
    via: Peer | None = None  # the previous hop, which waits for our RouteAck
    hop_nonce: int = Field(0, ge=0)


class RouteAck(OverlayMessage):
    """Per-hop acknowledgement: a hop that does not ack in time is routed around."""

    TYPE = "route_ack"
    sender: Peer
    hop_nonce: int = Field(ge=0)


class Direct(OverlayMessage):
    """An application payload for one node (row sends, leaf-set sends)."""

    TYPE = "direct"
    sender: Peer
    payload: AppPayload


class Broadcast(OverlayMessage):
    """Tree broadcast over routing-table rows: a receiver at `level` covers rows >= level."""

    TYPE = "bcast"
    origin: Peer
    seq: int = Field(ge=0)
    level: int = Field(ge=0, le=MAX_ROW + 1)  # rows >= level; negative levels once broke the table
    payload: AppPayload


class Heartbeat(OverlayMessage):
    """Sent every keepalive interval to our nearest smaller leaf-set neighbour, which watches
    the silence of its nearest larger one (any message from it counts as well)."""

    TYPE = "heartbeat"
    sender: Peer


OVERLAY_MESSAGES: list[type[Message]] = [
    Ping, Pong, JoinRequest, JoinInfo, Hello, LeafSetRequest, LeafSetPush, RowRequest, RowReply,
    Route, RouteAck, Direct, Broadcast, Heartbeat,
]  # fmt: skip


def overlay_codec(name: str = "overlay", max_size: int = 65507) -> MessageCodec:
    """A codec for the overlay's own messages (application payloads ride inside them)."""
    return MessageCodec(OVERLAY_MESSAGES, name=name, max_size=max_size)

"""The overlay's wire models as of commit 3715ee6 (before 2026-11-27): a frozen copy, so that the
simulator can decode what a node of that version receives exactly as it does (strict pydantic
models, `extra="forbid"`: a message with a field it does not know is dropped as `invalid`).
Used by sim.mixed_ring only; never by the daemons. Do not edit: it is what old nodes run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import BeforeValidator, ConfigDict, Field, PlainSerializer, PrivateAttr

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


class Peer(Message):
    """A node as others know it: id and transport address ("host:port", or a simulator name)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    TYPE = "peer"
    id: NodeId
    addr: str = Field(pattern=ADDR)


class Ping(Message):
    """Probe and keepalive; `sent` is the sender's own clock, echoed so it can measure RTT."""

    TYPE = "ping"
    sender: Peer
    nonce: int = Field(ge=0)
    sent: float = Field(allow_inf_nan=False)


class Pong(Message):
    """Answer to a Ping, echoing its nonce and the sender's `sent` time."""

    TYPE = "pong"
    sender: Peer
    nonce: int = Field(ge=0)
    sent: float = Field(allow_inf_nan=False)


class JoinRequest(Message):
    """Routed towards the joiner's id; every hop tells the joiner what it knows. A `refresh`
    request is a joined node's periodic self-lookup: only the root answers, with its leaf set."""

    TYPE = "join"
    joiner: Peer
    hops: int = Field(0, ge=0)  # no upper bound: the core adds one per hop without validating
    refresh: bool = False


class JoinInfo(Message):
    """A hop's routing rows (and, from the root, its leaf set) for a joining node."""

    TYPE = "join_info"
    sender: Peer
    candidates: list[Peer] = Field(max_length=4096)
    leaf_set: list[Peer] = Field([], max_length=MAX_LEAF_SET)
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
    leaf_set: list[Peer] = Field(max_length=MAX_LEAF_SET)


class RowRequest(Message):
    """Asks a node for the nodes it knows that fit row `row` of the asker's routing table."""

    TYPE = "row_req"
    sender: Peer
    row: int = Field(ge=0, le=MAX_ROW)


class RowReply(Message):
    """The nodes that fit the requested row of the asker's routing table."""

    TYPE = "row"
    sender: Peer
    row: int = Field(ge=0, le=MAX_ROW)
    entries: list[Peer] = Field(max_length=1024)


class Route(Message):
    """An application payload routed by key to the live node numerically closest to it."""

    TYPE = "route"
    key: NodeId
    origin: Peer
    payload: AppPayload
    hops: int = Field(0, ge=0)
    via: Peer | None = None  # the previous hop, which waits for our RouteAck
    hop_nonce: int = Field(0, ge=0)


class RouteAck(Message):
    """Per-hop acknowledgement: a hop that does not ack in time is routed around."""

    TYPE = "route_ack"
    sender: Peer
    hop_nonce: int = Field(ge=0)


class Direct(Message):
    """An application payload for one node (row sends, leaf-set sends)."""

    TYPE = "direct"
    sender: Peer
    payload: AppPayload


class Broadcast(Message):
    """Tree broadcast over routing-table rows: a receiver at `level` covers rows >= level."""

    TYPE = "bcast"
    origin: Peer
    seq: int = Field(ge=0)
    level: int = Field(ge=0, le=MAX_ROW + 1)  # rows >= level; negative levels once broke the table
    payload: AppPayload


class Heartbeat(Message):
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

"""Property-based fuzzing (hypothesis) of the decoders of identity and the wire, and of the four
pure cores' message handlers (overlay node, role machine, poolD core, llic master core) fed
arbitrary but well-typed messages: nothing raises, and what the cores keep stays sane. Bounded to
a few seconds each, for CI. The byte-level decoders of the wire, the ring MAC and llic's protocol
are fuzzed beside their modules (tests/common/test_wire.py, tests/common/overlay/test_auth.py,
tests/llic/test_protocol.py)."""

from __future__ import annotations

import math
import os
import random
import time
from collections import deque
from collections.abc import Iterator
from typing import get_args

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import event as hypothesis_event
from hypothesis import strategies as st

from common.condor.types import PoolLoad, ScheddLoad
from common.droplog import DropLog
from common.overlay.certs import NodeCertificate
from common.overlay.claims import ClaimChecker, endorse
from common.overlay.envelope import SignedSealer
from common.overlay.identity import IdentityFiles, NodeIdentity, load_identity
from common.overlay.messages import (
    _APP_TYPES,
    CAPS_SHIFT,
    MAX_CAPS,
    OVERLAY_MESSAGES,
    Broadcast,
    Direct,
    Heartbeat,
    Hello,
    JoinInfo,
    JoinRequest,
    LeafSetPush,
    LeafSetRequest,
    Peer,
    Ping,
    Pong,
    Route,
    RouteAck,
    RowReply,
    RowRequest,
)
from common.overlay.node import OverlayNode, OverlayParams
from common.overlay.ratelimit import PeerRateLimiter
from common.service import parse_request
from common.wire import Message, pack
from deploy.harness.ring_keys import RingKeys
from faultD.messages import (
    Alive,
    Handover,
    ManagerMissing,
    PoolState,
    PreemptReplacement,
    ReplicaAck,
    ReplicaPush,
    StateFile,
)
from faultD.role import Role, RoleMachine, RoleParams
from llic.config import LlicConfig
from llic.events import AgentConnected, BulkReady, ConnectionBroken, ResultReceived, TransferDone
from llic.master_core import MasterCore
from llic.task import STATUS_LAUNCH_FAILED, STATUS_OK, TaskResult
from poolD.config import DiscoverySection, FlockingSection
from poolD.core import (
    Action,
    CoreOutput,
    CoreSettings,
    FlockFromApplied,
    FlockToApplied,
    Measure,
    PoolCore,
    ReadLoad,
    Send,
    SetFlockFrom,
    SetFlockTo,
    ShutOutDone,
    ShutOutSchedds,
)
from poolD.flock_to_readback import ReadFlockTo
from poolD.flock_trust import ApproveToken, InstallToken, RemoveToken, RequestToken
from poolD.messages import (
    Announcement,
    CollectorMoved,
    FlockIntent,
    FlockReply,
    TokenRequestNotice,
    TokenVerdict,
)
from poolD.policy import Policy, PolicyFile, Rule
from poolD.state import decode_state, encode_state

pytestmark = pytest.mark.hostile

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# A few ids and addresses, so that messages meet the nodes they talk about.
IDS = [
    0,
    1,
    (1 << 127) + 5,
    (1 << 128) - 1,
    0x0123456789ABCDEF0123456789ABCDEF,
    0xFEDCBA98765432100123456789ABCDEF,
]
ids = st.one_of(st.sampled_from(IDS), st.integers(0, (1 << 128) - 1))
addrs = st.sampled_from(["n1:1", "n2:2", "10.0.0.1:7640", "h:65535", "x"])
peers = st.builds(Peer, id=ids, addr=addrs)
small = st.integers(0, 1 << 20)
times = st.floats(-1e9, 1e12, allow_nan=False, allow_infinity=False)


@pytest.fixture(scope="module")
def identity(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RingKeys, NodeIdentity]]:
    keys = RingKeys(tmp_path_factory.mktemp("fuzz-keys"), ring="poold")
    files = keys.node("fuzz", hosts=["127.0.0.1"], pool="fuzz")
    yield keys, load_identity(IdentityFiles(files.key, files.cert, keys.ca_file, None))


# ----------------------------------------------------------------------------- decoders


@FAST
@given(data=st.binary(max_size=2000))
def test_certificate_decoder_never_raises_but_value_error(data: bytes) -> None:
    try:
        cert = NodeCertificate.from_wire(data)
    except ValueError:
        return
    assert NodeCertificate.from_wire(cert.to_wire()) == cert


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deep"),  # was a RecursionError traceback
        ('{"node_id": 5, "public_key": "00", "signature": "00"}', "^field node_id: not hex text$"),
        ('{"node_id": "zz", "public_key": "00", "signature": "00"}', "^field node_id: not hex text$"),
        ('{"node_id": "01", "public_key": "zz", "signature": "00"}', "^field public_key: not hex text$"),
        ('{"public_key": "00"}', "not a node certificate: KeyError"),
    ],
)
def test_a_certificate_file_that_is_not_one_is_a_value_error_naming_why(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        NodeCertificate.from_json(text)


@FAST
@given(
    data=st.one_of(
        st.binary(max_size=3000), st.builds(lambda xs: pack(xs), st.lists(st.binary(), max_size=5))
    )
)
def test_envelope_open_never_raises_on_garbage(identity: tuple[RingKeys, NodeIdentity], data: bytes) -> None:
    keys, me = identity
    ring_key = bytes.fromhex(keys.key_file.read_text().strip())
    sealer = SignedSealer(ring_key, me, context="datagram", limiter=PeerRateLimiter(1e6, 1e6))
    sealer.port = 7640
    assert sealer.open(data, time.time(), ("127.0.0.1", 1)) is None
    assert sum(sealer.drops.values()) == 1


@FAST
@given(
    flip=st.integers(0, 10_000),
    recipient=st.sampled_from(["127.0.0.1:7640", "127.0.0.1:7641", "10.0.0.1:7640", "junk"]),
    source=st.sampled_from(["127.0.0.1", "10.9.9.9"]),
    skew=st.floats(-100, 100),
)
def test_envelope_accepts_only_the_untouched_datagram_for_us(
    identity: tuple[RingKeys, NodeIdentity], flip: int, recipient: str, source: str, skew: float
) -> None:
    keys, me = identity
    ring_key = bytes.fromhex(keys.key_file.read_text().strip())
    sealer = SignedSealer(ring_key, me, context="datagram")
    sealer.port = 7640
    now = time.time()
    datagram = bytearray(sealer.seal(b"body", recipient, now + skew, os.urandom(16)))
    good = recipient == "127.0.0.1:7640" and source == "127.0.0.1" and abs(skew) <= sealer.sealer.window
    if flip < len(datagram) * 8:
        datagram[flip // 8] ^= 1 << (flip % 8)
        good = False
    opened = sealer.open(bytes(datagram), now, (source, 9))
    assert (opened is not None) == good
    if opened is not None:
        assert opened.body == b"body" and opened.sender == me.cert


@FAST
@given(data=st.binary(max_size=300), now=st.floats(0, 2e9))
def test_payload_proofs_never_raise(identity: tuple[RingKeys, NodeIdentity], data: bytes, now: float) -> None:
    _, me = identity
    checker = ClaimChecker(me)
    reply = FlockReply(pool="fuzz", accepted=True, reason="")
    assert checker.payload_problem(reply.with_proof(data), now) is not None
    good = endorse(me, reply, now)
    assert checker.payload_problem(good, now) is None or not (me.cert.not_before <= now <= me.cert.not_after)


@FAST
@given(
    line=st.one_of(st.binary(max_size=5000), st.text(alphabet='[]{}"\\:,0a ', max_size=5000).map(str.encode))
)
def test_control_requests_parse_or_raise_value_error(line: bytes) -> None:
    try:
        request = parse_request(line)
    except ValueError:
        return
    assert isinstance(request, dict)


@FAST
@given(events=st.lists(st.tuples(st.sampled_from("abcdefgh"), st.floats(0, 100)), max_size=300))
def test_rate_limiter_never_exceeds_its_buckets(events: list[tuple[str, float]]) -> None:
    limiter = PeerRateLimiter(rate=10, burst=5, max_peers=4)
    allowed: dict[str, int] = {}
    for peer, t in sorted(events, key=lambda e: e[1]):
        if limiter.allow(peer, t):
            allowed[peer] = allowed.get(peer, 0) + 1
    assert len(limiter) <= 4
    span = max((t for _, t in events), default=0.0)
    # forgetting a bucket may refill it (at most one burst per eviction): bounded all the same
    assert sum(allowed.values()) <= (5 + 10 * span) * 8 + 5 * len(events)


@FAST
@given(drops=st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from(["x", "y"])), max_size=200))
def test_drop_log_writes_a_bounded_number_of_lines(drops: list[tuple[str, str]]) -> None:
    lines = []

    class Sink:
        def warning(self, *args: object, **kw: object) -> None:
            lines.append(kw)

    log = DropLog(clock=lambda: 0.0)
    log.log = Sink()  # type: ignore[assignment]
    for peer, reason in drops:
        log.drop("p", peer, reason, "d")
    log.flush()
    assert len(lines) <= 2 * len(set(drops))
    assert sum(int(line.get("count", 1)) for line in lines) == len(drops)  # type: ignore[call-overload]


# ----------------------------------------------------------------------------- the cores


# Claimed round-trip times (probe pruning): any valid value, however much of a lie, or none.
rtt_claims = st.none() | st.floats(0, 1e300, allow_nan=False, allow_infinity=False)
# Capabilities (rolling upgrades): any announced set, in a ping's nonce or a pong's or join's caps.
caps_claims = st.none() | st.integers(0, MAX_CAPS)
nonces = small | st.integers(0, (1 << 64) - 1)


def _rtts_for(peer_lists: st.SearchStrategy) -> st.SearchStrategy:
    """(peers, their claimed RTTs: none, or one per peer)."""
    return peer_lists.flatmap(
        lambda ps: st.tuples(
            st.just(ps), st.just([]) | st.lists(rtt_claims, min_size=len(ps), max_size=len(ps))
        )
    )


# Every overlay message type, generated with any well-typed content (a type added to
# OVERLAY_MESSAGES without an entry here fails test_every_overlay_message_type_is_fuzzed).
overlay_strategies: dict[type, st.SearchStrategy] = {
    Ping: st.builds(Ping, sender=peers, nonce=nonces, sent=times),
    Pong: st.builds(Pong, sender=peers, nonce=nonces, sent=times, caps=caps_claims),
    JoinRequest: st.builds(
        JoinRequest,
        joiner=peers,
        hops=small,
        refresh=st.booleans(),
        caps=caps_claims,
        via=st.none() | peers,
        hop_nonce=st.none() | nonces,
    ),
    JoinInfo: st.builds(
        lambda sender, cands, leaf, root: JoinInfo(
            sender=sender,
            candidates=cands[0],
            candidate_rtts=cands[1],
            leaf_set=leaf[0],
            leaf_rtts=leaf[1],
            root=root,
        ),
        peers,
        _rtts_for(st.lists(peers, max_size=6)),
        _rtts_for(st.lists(peers, max_size=6)),
        st.booleans(),
    ),
    Hello: st.builds(Hello, sender=peers, rtt=rtt_claims),
    LeafSetRequest: st.builds(LeafSetRequest, sender=peers, rtt=rtt_claims),
    LeafSetPush: st.builds(
        lambda sender, leaf: LeafSetPush(sender=sender, leaf_set=leaf[0], rtts=leaf[1]),
        peers,
        _rtts_for(st.lists(peers, max_size=20)),
    ),
    RowRequest: st.builds(RowRequest, sender=peers, row=st.integers(0, 127), rtt=rtt_claims),
    RowReply: st.builds(
        lambda sender, row, entries: RowReply(sender=sender, row=row, entries=entries[0], rtts=entries[1]),
        peers,
        st.integers(0, 127),
        _rtts_for(st.lists(peers, max_size=8)),
    ),
    RouteAck: st.builds(RouteAck, sender=peers, hop_nonce=small),
    Direct: st.builds(Direct, sender=peers, payload=st.just(FlockReply(pool="p", accepted=False, reason=""))),
    Route: st.builds(
        Route,
        key=ids,
        origin=peers,
        payload=st.just(FlockReply(pool="p", accepted=False, reason="")),
        hops=small,
        via=st.none() | peers,
        hop_nonce=small,
    ),
    Broadcast: st.builds(
        Broadcast,
        origin=peers,
        seq=small,
        level=st.integers(0, 128),
        payload=st.just(FlockReply(pool="p", accepted=False, reason="")),
    ),
    Heartbeat: st.builds(Heartbeat, sender=peers),
}
overlay_messages = st.one_of(*overlay_strategies.values())


def test_every_overlay_message_type_is_fuzzed() -> None:
    assert set(overlay_strategies) == set(OVERLAY_MESSAGES)


@FAST
@given(script=st.lists(st.tuples(overlay_messages, st.floats(0, 5)), max_size=25), joined=st.booleans())
def test_overlay_node_survives_any_well_typed_message(script: list, joined: bool) -> None:
    params = OverlayParams(recent_peers=2)  # small, so that the scripts reach the bound
    node = OverlayNode(Peer(id=IDS[4], addr="me:1"), params, random.Random(1))
    node.start(0.0, None if joined else "n1:1")
    now = 0.0
    for msg, dt in script:
        now += dt
        out = node.on_message(msg, now)
        assert out.wakeup is None or math.isfinite(out.wakeup)
        node.on_timer(now)
    assert len(node.leaf) <= params.leaf_set_size
    assert all(math.isfinite(r) and r >= 0 for r in node.rtt.values())
    assert len(node.rtt) <= _peer_map_bound(node) and len(node.last_heard) <= _peer_map_bound(node)
    assert len(node.caps) <= _peer_map_bound(node)


def _peer_map_bound(node: OverlayNode) -> int:
    """The most entries a node's rtt and last_heard may hold: leaf set and routing table full,
    and the recent others (twice: trimmed back to `recent_peers` once that many more came)."""
    p = node.params
    return p.leaf_set_size + node.table.rows * node.table.cols + 2 * p.recent_peers


def _flood_message(kind: type, sender: Peer, i: int) -> Message:
    """A message of type `kind` from `sender`, naming a further fresh node where it can."""
    other = Peer(id=random.Random(-i).getrandbits(128), addr=f"o{i}:1")
    reply = FlockReply(pool="p", accepted=False, reason="")
    build: dict[type, Message] = {
        Ping: Ping(sender=sender, nonce=(i % 8) << CAPS_SHIFT | i, sent=0.0),  # various capabilities
        Pong: Pong(sender=sender, nonce=i, sent=0.0, caps=i % 8),
        JoinRequest: JoinRequest(joiner=sender, caps=i % 8, via=sender, hop_nonce=i),
        JoinInfo: JoinInfo(sender=sender, candidates=[other], leaf_set=[other], root=True),
        Hello: Hello(sender=sender),
        LeafSetRequest: LeafSetRequest(sender=sender),
        LeafSetPush: LeafSetPush(sender=sender, leaf_set=[other]),
        RowRequest: RowRequest(sender=sender, row=i % 3),
        RowReply: RowReply(sender=sender, row=0, entries=[other]),
        RouteAck: RouteAck(sender=sender, hop_nonce=i),
        Direct: Direct(sender=sender, payload=reply),
        Route: Route(key=other.id, origin=sender, payload=reply, via=sender, hop_nonce=i),
        Broadcast: Broadcast(origin=sender, seq=i, level=0, payload=reply),
        Heartbeat: Heartbeat(sender=sender),
    }
    return build[kind]


def test_overlay_peer_maps_stay_bounded_under_a_flood_of_distinct_peers() -> None:
    """Every message type from thousands of distinct nodes (each answering our probes, so that
    rtt fills too, and announcing capabilities): rtt, last_heard and caps stay within leaf set,
    table and `recent_peers`."""
    params = OverlayParams(recent_peers=32)
    node = OverlayNode(Peer(id=IDS[4], addr="me:1"), params, random.Random(1))
    node.start(0.0)
    rng = random.Random(7)
    by_addr: dict[str, Peer] = {}
    kinds = list(OVERLAY_MESSAGES)
    flood = 4000
    now = 0.0
    for i in range(flood):
        now += 0.01
        sender = Peer(id=rng.getrandbits(128), addr=f"f{i}:1")
        by_addr[sender.addr] = sender
        out = node.on_message(_flood_message(kinds[i % len(kinds)], sender, i), now)
        for addr, msg in out.sends + node.on_timer(now).sends:
            peer = by_addr.get(addr)
            if isinstance(msg, Ping) and peer is not None:  # the flooders answer our probes
                node.on_message(Pong(sender=peer, nonce=msg.nonce, sent=msg.sent, caps=3), now + 0.005)
        assert len(node.rtt) <= _peer_map_bound(node) and len(node.last_heard) <= _peer_map_bound(node)
        assert len(node.caps) <= _peer_map_bound(node)
    assert len(node.rtt) > params.recent_peers and len(node.caps) > params.recent_peers  # it did fill
    known = len(node.leaf) + len(node.table.entries())
    assert len(node.last_heard) <= known + 2 * params.recent_peers < flood // 10


def _state(manager: int, epoch: int, version: int) -> PoolState:
    files = [StateFile(name="accountant", data=b"x")]
    return PoolState(manager=manager, epoch=epoch, version=version, taken_at=0.0, files=files,
                     checksum=PoolState.digest(files))  # fmt: skip


states = st.builds(_state, ids, st.integers(0, 5), st.integers(0, 10))
epochs = st.integers(1, 6)
role_messages = st.one_of(
    st.builds(
        Alive,
        manager=peers,
        collector=st.just("n1:9618"),
        epoch=epochs,
        seq=small,
        interval=st.floats(0.01, 3600),
        incarnation=st.integers(0, (1 << 64) - 1),
        state_version=st.integers(0, 12),
    ),
    st.builds(ManagerMissing, manager=ids, epoch=st.integers(0, 6), sender=peers),
    st.builds(PreemptReplacement, original=peers, collector=st.just("n2:9618")),
    st.builds(ReplicaPush, sender=peers, state=states),
    st.builds(ReplicaAck, sender=peers, version=small),
    st.builds(Handover, sender=peers, epoch=epochs, state=st.none() | states),
)


@FAST
@given(script=st.lists(st.tuples(role_messages, st.floats(0, 4)), max_size=30), original=st.booleans())
def test_role_machine_survives_any_well_typed_message(script: list, original: bool) -> None:
    me = Peer(id=IDS[2], addr="me:1")
    m = RoleMachine(me, "me:9618", RoleParams(), random.Random(1), original=original, manager_hint=IDS[0])
    m.start(0.0)
    m.on_leaf_set(tuple(Peer(id=i, addr=f"n{k}:1") for k, i in enumerate(IDS[:4])), 0.0)
    now, best = 0.0, m.best
    for msg, dt in script:
        now += dt
        m.on_message(msg, now)
        m.on_timer(now)
        assert m.best >= best  # the fencing token never goes back
        best = m.best
        assert m.role in (Role.LISTENER, Role.MANAGER)
        if m.replica is not None:  # a replica that fails its checksum is never kept
            assert m.replica.intact()


announcements = st.builds(
    Announcement,
    pool=st.sampled_from(["a", "b", "home"]),
    collector=st.just("n1:9618"),
    origin=peers,
    seq=small,
    free_slots=st.integers(0, 100),
    total_slots=st.integers(0, 100),
    queue_length=st.integers(0, 100),
    utilization=st.floats(0, 1),
    valid_for=st.floats(0.1, 86_400),
    ttl=st.integers(0, 32),
    row=st.integers(0, 127),
    epoch=st.integers(0, 5),
)
# Every poold message type, keyed by type (test_every_pool_core_action_and_message_is_fuzzed checks this).
pool_strategies = {
    Announcement: announcements,
    FlockIntent: st.builds(
        FlockIntent,
        pool=st.sampled_from(["a", "b"]),
        origin=peers,
        schedd_hosts=st.lists(st.sampled_from(["h1", "h2", "10.0.0.1", "s1.a.org", ""]), max_size=4),
    ),
    FlockReply: st.builds(
        FlockReply,
        pool=st.sampled_from(["a", "b"]),
        accepted=st.booleans(),
        reason=st.just("r"),
        trust_domain=st.none() | st.sampled_from(["a.example", "b.example"]),
    ),
    TokenRequestNotice: st.builds(
        TokenRequestNotice,
        pool=st.sampled_from(["a", "b", "home"]),
        origin=peers,
        role=st.sampled_from(["schedd", "negotiator"]),
        request_id=st.integers(0, 10**20 - 1).map(str),
        identity=st.sampled_from(["schedd-a@home.example", "negotiator-b@home.example", "x@y"]),
        authz=st.lists(
            st.sampled_from(["READ", "ADVERTISE_SCHEDD", "NEGOTIATOR", "ADMINISTRATOR"]), max_size=8
        ),
        lifetime=st.integers(1, 7 * 86_400),
    ),
    TokenVerdict: st.builds(
        TokenVerdict,
        pool=st.sampled_from(["a", "b"]),
        role=st.sampled_from(["schedd", "negotiator"]),
        request_id=st.integers(0, 10**20 - 1).map(str),
        approved=st.booleans(),
        reason=st.just("r"),
    ),
    CollectorMoved: st.builds(
        CollectorMoved,
        pool=st.sampled_from(["a", "b", "home", "stranger"]),
        collector=st.sampled_from(["n1:9618", "n2:9618", "me:9618"]),
        origin=peers,
        epoch=st.integers(0, 5),
        seq=small,
    ),
}
pool_messages = st.one_of(*pool_strategies.values())


# Our own schedd in the fuzzed pool: intents may name its hosts; a shut-out never may.
OWN_SCHEDD = ScheddLoad(
    name="h1", address="<10.0.0.1:9618>", machine="h1", idle=3, running=4, held=0, flocked=0
)
OWN_LOAD = PoolLoad(total_slots=4, free_slots=0, claimed_slots=4, schedds=[OWN_SCHEDD])
RELOADS = ["allow all", "refuse a"]  # policy reloads in the script, between the messages
REFUSE_A = Policy(PolicyFile(default="allow", rule=[Rule(action="deny", pools=["a"])]), "refuse-a.toml")


def _outcome(core: PoolCore, action: object, ok: bool, now: float) -> CoreOutput:
    """What the driver feeds back for one action of the pool core, succeeded or failed."""
    if isinstance(action, ReadLoad):
        return core.on_load(OWN_LOAD if ok else None, now, None if ok else "down")
    if isinstance(action, SetFlockTo):
        return core.on_flock_to_applied(FlockToApplied(action, ok, {}), now)
    if isinstance(action, SetFlockFrom):
        return core.on_flock_from_applied(FlockFromApplied(action, None if ok else "down"), now)
    if isinstance(action, ShutOutSchedds):
        assert {"h1", "10.0.0.1"}.isdisjoint(action.hosts), action  # never our own schedd
        hypothesis_event("shut out")
        return core.on_shut_out(ShutOutDone(action, 1, ("slot1_1@x",), None if ok else "down"), now)
    if isinstance(action, ReadFlockTo):  # the schedds' FLOCK_TO, or none reported yet
        return core.on_flock_to_read({"h1": ["n1:9618", "n2:9618"]} if ok else None, now)
    if isinstance(action, RequestToken):
        return core.on_token_requested(action, "42" if ok else None, None if ok else "down", now)
    if isinstance(action, ApproveToken):
        return core.on_token_approved(action, None if ok else "down", now)
    if isinstance(action, InstallToken):
        return core.on_token_installed(action, None if ok else "down", now)
    assert isinstance(action, Send | Measure | RemoveToken)  # nothing is fed back for these
    return CoreOutput()


# Every action the pool core can ask for has its fed-back outcome above.
FED_BACK = (
    ReadLoad,
    SetFlockTo,
    SetFlockFrom,
    ShutOutSchedds,
    ReadFlockTo,
    RequestToken,
    ApproveToken,
    InstallToken,
)


def test_every_pool_core_action_and_message_is_fuzzed() -> None:
    assert set(get_args(Action)) == {*FED_BACK, Send, Measure, RemoveToken}
    pool_types = {c for c in _APP_TYPES.values() if c.__module__ == "poolD.messages"}
    assert set(pool_strategies) == pool_types


@settings(max_examples=60, deadline=None)
@given(
    script=st.lists(
        st.tuples(
            pool_messages | st.sampled_from(["allow all", "refuse a", "activated"]),
            st.floats(0, 30),
            st.booleans(),
        ),
        max_size=30,
    ),
    trust=st.booleans(),
)
@example(  # a grant, its revocation by a reloaded policy, the shut-out: always among the cases
    script=[
        (FlockIntent(pool="a", origin=Peer(id=IDS[1], addr="n1:1"), schedd_hosts=["h2", "h1"]), 1.0, True),
        ("refuse a", 1.0, True),
    ],
    trust=True,
)
def test_pool_core_survives_any_well_typed_message(script: list, trust: bool) -> None:
    """Messages, policy reloads, activations and timers in any order, every action's outcome fed
    back as done or failed; a shut-out never names our own schedd's hosts."""
    overlay = OverlayNode(Peer(id=IDS[5], addr="me:1"), OverlayParams(), random.Random(1))
    overlay.start(0.0)
    settings_ = CoreSettings(pool="home", collector="me:9618", discovery=DiscoverySection(),
                             flocking=FlockingSection(),
                             trust_domain="home.example" if trust else None)  # fmt: skip
    core = PoolCore(settings_, overlay, Policy.allow_all(), random.Random(1))
    now = 0.0
    pending = deque([core.start(0.0), core.on_load(OWN_LOAD, 0.0)])
    for item, dt, ok in script:
        now += dt
        if item == "allow all":
            pending.append(core.replace_policy(Policy.allow_all(), now))
        elif item == "refuse a":
            pending.append(core.replace_policy(REFUSE_A, now))
        elif item == "activated":  # the manager role came here: FLOCK_TO read back
            pending.append(core.read_back_flock_to(now))
        else:
            pending.append(core.on_message(item, now))
        pending.append(core.on_timer(now))
        for _ in range(200):  # outcomes ask for more actions; bounded
            if not pending:
                break
            for action in pending.popleft().actions:
                pending.append(_outcome(core, action, ok, now))
    assert all(v >= 0 for v in core.counters.values())
    assert "home" not in core.willing.entries  # our own offers are never taken
    assert "home" not in core.collector_claims and "stranger" not in core.collector_claims
    # whatever it went through, its state file round-trips and resumes (issue 16)
    state = core.export_state(now, 1e9)
    again = PoolCore(settings_, overlay, Policy.allow_all(), random.Random(1))
    again.restore_state(decode_state(encode_state(state), "fuzz"), now, 1e9)
    assert again.flocking.active == core.flocking.active


def _result(process: int, attempt: int, ran: bool, code: int | None) -> TaskResult:
    if ran:  # as llic.task decodes it: a run that ran has exactly one of exit code and signal
        return TaskResult(process, attempt, STATUS_OK, exit_code=code, signal=None if code is not None else 9)
    return TaskResult(process, attempt, STATUS_LAUNCH_FAILED, error="no")


# Names an agent could present: the master's own pattern (run.chef.launch, current or not) and junk.
agent_names = st.one_of(
    st.builds("{}.{}.{}".format, st.integers(0, 3), st.integers(0, 6), st.integers(0, 4)),
    st.text(max_size=12),
)
task_numbers = st.integers(0, 12)  # the decoders refuse negative numbers
master_events = st.one_of(
    st.builds(AgentConnected, agent=agent_names, address=st.sampled_from(["", "10.0.0.1", "junk"])),
    st.builds(
        ResultReceived,
        agent=agent_names,
        result=st.builds(_result, task_numbers, st.integers(0, 5), st.booleans(), st.none() | small),
    ),
    st.builds(BulkReady, agent=agent_names, process=task_numbers, attempt=st.integers(0, 5), nbytes=small),
    st.builds(ConnectionBroken, agent=agent_names, reason=st.just("reset")),
    st.builds(
        TransferDone,
        agent=agent_names,
        process=task_numbers,
        direction=st.sampled_from(["in", "out", "x"]),
        nbytes=small,
        start=st.floats(0, 100),
        end=st.floats(0, 100),
        attempt=st.none() | st.integers(0, 5),
    ),
)


@FAST
@given(script=st.lists(st.tuples(master_events, st.floats(0, 30)), max_size=40), tasks=st.integers(0, 10))
def test_llic_master_core_survives_whatever_authenticated_agents_send(script: list, tasks: int) -> None:
    """An agent's messages reach the core only after its handshake, but an agent (or a job in its
    slot) may still lie: results for tasks it was never given, other agents' names, stale
    launches. Nothing raises, and every task is counted exactly once."""
    core = MasterCore.new(range(tasks), LlicConfig())
    core.start(2, 0.0)
    now = 0.0
    for event, dt in script:
        now += dt
        core.handle(event, now)
        core.on_timer(now)
        counts = core.counts()
        assert counts.total == tasks
        assert counts.queued + counts.running + counts.done + counts.failed == tasks
        assert set(core.unfinished()) <= set(range(tasks))

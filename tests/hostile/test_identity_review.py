"""Attacks from the security review of issue 14, each once a reproduction that succeeded."""

from __future__ import annotations

import os
import secrets
import time

import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from common.overlay import envelope
from common.overlay.auth import Sealer
from common.overlay.bulk import BulkChannel, BulkDrop
from common.overlay.certs import CertificateAuthority, public_key_of
from common.overlay.claims import ClaimChecker, endorse
from common.overlay.envelope import SignedSealer
from common.overlay.identity import IdentityDrop, NodeIdentity, TrustStore
from common.overlay.messages import Direct, Peer
from common.overlay.ratelimit import PeerRateLimiter
from common.service import parse_request
from common.wire import HEADER, Message, MessageCodec, pack
from deploy.harness.sandbox import poll_until_async
from faultD.messages import PoolState, ReplicaPush, StateFile
from faultD.service import BULK_TYPES
from poolD.messages import FlockIntent

pytestmark = pytest.mark.hostile

CA = CertificateAuthority(Ed25519PrivateKey.generate())
RING = secrets.token_bytes(32)


def identity(
    name: str, host: str, node_id: int, pool: str, *, ring: str = "poold", same_pool: bool = False
) -> NodeIdentity:
    """A node with a certificate of a throwaway CA (what `selforg-ca` would issue)."""
    key = Ed25519PrivateKey.generate()
    now = time.time()
    cert = CA.issue(ring=ring, node_name=name, node_id=node_id, pool=pool, hosts=[host],
                    public_key=public_key_of(key), not_before=now - 10, not_after=now + 86400)  # fmt: skip
    trust = TrustStore(CA.private.public_key(), ring, frozenset(), pool=pool if same_pool else None)
    return NodeIdentity(key, cert, trust)


def test_a_member_cannot_relay_another_pools_signed_intent_as_its_own_direct() -> None:
    """M saw pool A's FlockIntent on the wire and sends it to pool C in a Direct signed by M."""
    a = identity("a", "10.0.0.1", 1, "physics")
    m = identity("m", "10.0.0.9", 9, "mallory")
    c = identity("c", "10.0.0.3", 3, "chem")
    now = time.time()
    intent = endorse(a, FlockIntent(pool="physics", origin=Peer(id=1, addr="10.0.0.1:7640"),
                                    schedd_hosts=["submit.physics"]), now)  # fmt: skip
    checker = ClaimChecker(c)
    relayed = Direct(sender=Peer(id=9, addr="10.0.0.9:7640"), payload=intent)
    assert not checker.accept(relayed, m.cert, now + 5, "10.0.0.9:7640")
    assert checker.drops == {IdentityDrop.UNBOUND_CLAIM: 1}
    # A's own Direct with the same intent is still believed.
    own = Direct(sender=Peer(id=1, addr="10.0.0.1:7640"), payload=intent)
    assert checker.accept(own, a.cert, now + 5, "10.0.0.1:7640")


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be", "utf-32"])
def test_control_request_nesting_cannot_hide_behind_a_utf16_quote(encoding: str) -> None:
    """U+225B in UTF-16-LE is the bytes '["': a byte counter saw a quote, json (guessing UTF-16
    from bytes) did not, and 5000 nested lists reached json's recursion (RecursionError)."""
    text = '["\u225b",' + "[" * 5000 + "]" * 5000 + "]"
    with pytest.raises(ValueError):
        parse_request(text.encode(encoding))
    assert parse_request(b'{"cmd": "status"}\n') == {"cmd": "status"}


async def test_a_ring_member_cannot_pile_up_connections_waiting_for_a_body() -> None:
    """Each connection with a fresh signed header announcing 64 MiB and no body waited for a body
    slot, uncounted and unbounded (a file descriptor each), and held both slots; the manager's
    push could not get one."""
    server = identity("victim", "127.0.0.1", 1, "p", ring="faultd:p", same_pool=True)
    evil = identity("exec7", "127.0.0.1", 7, "p", ring="faultd:p", same_pool=True)
    manager = identity("mgr", "127.0.0.1", 5, "p", ring="faultd:p", same_pool=True)
    got: list[Message] = []

    async def on_message(msg: Message, peer: str) -> None:
        got.append(msg)

    def codec() -> MessageCodec:
        return MessageCodec(list(BULK_TYPES), name="t", max_size=64 << 20)

    channel = BulkChannel(RING, server, codec(), on_message)
    sender = BulkChannel(RING, manager, codec(), on_message)
    async with trio.open_nursery() as nursery:
        await nursery.start(channel.serve, "127.0.0.1", 0)
        port = channel.sealer.port
        sealer = SignedSealer(RING, evil, context="bulk", name="bulk")
        streams = []
        for _ in range(10):
            header = sealer.seal(pack(["faultd.replica", 64 << 20, b"\0" * 32]), f"127.0.0.1:{port}",
                                 time.time(), os.urandom(16))  # fmt: skip
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            await stream.send_all(HEADER.pack(len(header)) + header)
            streams.append(stream)
        await poll_until_async(
            "the stalled bodies beyond one per signer to be dropped",
            lambda: channel.drops.get(BulkDrop.TOO_MANY_WAITING_FROM_SIGNER) == 9,
        )
        assert channel.waiting == 1
        files = [StateFile(name="accountant", data=b"x")]
        state = PoolState(manager=5, epoch=1, version=1, taken_at=0.0, files=files,
                          checksum=PoolState.digest(files))  # fmt: skip
        assert await sender.send(
            f"127.0.0.1:{port}", ReplicaPush(sender=Peer(id=5, addr="127.0.0.1:1"), state=state)
        )
        await poll_until_async("the manager's push to arrive", lambda: len(got) == 1)
        nursery.cancel_scope.cancel()


def test_a_copied_certificate_from_spoofed_sources_costs_no_signature_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the ring key alone and a member's public certificate, each datagram from a rotating
    (spoofed) source escaped the per-source limit and cost an Ed25519 verify."""
    victim = identity("victim", "127.0.0.1", 1, "p")
    sealer = SignedSealer(RING, victim, context="datagram", limiter=PeerRateLimiter(500.0, 1000.0))
    sealer.port = 7640
    verifies = 0
    real = envelope.signature_valid

    def counting(*args: object) -> bool:
        nonlocal verifies
        verifies += 1
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(envelope, "signature_valid", counting)
    ring_only = Sealer(RING)
    now = time.time()
    inner = pack(["127.0.0.1:7640", b"x", victim.cert_wire, b"\0" * 64])
    for i in range(2000):
        source = f"10.{i // 250}.{i % 250}.1"
        assert sealer.open(ring_only.seal(inner, now, os.urandom(16)), now, (source, 1)) is None
    assert verifies == 0 and sealer.drops.get(IdentityDrop.WRONG_SOURCE) == 2000
    # from a host the certificate lists, the signature is checked (and this one is bad)
    assert sealer.open(ring_only.seal(inner, now, os.urandom(16)), now, ("127.0.0.1", 1)) is None
    assert verifies == 1 and sealer.drops.get(IdentityDrop.BAD_SIGNATURE) == 1

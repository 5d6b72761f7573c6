"""Attacks from the security review of issue 14, each once a reproduction that succeeded."""

from __future__ import annotations

import secrets
import time

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from common.overlay.certs import CertificateAuthority, public_key_of
from common.overlay.claims import ClaimChecker, endorse
from common.overlay.identity import IdentityDrop, NodeIdentity, TrustStore
from common.overlay.messages import Direct, Peer
from common.service import parse_request
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

"""Claims checked against certificates: who a message says it is from, and what it names as its
own, must be what the signer's certificate gives it.

Two layers (see common.overlay.messages):
- An overlay message names its sender (`sender`, a JoinRequest's `joiner` on its first hop, a
  Route's `via`): that node id must be the certificate's and its address's host one of the
  certificate's hosts, for the node that signed the datagram (common.overlay.envelope). Without
  this, a ring member could claim another's id and take its place in routing tables.
- An application payload carries its origin's proof: `[certificate, signed_at, signature]` over
  the ring, the payload's type and its body (less the fields forwarders change). Its claims
  (`AppMessage.claims`: node, pool, hosts) are checked against the proof's certificate, so an
  offer forwarded along a row or an alive passed down the broadcast tree is checked against its
  origin, not the last hop. A Route's or Broadcast's `origin` must be the proof's signer. Proofs
  older than the replay window are refused.

The pool a message names must be the certified one: a poold policy that allows pool "physics"
matches only a sender whose certificate says "physics" (the claim is dropped and counted
otherwise, as `pool_mismatch`).

Pure: signatures are checked with the keys the trust store holds; `now` is passed in.
"""

from __future__ import annotations

import math
from collections import Counter

from common.droplog import DropLog
from common.hostport import parse_address
from common.overlay.certs import NodeCertificate, signature_valid
from common.overlay.identity import Checked, IdentityDrop, NodeIdentity
from common.overlay.messages import (
    AppMessage,
    Broadcast,
    Claims,
    Direct,
    JoinRequest,
    Peer,
    Route,
)
from common.wire import Message, pack, unpack_array

PROOF_CONTEXT = "selforg-payload-v1"

Problem = tuple[str, str]  # (drop reason, detail)


def _host(addr: str) -> str:
    try:
        return parse_address(addr)[0]
    except ValueError:
        return addr


def _signed_payload(ring: str, payload: AppMessage, signed_at: float) -> bytes:
    body = payload.model_dump(mode="python", exclude=set(payload.FORWARD_MUTABLE) or None)
    return pack([PROOF_CONTEXT, ring, payload.TYPE, body, signed_at])


def endorse(identity: NodeIdentity, payload: AppMessage, now: float) -> AppMessage:
    """The payload with this node's proof; one that already has a proof (forwarded) is kept."""
    if payload.proof is not None:
        return payload
    signed_at = float(now)
    signature = identity.sign(_signed_payload(identity.cert.ring, payload, signed_at))
    return payload.with_proof(pack([identity.cert_wire, signed_at, signature]))


def peer_problem(peer: Peer, cert: NodeCertificate, what: str) -> Problem | None:
    """Why `peer` (a claimed node) is not the node `cert` certifies, or None."""
    if peer.id != cert.node_id:
        return (
            IdentityDrop.UNBOUND_CLAIM,
            f"{what} claims node id {peer.id:032x}, {cert.node_name!r} has another",
        )
    if not cert.allows_host(_host(peer.addr)):
        return (
            IdentityDrop.UNBOUND_CLAIM,
            f"{what} claims address {peer.addr[:80]!r}, not {cert.node_name!r}'s",
        )
    return None


def claims_problem(claims: Claims, cert: NodeCertificate, what: str) -> Problem | None:
    """Why a payload's claims are not what `cert` gives its holder, or None."""
    if claims.node is not None:
        problem = peer_problem(claims.node, cert, what)
        if problem is not None:
            return problem
    if claims.pool is not None and claims.pool != cert.pool:
        return (
            IdentityDrop.POOL_MISMATCH,
            f"{what} claims pool {claims.pool!r}, certified pool is {cert.pool!r}",
        )
    for host in claims.hosts:
        if not cert.allows_host(host):
            return IdentityDrop.UNBOUND_CLAIM, f"{what} names host {host[:80]!r}, not {cert.node_name!r}'s"
    return None


class ClaimChecker:
    """Checks decoded messages against the certificate of their signer; counts what it drops."""

    def __init__(self, identity: NodeIdentity, *, window: float = 30.0, name: str = "overlay") -> None:
        self.identity = identity
        self.window = window
        self.name = name
        self.drops: Counter[str] = Counter()
        self.drop_log = DropLog("overlay.claims")

    def drop(self, problem: Problem, peer: str) -> None:
        """Count a message dropped for `problem`; the log line is rate-limited."""
        self.drops[problem[0]] += 1
        self.drop_log.drop(self.name, peer, problem[0], problem[1])

    def accept(self, msg: Message, signer: NodeCertificate, now: float, peer: str) -> bool:
        """Whether an overlay message's claims hold; if not, it is counted as dropped."""
        problem = self.overlay_problem(msg, signer, now)
        if problem is None:
            return True
        self.drop(problem, peer)
        return False

    def accept_direct(self, msg: AppMessage, signer: NodeCertificate, peer: str) -> bool:
        """Whether an application message sent by its signer itself (the bulk channel) is what
        the signer's certificate allows; if not, it is counted as dropped."""
        problem = claims_problem(msg.claims(), signer, msg.TYPE)
        if problem is None:
            return True
        self.drop(problem, peer)
        return False

    def overlay_problem(self, msg: Message, signer: NodeCertificate, now: float) -> Problem | None:
        """Why an overlay message from `signer` is not believed, or None."""
        if isinstance(msg, JoinRequest):
            return peer_problem(msg.joiner, signer, "join") if msg.hops == 0 else None
        if isinstance(msg, Route):
            if msg.via is not None and (problem := peer_problem(msg.via, signer, "route hop")):
                return problem
            return self.payload_problem(msg.payload, now, origin=msg.origin)
        if isinstance(msg, Broadcast):
            return self.payload_problem(msg.payload, now, origin=msg.origin)
        sender = getattr(msg, "sender", None)
        if isinstance(sender, Peer) and (problem := peer_problem(sender, signer, msg.TYPE)):
            return problem
        if isinstance(msg, Direct):
            # The payload's proof must be the sender's own: a member must not relay pool A's
            # signed intent (seen on the wire) to a third pool as if A had sent it.
            return self.payload_problem(msg.payload, now, origin=msg.sender)
        return None

    def payload_problem(self, payload: Message, now: float, *, origin: Peer | None = None) -> Problem | None:
        """Why an application payload's proof or claims fail, or None. `origin`: the node a
        Route or Broadcast says it comes from, which must be the proof's signer."""
        if not isinstance(payload, AppMessage) or payload.proof is None:
            return IdentityDrop.BAD_PROOF, f"{payload.TYPE} carries no proof of its origin"
        fields = unpack_array(payload.proof, 3, "[certificate, signed_at, signature]")
        if isinstance(fields, str):
            return IdentityDrop.BAD_PROOF, f"{payload.TYPE}: {fields}"
        cert_wire, signed_at, signature = fields
        if not (isinstance(signed_at, float) and math.isfinite(signed_at) and isinstance(signature, bytes)):
            return IdentityDrop.BAD_PROOF, f"{payload.TYPE}: proof fields of the wrong type"
        if abs(now - signed_at) > self.window:
            return IdentityDrop.BAD_PROOF, f"{payload.TYPE}: proof signed {now - signed_at:+.1f} s ago"
        verdict = self.identity.trust.verify(cert_wire, now)
        if not isinstance(verdict, Checked):
            return verdict
        cert = verdict.cert
        if not signature_valid(
            verdict.key, signature, _signed_payload(self.identity.trust.ring, payload, signed_at)
        ):
            return IdentityDrop.BAD_PROOF, f"{payload.TYPE}: not signed by {cert.node_name!r}'s key"
        if origin is not None and (problem := peer_problem(origin, cert, f"{payload.TYPE} origin")):
            return problem
        return claims_problem(payload.claims(), cert, payload.TYPE)

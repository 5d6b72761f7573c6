"""Signed, sealed messages between ring members: the ring key's MAC as a cheap first gate, then
the sender's own Ed25519 signature, checked against its certificate.

A sealed message is the ring `Sealer`'s `[timestamp, nonce, inner, mac]` (common.overlay.auth),
whose inner part is `[recipient, body, certificate, signature]`:
- `recipient` is the host:port the sender addressed; a receiver accepts only its own port and a
  host its own certificate lists, so a message captured on its way from A to B is refused by C;
- `certificate` is the sender's (common.overlay.certs), checked against the ring's CA;
- `signature` is the sender's, over the context (datagram or bulk), timestamp, nonce, recipient
  and body; the body holds the message type, so type and recipient are authenticated.
The MAC (ring key) covers all of it and is checked first, so a stranger without the ring key
costs one HMAC; then a per-source rate limit, then the certificate (remembered once checked) and
the signature. The source address must be one the certificate lists. Only a message that passes
everything has its nonce remembered (replays are refused as by the Sealer).

What is dropped is counted by reason in `drops`; nothing raises into the caller's loop.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from common.droplog import DropLog
from common.hostport import parse_address
from common.overlay.auth import AuthDrop, Sealer
from common.overlay.certs import NodeCertificate, signature_valid
from common.overlay.identity import Checked, IdentityDrop, NodeIdentity
from common.overlay.ratelimit import PeerRateLimiter
from common.wire import MAX_DATAGRAM, pack, unpack_array


@dataclass(frozen=True)
class Opened:
    """A believed message: its body, the sender's checked certificate, and where it came from."""

    body: bytes
    sender: NodeCertificate
    peer: str
    recipient: str = ""  # the host:port the sender addressed (signed)


class SignedSealer:
    """Seals messages with the ring key and this node's signature; opens and checks others'."""

    def __init__(
        self,
        ring_key: bytes,
        identity: NodeIdentity,
        *,
        context: str,
        window: float = 30.0,
        max_size: int = MAX_DATAGRAM,
        name: str = "overlay",
        limiter: PeerRateLimiter | None = None,
    ) -> None:
        self.sealer = Sealer(ring_key, window=window, max_size=max_size, name=name)
        self.identity = identity
        self.context = context
        self.name = name
        self.limiter = limiter
        self.port: int | None = None  # ours, once bound: recipients name it
        self.own_drops: Counter[str] = Counter()
        self.drop_log = DropLog("overlay.identity")

    @property
    def drops(self) -> dict[str, int]:
        """Messages dropped so far, by reason (ring key, freshness, identity)."""
        return dict(self.sealer.drops) | dict(self.own_drops)

    def drop(self, reason: str, peer: str, detail: str) -> None:
        """Count a dropped message under its reason; the log line is rate-limited."""
        self.own_drops[reason] += 1
        self.drop_log.drop(self.name, peer, reason, detail)

    def _signed(self, timestamp: float, nonce: bytes, recipient: str, body: bytes) -> bytes:
        return pack([self.context, timestamp, nonce, recipient, body])

    def seal(self, body: bytes, recipient: str, now: float, nonce: bytes) -> bytes:
        """The sealed message carrying `body` to `recipient` (host:port), stamped `now`."""
        timestamp = float(now)
        signature = self.identity.sign(self._signed(timestamp, bytes(nonce), recipient, body))
        inner = pack([recipient, body, self.identity.cert_wire, signature])
        return self.sealer.seal(inner, timestamp, nonce)

    def recipient_ok(self, recipient: str) -> bool:
        """Whether `recipient` names this node: our port, and a host our certificate lists."""
        try:
            host, port = parse_address(recipient)
        except ValueError:
            return False
        return port == self.port and self.identity.cert.allows_host(host)

    def open(self, data: bytes, now: float, source: tuple[str, int] | None) -> Opened | None:
        """The believed body of a sealed message from `source` (host, port), or None after counting
        why it was dropped."""
        peer = "?" if source is None else f"{source[0]}:{source[1]}"
        checked = self.sealer.check(data, now, peer)
        if checked is None:
            return None
        timestamp, nonce, inner = checked
        fields = unpack_array(inner, 4, "[recipient, body, certificate, signature]")
        if isinstance(fields, str):
            self.drop(AuthDrop.MALFORMED, peer, fields)
            return None
        recipient, body, cert_wire, signature = fields
        if not (isinstance(recipient, str) and isinstance(body, bytes) and isinstance(signature, bytes)):
            self.drop(AuthDrop.MALFORMED, peer, "recipient, body or signature of the wrong type")
            return None
        if self.limiter is not None and source is not None and not self.limiter.allow(source[0], now):
            self.drop(IdentityDrop.RATE_LIMITED, peer, f"more than {self.limiter.rate:g}/s from {source[0]}")
            return None
        if not self.recipient_ok(recipient):
            self.drop(IdentityDrop.WRONG_RECIPIENT, peer, f"addressed to {recipient[:80]!r}, not to us")
            return None
        verdict = self.identity.trust.verify(cert_wire, now)
        if not isinstance(verdict, Checked):
            self.drop(verdict[0], peer, verdict[1])
            return None
        # The source before the signature: a certificate copied by a sender that spoofs other
        # sources (so escaping the per-source rate limit) then costs no Ed25519 verify.
        if source is not None and not verdict.cert.allows_host(source[0]):
            self.drop(IdentityDrop.WRONG_SOURCE, peer, f"{verdict.cert.node_name!r} may not send from there")
            return None
        if not signature_valid(verdict.key, signature, self._signed(timestamp, nonce, recipient, body)):
            self.drop(IdentityDrop.BAD_SIGNATURE, peer, f"not signed by {verdict.cert.node_name!r}'s key")
            return None
        self.sealer.remember(timestamp, nonce)
        return Opened(body, verdict.cert, peer, recipient)

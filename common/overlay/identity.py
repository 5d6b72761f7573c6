"""What a daemon knows about identities: its own (key and certificate) and whom to trust (the
ring's CA, the revocation list), loaded from the `[ring]` section of its config.

`TrustStore.verify` turns the certificate bytes a message carries into a checked
`NodeCertificate`, or a reason to drop the message: not signed by our CA, another ring, revoked,
not valid now. Checking a certificate costs an Ed25519 verification, so good ones are remembered
(a bounded number, by their bytes); revocation and validity are checked every time, so a
revocation list reloaded on SIGHUP applies at once.

No clock is read here: callers pass `now` (wall-clock seconds: certificates are dated).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from common.overlay.certs import (
    CertificateError,
    NodeCertificate,
    load_certificate,
    load_private_key,
    load_public_key,
    load_revoked,
    public_key_of,
    signature_valid,
)

CERT_CACHE = 1024


class IdentityDrop(StrEnum):
    """Why a message's sender was not believed: keys of the drop counters."""

    BAD_CERTIFICATE = "bad_certificate"
    UNTRUSTED = "untrusted_certificate"  # not signed by our ring's CA
    WRONG_RING = "wrong_ring"
    REVOKED = "revoked"
    EXPIRED = "expired_certificate"
    BAD_SIGNATURE = "bad_signature"
    WRONG_RECIPIENT = "wrong_recipient"
    WRONG_SOURCE = "wrong_source"
    RATE_LIMITED = "rate_limited"
    UNBOUND_CLAIM = "unbound_claim"  # a node id or address the signer's certificate does not give it
    POOL_MISMATCH = "pool_mismatch"  # a pool name other than the signer's certified pool
    BAD_PROOF = "bad_proof"


@dataclass(frozen=True)
class Checked:
    """A certificate that passed every check, with its public key ready for signatures."""

    cert: NodeCertificate
    key: Ed25519PublicKey


class TrustStore:
    """The ring's CA and revocation list: which certificates this daemon believes."""

    def __init__(
        self,
        ca: Ed25519PublicKey,
        ring: str,
        revoked: frozenset[int] = frozenset(),
        *,
        pool: str | None = None,
    ) -> None:
        self.ca = ca
        self.ring = ring
        self.pool = pool  # set on faultD's ring: every member belongs to our pool
        self.revoked = revoked
        self._good: OrderedDict[bytes, Checked] = OrderedDict()

    def verify(self, cert_wire: object, now: float) -> Checked | tuple[IdentityDrop, str]:
        """The checked certificate in `cert_wire`, or why it is refused."""
        if not isinstance(cert_wire, bytes):
            return IdentityDrop.BAD_CERTIFICATE, "certificate is not bytes"
        digest = hashlib.sha256(cert_wire).digest()
        checked = self._good.get(digest)
        if checked is None:
            try:
                cert = NodeCertificate.from_wire(cert_wire)
            except ValueError as e:
                return IdentityDrop.BAD_CERTIFICATE, str(e)
            if not signature_valid(self.ca, cert.signature, cert.signed_part()):
                return IdentityDrop.UNTRUSTED, f"certificate of {cert.node_name!r} is not signed by our CA"
            checked = Checked(cert, Ed25519PublicKey.from_public_bytes(cert.public_key))
            self._good[digest] = checked
            if len(self._good) > CERT_CACHE:
                self._good.popitem(last=False)
        cert = checked.cert
        if cert.ring != self.ring:
            return IdentityDrop.WRONG_RING, f"certificate of {cert.node_name!r} is for ring {cert.ring!r}"
        if self.pool is not None and cert.pool != self.pool:
            return IdentityDrop.WRONG_RING, f"certificate of {cert.node_name!r} is for pool {cert.pool!r}"
        if cert.serial in self.revoked:
            return IdentityDrop.REVOKED, f"certificate {cert.serial} of {cert.node_name!r} is revoked"
        if not cert.not_before <= now <= cert.not_after:
            return IdentityDrop.EXPIRED, f"certificate of {cert.node_name!r} is not valid now"
        return checked


class NodeIdentity:
    """This node's private key and certificate, and the trust store it checks others with."""

    def __init__(self, key: Ed25519PrivateKey, cert: NodeCertificate, trust: TrustStore) -> None:
        if public_key_of(key) != cert.public_key:
            raise ValueError(f"the private key does not match the certificate of {cert.node_name!r}")
        self.key = key
        self.cert = cert
        self.cert_wire = cert.to_wire()
        self.trust = trust

    def sign(self, data: bytes) -> bytes:
        """This node's Ed25519 signature of `data`."""
        return self.key.sign(data)


@dataclass(frozen=True)
class IdentityFiles:
    """Where a daemon's key material is: from the `[ring]` section of its config."""

    node_key: Path
    node_cert: Path
    ca: Path
    revoked: Path | None


def load_identity(files: IdentityFiles, *, same_pool: bool = False) -> NodeIdentity:
    """Read the key, certificate, CA and revocation list; one error naming the file (KeyFileError
    or CertificateError) if any is missing or unusable. With `same_pool`, only members of our own
    pool are trusted (faultD's ring)."""
    key = load_private_key(files.node_key, "node private key")
    cert = load_certificate(files.node_cert)
    ca = load_public_key(files.ca)
    revoked = load_revoked(files.revoked) if files.revoked is not None else frozenset()
    if public_key_of(key) != cert.public_key:
        raise CertificateError(f"{files.node_cert}: certificate is for another key than {files.node_key}")
    if not signature_valid(ca, cert.signature, cert.signed_part()):
        raise CertificateError(f"{files.node_cert}: certificate is not signed by the CA in {files.ca}")
    if cert.serial in revoked:
        raise CertificateError(f"{files.node_cert}: certificate {cert.serial} is in {files.revoked}")
    trust = TrustStore(ca, cert.ring, revoked, pool=cert.pool if same_pool else None)
    return NodeIdentity(key, cert, trust)

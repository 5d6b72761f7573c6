"""Node identities: an Ed25519 key pair per node, bound to its name, id, pool and hosts by a
certificate that the ring's certificate authority signs.

Why a certificate authority per ring (not fingerprints pinned in a policy file): a ring of
thousands of pools, or every machine of a pool, would need every member's file changed for each
new node; with a CA, adding a node touches only that node (its key and certificate), and
removing one is one line in a revocation list. The CA's private key stays offline with the
administrator who signs certificates (`poold keys sign`, `faultd keys sign`); daemons hold only
its public key. poolD's ring has the federation's CA, each pool's faultD ring the pool's own.

A certificate says: this public key speaks for `node_name`, whose overlay id is `node_id`, of
pool `pool`, in ring `ring`, from the `hosts` listed (names, IP addresses or CIDR blocks), between
`not_before` and `not_after`; `serial` names it in revocation lists. What a daemon checks with it:
`common.overlay.identity`.

Files (all hex or JSON text, so an administrator can read them):
- `ca.key`: the CA's private key (32 bytes hex, mode 0600; keep it offline);
- `ca.pub`: the CA's public key (32 bytes hex; every daemon of the ring has it);
- `node.key`: a node's private key (32 bytes hex, mode 0600, owned by the daemon's user);
- `node.pub`: its public key, what the node's admin sends to the CA's holder to be signed;
- `node.cert`: the certificate (JSON);
- a revocation list: serials of certificates no longer valid, one per line (`#` comments).

No cryptography is written here: keys, signatures and their checks are the `cryptography`
package's Ed25519 (PyCA, OpenSSL underneath).
"""

from __future__ import annotations

import functools
import ipaddress
import json
import os
import pathlib
import secrets
import stat
from typing import Annotated, Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from common.overlay.auth import KeyFileError, read_secret_file
from common.overlay.ids import id_from_bytes, id_hex, id_to_bytes
from common.wire import pack, unpack

KEY_BYTES = 32
SIGNATURE_BYTES = 64
MAX_HOSTS = 32
MAX_CERT_BYTES = 4096
CERT_CONTEXT = "selforg-node-certificate-v1"
RING_NAME = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$"
NODE_NAME = r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,252}$"
POOL = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
HOST = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,252}$"  # a name, an IP address or a CIDR block


class CertificateError(Exception):
    """A certificate, key or revocation file that cannot be used; the text names the file."""


Host = Annotated[str, Field(pattern=HOST)]


class _FieldError(ValueError):
    """A certificate file's field that is not what it must be (from_json names it)."""


class NodeCertificate(BaseModel):
    """A CA's statement that `public_key` speaks for this node; see the module docstring."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ring: str = Field(pattern=RING_NAME)
    node_name: str = Field(pattern=NODE_NAME)
    node_id: int = Field(ge=0, lt=1 << 128)
    pool: str = Field(pattern=POOL)
    hosts: tuple[Host, ...] = Field(min_length=1, max_length=MAX_HOSTS)
    public_key: bytes = Field(min_length=KEY_BYTES, max_length=KEY_BYTES)
    not_before: float = Field(allow_inf_nan=False)
    not_after: float = Field(allow_inf_nan=False)
    serial: int = Field(ge=1, lt=1 << 63)
    signature: bytes = Field(b"", max_length=SIGNATURE_BYTES)

    def signed_part(self) -> bytes:
        """What the CA signs: every field but the signature, in a fixed order, with a context."""
        return pack([CERT_CONTEXT, *self._fields()])

    def _fields(self) -> list[object]:
        """Every field but the signature, in the order both encodings use."""
        return [
            self.ring,
            self.node_name,
            id_to_bytes(self.node_id),
            self.pool,
            list(self.hosts),
            self.public_key,
            self.not_before,
            self.not_after,
            self.serial,
        ]

    def to_wire(self) -> bytes:
        """The certificate as it travels inside sealed messages (msgpack)."""
        return pack([*self._fields(), self.signature])

    @classmethod
    def from_wire(cls, data: bytes) -> NodeCertificate:
        """The certificate in `to_wire`'s bytes; ValueError says what is wrong (not that it is
        authentic: that is `CertificateAuthority.verify`'s job)."""
        if not isinstance(data, bytes) or len(data) > MAX_CERT_BYTES:
            raise ValueError(f"a certificate is at most {MAX_CERT_BYTES} bytes of msgpack")
        try:
            fields = unpack(data)
        except Exception as e:  # msgpack raises several unrelated types for malformed input
            raise ValueError(f"certificate is not msgpack: {type(e).__name__}") from None
        if not (isinstance(fields, list) and len(fields) == 10 and isinstance(fields[2], bytes)):
            raise ValueError("certificate is not a list of its 10 fields")
        ring, name, node_id, pool, hosts, public_key, not_before, not_after, serial, signature = fields
        try:
            return cls.model_validate(
                {
                    "ring": ring,
                    "node_name": name,
                    "node_id": id_from_bytes(node_id),
                    "pool": pool,
                    "hosts": tuple(hosts) if isinstance(hosts, list) else hosts,
                    "public_key": public_key,
                    "not_before": not_before,
                    "not_after": not_after,
                    "serial": serial,
                    "signature": signature,
                },
                strict=True,
            )
        except ValidationError as e:
            first = e.errors()[0]
            raise ValueError(
                f"certificate field {'.'.join(map(str, first['loc']))}: {first['msg']}"
            ) from None

    def allows_host(self, host: str) -> bool:
        """Whether this node may speak from / for `host` (an address or a name)."""
        return host_allowed(self.hosts, host)

    def to_json(self) -> str:
        """The certificate file's text (node.cert)."""
        data = self.model_dump()
        data["node_id"] = id_hex(self.node_id)
        data["hosts"] = list(self.hosts)
        data["public_key"] = self.public_key.hex()
        data["signature"] = self.signature.hex()
        return json.dumps(data, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> NodeCertificate:
        """A certificate file's certificate; ValueError says what is wrong."""
        try:
            data = json.loads(text)
            for name, convert in (
                ("node_id", lambda v: int(v, 16)),
                ("public_key", bytes.fromhex),
                ("signature", bytes.fromhex),
            ):
                value = data[name]
                try:
                    if not isinstance(value, str):
                        raise TypeError
                    data[name] = convert(value)
                except (TypeError, ValueError):
                    raise _FieldError(f"field {name}: not hex text") from None
            return cls.model_validate(data)
        except ValidationError as e:
            first = e.errors()[0]
            raise ValueError(f"field {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
        except _FieldError as e:
            raise ValueError(str(e)) from None
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"not a node certificate: {type(e).__name__}: {e}") from None
        except RecursionError:
            raise ValueError("not a node certificate: JSON nested too deep") from None

    def describe(self) -> str:
        """One line for logs and `keys show`."""
        return (
            f"{self.node_name} (pool {self.pool}, ring {self.ring}, id {id_hex(self.node_id)[:8]}…, "
            f"serial {self.serial}, hosts {', '.join(self.hosts)})"
        )


@functools.lru_cache(maxsize=4096)
def _host_rules(hosts: tuple[str, ...]) -> tuple[frozenset[str], tuple[Any, ...]]:
    names, networks = set(), []
    for h in hosts:
        try:
            networks.append(ipaddress.ip_network(h, strict=False))
        except ValueError:
            names.add(h.lower())
    return frozenset(names), tuple(networks)


@functools.lru_cache(maxsize=4096)
def host_allowed(hosts: tuple[str, ...], host: str) -> bool:
    """Whether `host` is one of `hosts`: the same name (any case), or an address inside one of
    the IP addresses or CIDR blocks listed."""
    names, networks = _host_rules(hosts)
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host.lower() in names
    return any(address in net for net in networks)


def public_key_of(private: Ed25519PrivateKey) -> bytes:
    """The 32 raw bytes of a private key's public key."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def load_private_key(path: str | pathlib.Path, what: str = "private key") -> Ed25519PrivateKey:
    """An Ed25519 private key from a hex file only its owner can read (KeyFileError if not)."""
    raw = read_secret_file(path, what)
    if len(raw) != KEY_BYTES:
        raise KeyFileError(f"{path}: {what} has {len(raw)} bytes, an Ed25519 key has {KEY_BYTES}")
    return Ed25519PrivateKey.from_private_bytes(raw)


def read_public_file(path: str | pathlib.Path, what: str) -> str:
    """A file others may read but nobody but its owner may change (a CA key, a certificate, a
    revocation list): whoever can rewrite it decides whom the daemon trusts."""
    name = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise CertificateError(f"{name}: cannot open {what}: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CertificateError(f"{name}: {what} is not a regular file")
        if stat.S_IMODE(st.st_mode) & 0o022:
            raise CertificateError(
                f"{name}: permissions {stat.S_IMODE(st.st_mode):04o} let other users change the {what}; "
                f"chmod go-w {name}"
            )
        with os.fdopen(fd, "rb", closefd=False) as f:
            raw = f.read(1 << 20)
    except OSError as e:
        raise CertificateError(f"{name}: cannot read {what}: {e.strerror or e}") from None
    finally:
        os.close(fd)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CertificateError(f"{name}: {what} is not text") from None


def load_public_key(path: str | pathlib.Path) -> Ed25519PublicKey:
    """A CA's public key (ca.pub: 32 bytes as hex)."""
    text = read_public_file(path, "CA public key")
    try:
        raw = bytes.fromhex("".join(text.split()))
    except ValueError:
        raise CertificateError(f"{path}: CA public key is not hex text") from None
    if len(raw) != KEY_BYTES:
        raise CertificateError(f"{path}: CA public key has {len(raw)} bytes, not {KEY_BYTES}")
    return Ed25519PublicKey.from_public_bytes(raw)


def load_certificate(path: str | pathlib.Path) -> NodeCertificate:
    """A node certificate file (node.cert)."""
    try:
        return NodeCertificate.from_json(read_public_file(path, "certificate"))
    except ValueError as e:
        raise CertificateError(f"{path}: {e}") from None


def load_revoked(path: str | pathlib.Path) -> frozenset[int]:
    """The serials in a revocation list: one decimal serial per line, `#` starts a comment."""
    serials = set()
    for number, line in enumerate(read_public_file(path, "revocation list").splitlines(), 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        if not text.isdigit():
            raise CertificateError(f"{path}:{number}: {text[:40]!r} is not a certificate serial")
        serials.add(int(text))
    return frozenset(serials)


def write_public_file(path: str | pathlib.Path, text: str) -> None:
    """Write a new public file (mode 0644); never overwrite one."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        raise CertificateError(f"{path}: already exists; refusing to overwrite it") from None
    except OSError as e:
        raise CertificateError(f"{path}: cannot create: {e.strerror or e}") from None
    with os.fdopen(fd, "w") as f:
        os.fchmod(fd, 0o644)
        f.write(text)


class CertificateAuthority:
    """The holder of a ring's CA private key: signs node certificates (offline, by an admin)."""

    def __init__(self, private: Ed25519PrivateKey) -> None:
        self.private = private

    @property
    def public_key(self) -> bytes:
        """The CA's public key, as daemons hold it (ca.pub)."""
        return public_key_of(self.private)

    def issue(
        self,
        *,
        ring: str,
        node_name: str,
        node_id: int,
        pool: str,
        hosts: list[str] | tuple[str, ...],
        public_key: bytes,
        not_before: float,
        not_after: float,
        serial: int | None = None,
    ) -> NodeCertificate:
        """A signed certificate; ValueError (naming the field) for a value no daemon would accept."""
        try:
            unsigned = NodeCertificate(
                ring=ring,
                node_name=node_name,
                node_id=node_id,
                pool=pool,
                hosts=tuple(hosts),
                public_key=public_key,
                not_before=not_before,
                not_after=not_after,
                serial=serial if serial is not None else secrets.randbits(62) + 1,
            )
        except ValidationError as e:
            first = e.errors()[0]
            raise ValueError(f"{'.'.join(map(str, first['loc']))}: {first['msg']}") from None
        if not_after <= not_before:
            raise ValueError("not_after must come after not_before")
        signature = self.private.sign(unsigned.signed_part())
        return unsigned.model_copy(update={"signature": signature})


def signature_valid(public_key: Ed25519PublicKey, signature: bytes, data: bytes) -> bool:
    """Whether `signature` is the owner of `public_key`'s signature of `data`."""
    try:
        public_key.verify(signature, data)
    except InvalidSignature:
        return False
    return True

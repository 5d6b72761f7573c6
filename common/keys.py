"""Key management for a ring's administrator: `poold keys ...` and `faultd keys ...` (one
implementation for both daemons; see common.overlay.certs for what the files are).

    keys init-ca DIR                 the ring's CA: DIR/ca.key (keep offline) and DIR/ca.pub
    keys new-node DIR                a node's key pair: DIR/node.key (stays there) and DIR/node.pub
    keys sign --ca-key K --public-key P --name N --pool POOL --host H [--host H] --out node.cert
    keys show FILE                   what a certificate says
    keys revoke --list FILE SERIAL   add a serial to a revocation list (then SIGHUP the daemons)

The same functions serve the sandbox harness and the tests (`issue_node`).
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from pathlib import Path

from common.config import ConfigError
from common.overlay.auth import KeyFileError, generate_key_file
from common.overlay.certs import (
    CertificateAuthority,
    CertificateError,
    NodeCertificate,
    load_certificate,
    load_private_key,
    load_revoked,
    public_key_of,
    read_public_file,
    write_public_file,
)
from common.overlay.ids import id_hex, node_id_from_name, parse_id

DAY = 86_400.0


def init_ca(directory: Path) -> CertificateAuthority:
    """A new CA in `directory`: ca.key (0600) and ca.pub; refuses to overwrite either."""
    directory.mkdir(parents=True, exist_ok=True)
    generate_key_file(directory / "ca.key")
    ca = CertificateAuthority(load_private_key(directory / "ca.key", "CA private key"))
    write_public_file(directory / "ca.pub", ca.public_key.hex() + "\n")
    return ca


def new_node_key(directory: Path, owner: str | None = None) -> bytes:
    """A new node key pair in `directory`: node.key (0600) and node.pub, given to `owner` (a user
    name; None: whoever runs this); returns the public key."""
    ids = None if owner is None else _user_ids(owner)
    directory.mkdir(parents=True, exist_ok=True)
    generate_key_file(directory / "node.key")
    public = public_key_of(load_private_key(directory / "node.key", "node private key"))
    write_public_file(directory / "node.pub", public.hex() + "\n")
    if ids is not None:
        for name in ("node.key", "node.pub"):
            # not through a symbolic link: the directory may be the owner's (condor's), who could
            # put one in place of node.key, and root would give it whatever that names
            os.chown(directory / name, *ids, follow_symlinks=False)
    return public


def user_exists(user: str) -> bool:
    """Whether this machine has the user `user`."""
    import pwd

    try:
        pwd.getpwnam(user)
    except KeyError:
        return False
    return True


def _user_ids(user: str) -> tuple[int, int]:
    import pwd

    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise ValueError(f"no user {user!r} on this machine (--owner names who gets node.key)") from None
    return entry.pw_uid, entry.pw_gid


def read_node_public_key(path: Path) -> bytes:
    """A node.pub file's 32 bytes."""
    try:
        raw = bytes.fromhex("".join(read_public_file(path, "node public key").split()))
    except ValueError:
        raise CertificateError(f"{path}: node public key is not hex text") from None
    if len(raw) != 32:
        raise CertificateError(f"{path}: node public key has {len(raw)} bytes, not 32")
    return raw


@dataclass(frozen=True)
class NodeFiles:
    """Where one node's key material was written (what its `[ring]` section names)."""

    key: Path
    cert: Path
    certificate: NodeCertificate


def issue_node(
    ca: CertificateAuthority,
    directory: Path,
    *,
    ring: str,
    name: str,
    pool: str,
    hosts: list[str],
    node_id: int | None = None,
    days: float = 365.0,
    now: float | None = None,
) -> NodeFiles:
    """Make a node's key pair in `directory` and sign its certificate there (node.cert): what
    `new-node` and `sign` do, in one step, for a harness that holds the CA itself."""
    public = new_node_key(directory)
    start = time.time() if now is None else now
    cert = ca.issue(
        ring=ring,
        node_name=name,
        node_id=node_id_from_name(name) if node_id is None else node_id,
        pool=pool,
        hosts=hosts,
        public_key=public,
        not_before=start - 300.0,  # clocks of a ring are only NTP-close
        not_after=start + days * DAY,
    )
    write_public_file(directory / "node.cert", cert.to_json())
    return NodeFiles(directory / "node.key", directory / "node.cert", cert)


def add_keys_parser(sub: argparse._SubParsersAction, prog: str, service_user: str | None = None) -> None:
    """The `keys` command and its subcommands, for `prog` (poold or faultd), in the suite's style:
    each says what it does and its defaults (common.cli.add_command). `service_user`: the user
    the daemon runs as (None: root), who must own its node.key."""
    from common.cli import add_command

    keys = add_command(sub, "keys", "node keys and certificates of the ring (for its administrator)")
    what = keys.add_subparsers(dest="keys_command", required=True, metavar="KEYS_COMMAND")
    ca = add_command(what, "init-ca", "make the ring's certificate authority (keep ca.key offline)")
    ca.add_argument("directory", type=Path, help="where to write ca.key and ca.pub")
    node = add_command(what, "new-node", "make this node's key pair (node.key stays here; send node.pub)")
    node.add_argument("directory", type=Path, help="where to write node.key and node.pub")
    who = f"{service_user}, the user {prog} runs as," if service_user else "root, as"
    node.add_argument(
        "--owner", help=f"the user who gets node.key (default: {who} when run as root; else whoever runs it)"
    )
    sign = add_command(what, "sign", "sign a node's public key into a certificate (with the CA key)")
    sign.add_argument("--ca-key", type=Path, required=True, help="the CA's private key (ca.key)")
    sign.add_argument("--public-key", type=Path, required=True, help="the node's node.pub")
    sign.add_argument("--name", required=True, help="the node's [ring] node_name")
    sign.add_argument("--node-id", help="the node's [ring] node_id, if its config sets one (32 hex digits)")
    sign.add_argument("--pool", required=True, help="the pool the node belongs to")
    sign.add_argument(
        "--host", action="append", required=True, help="a name, address or CIDR it speaks from (repeat)"
    )
    default_ring = "poold" if prog == "poold" else "faultd:POOL"
    sign.add_argument("--ring", help=f"ring name (default {default_ring}); every member has the same")
    sign.add_argument("--days", type=float, default=365.0, help="validity from now, in days")
    sign.add_argument("--serial", type=int, help="the certificate's serial (default: random)")
    sign.add_argument("--out", type=Path, required=True, help="the certificate file to write (node.cert)")
    show = add_command(what, "show", "print a certificate")
    show.add_argument("file", type=Path, help="the certificate (node.cert)")
    revoke = add_command(what, "revoke", "add a certificate's serial to a revocation list")
    revoke.add_argument("--list", type=Path, required=True, help="the revocation list ([ring] revoked_file)")
    revoke.add_argument("serial", type=int, help="the revoked certificate's serial (keys show prints it)")
    keys.set_defaults(keys_prog=prog, keys_service_user=service_user)


def run_keys(args: argparse.Namespace) -> int:
    """Carry out a `keys` subcommand; errors become a ConfigError of one line."""
    try:
        return _run(args)
    except (KeyFileError, CertificateError) as e:
        raise ConfigError(str(e)) from None
    except ValueError as e:
        raise ConfigError(f"keys {args.keys_command}: {e}") from None


def _run(args: argparse.Namespace) -> int:
    command = args.keys_command
    if command == "init-ca":
        ca = init_ca(args.directory)
        where = args.directory
        print(f"CA made: {where / 'ca.key'} (keep it offline, mode 0600) and {where / 'ca.pub'}")
        print(f"CA public key {ca.public_key.hex()}: copy ca.pub to every node of the ring")
        return 0
    if command == "new-node":
        from common.install import daemon_user

        owner, user = args.owner, daemon_user(args.keys_prog, args.keys_service_user)
        note = ""
        if owner is None and user is not None and os.geteuid() == 0:
            if user_exists(user):
                owner = user
            else:
                note = f"; no user {user} here yet: chown {user}: node.key once HTCondor is installed"
        public = new_node_key(args.directory, owner)
        key, pub = args.directory / "node.key", args.directory / "node.pub"
        print(f"node key made: {key} (stays here{f', owned by {owner}' if owner else ''}) and {pub}{note}")
        print(f"public key {public.hex()}: have it signed with 'keys sign' by the CA's holder")
        return 0
    if command == "sign":
        ca = CertificateAuthority(load_private_key(args.ca_key, "CA private key"))
        now = time.time()
        ring = args.ring or ("poold" if args.keys_prog == "poold" else f"faultd:{args.pool}")
        cert = ca.issue(
            ring=ring,
            node_name=args.name,
            node_id=parse_id(args.node_id) if args.node_id else node_id_from_name(args.name),
            pool=args.pool,
            hosts=args.host,
            public_key=read_node_public_key(args.public_key),
            not_before=now - 300.0,
            not_after=now + args.days * DAY,
            serial=args.serial,
        )
        write_public_file(args.out, cert.to_json())
        print(f"{args.out}: {cert.describe()}, valid {args.days:g} days")
        return 0
    if command == "show":
        cert = load_certificate(args.file)
        left = (cert.not_after - time.time()) / DAY
        print(f"{args.file}: {cert.describe()}")
        print(f"  node id {id_hex(cert.node_id)}, public key {cert.public_key.hex()}, {left:.1f} days left")
        return 0
    assert command == "revoke"
    if args.list.exists():
        if args.serial in load_revoked(args.list):
            print(f"{args.list}: {args.serial} is already revoked")
            return 0
        with open(args.list, "a") as f:
            f.write(f"{args.serial}\n")
    else:
        write_public_file(args.list, f"# revoked certificate serials, one per line\n{args.serial}\n")
    os.chmod(args.list, 0o644)
    print(f"{args.list}: {args.serial} revoked; reload the daemons (systemctl reload) to apply it")
    return 0

"""Authentication of overlay datagrams: a MAC with the ring's shared key, a timestamp and a nonce.

Overlay messages travel as UDP datagrams between machines, so anyone on the network can send one.
Every datagram is therefore sealed as the msgpack array `[timestamp, nonce, payload, mac]`, where
`mac = HMAC-SHA256(key, pack([timestamp, nonce, payload]))`. On receipt, anything that is not
authentic, not fresh (timestamp more than `window` seconds from the receiver's clock) or already
seen (same nonce) is logged with the peer's name, counted in `Sealer.drops` and dropped; like
`common.wire`, nothing raises into the caller's receive loop.

The module is pure: no clock reads, no sockets, no randomness of its own. Callers pass `now`
(wall-clock seconds) and the nonce, so the simulator can run it deterministically.

Replay memory is bounded by a *horizon*: the largest timestamp of any nonce the sealer has
forgotten. A nonce is forgotten either because it left the window (its timestamp is older than
`now - window`) or because more than `max_nonces` are remembered, in which case the oldest (by
timestamp) is evicted. Any datagram whose timestamp is at or below the horizon is refused as
STALE. Since every forgotten nonce has a timestamp at or below the horizon, and the horizon never
moves back, a replay is always refused: either its nonce is still remembered (REPLAYED) or its
timestamp is at or below the horizon (STALE), whatever the clock does. The price is paid only
under overload (more than `max_nonces` messages per window) or when the clock steps back: then
some genuine but late messages are refused as STALE. With a clock that never steps back, pruning
by age alone keeps the horizon below `now - window` and refuses nothing the window would accept.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import hmac
import math
import os
import pathlib
import secrets
import stat
from collections import Counter
from enum import StrEnum

from common.droplog import DropLog
from common.wire import MAX_DATAGRAM, pack, unpack_array

MIN_KEY_BYTES = 32
NONCE_BYTES = 16
MAC_BYTES = hashlib.sha256().digest_size


class KeyFileError(Exception):
    """The ring key file cannot be used; the message names the file and what to do about it."""


def _describe_exposure(mode: int) -> str:
    verbs = []
    if mode & 0o044:
        verbs.append("read")
    if mode & 0o022:
        verbs.append("change")
    return " or ".join(verbs) if verbs else "access"


def read_secret_file(path: str | pathlib.Path, what: str = "key") -> bytes:
    """The bytes written as hex text in a file that only the daemon's user can access.

    Refused (KeyFileError naming the file) if it is missing or unreadable, not a regular file, open
    to group or others, or not hex: a secret others can read lets them act as its owner.
    """
    name = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not hang the daemon; see below
    except OSError as e:
        raise KeyFileError(f"{name}: cannot open {what} file: {e.strerror or e}") from e
    try:
        st = os.fstat(fd)  # the file actually opened, not whatever the path names afterwards
        if not stat.S_ISREG(st.st_mode):
            raise KeyFileError(f"{name}: not a regular file")
        perms = stat.S_IMODE(st.st_mode)
        if perms & 0o077:
            raise KeyFileError(
                f"{name}: permissions {perms:04o} let other users {_describe_exposure(perms)} the {what}; "
                f"chmod 600 {name}"
            )
        with os.fdopen(fd, "rb", closefd=False) as f:
            raw = f.read(1 << 16)
    except OSError as e:
        raise KeyFileError(f"{name}: cannot read {what} file: {e.strerror or e}") from e
    finally:
        os.close(fd)
    try:
        return bytes.fromhex("".join(raw.decode("ascii").split()))
    except ValueError as e:  # UnicodeDecodeError is a ValueError too; never echo the content
        raise KeyFileError(f"{name}: {what} is not hex text") from e


def check_readable_by(path: str | pathlib.Path, user: str, daemon: str, what: str = "key") -> None:
    """Refuse (KeyFileError naming the file) a secret file that `user`, whom `daemon` runs as,
    could not read: owned by another user (secrets are 0600, so only their owner reads them).
    For check-config run as root, which reads every file and so would not see the problem that
    stops the daemon at its start."""
    import pwd

    uid = pwd.getpwnam(user).pw_uid  # the caller knows the user exists
    try:
        st = os.stat(path)
    except OSError as e:
        raise KeyFileError(f"{path}: cannot open {what} file: {e.strerror or e}") from e
    if st.st_uid != uid:
        try:
            owner = pwd.getpwuid(st.st_uid).pw_name
        except KeyError:
            owner = str(st.st_uid)
        raise KeyFileError(
            f"{path}: owned by {owner}, but {daemon} runs as {user} (its systemd unit) and could not "
            f"read the {what}; chown {user}: {path}"
        )


def load_ring_key(path: str | pathlib.Path) -> bytes:
    """The ring's shared key, from a file of hex text that only the daemon's user can access.

    Refused (KeyFileError) if the file is missing or unreadable, open to group or others, not hex
    or shorter than MIN_KEY_BYTES: a key others can read lets them forge any overlay message.
    """
    key = read_secret_file(path)
    if len(key) < MIN_KEY_BYTES:
        raise KeyFileError(f"{path}: key has {len(key)} bytes, at least {MIN_KEY_BYTES} are needed")
    return key


def generate_key_file(path: str | pathlib.Path) -> None:
    """Write a new random key as hex, mode 0600; never overwrite (that would split the ring).
    The same 32 random bytes make an Ed25519 private key (common.overlay.certs)."""
    name = str(path)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError as e:
        raise KeyFileError(f"{name}: already exists; refusing to overwrite a key") from e
    except OSError as e:
        raise KeyFileError(f"{name}: cannot create key file: {e.strerror or e}") from e
    try:
        os.fchmod(fd, 0o600)  # the umask may have removed owner bits
        data = (secrets.token_bytes(MIN_KEY_BYTES).hex() + "\n").encode("ascii")
        with os.fdopen(fd, "wb", closefd=False) as f:
            f.write(data)
            f.flush()
            os.fsync(fd)
    except OSError as e:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)  # a half-written key would be refused later anyway; leave nothing behind
        raise KeyFileError(f"{name}: cannot write key file: {e.strerror or e}") from e
    os.close(fd)


class AuthDrop(StrEnum):
    """Why the sealer dropped a datagram: the keys of `Sealer.drops`."""

    MALFORMED = "malformed"
    BAD_MAC = "bad_mac"
    STALE = "stale"
    REPLAYED = "replayed"
    OVERSIZED = "oversized"


class Sealer:
    """Seals outgoing overlay datagrams and opens incoming ones; counts what it had to drop and why."""

    def __init__(
        self,
        key: bytes,
        *,
        window: float = 30.0,
        max_size: int = MAX_DATAGRAM,
        max_nonces: int = 200_000,
        name: str = "overlay",
    ) -> None:
        if len(key) < MIN_KEY_BYTES:
            raise ValueError(f"ring key has {len(key)} bytes, at least {MIN_KEY_BYTES} are needed")
        if not (math.isfinite(window) and window > 0):
            raise ValueError(f"window must be a positive number of seconds, not {window!r}")
        if max_nonces < 1:
            raise ValueError(f"max_nonces must be at least 1, not {max_nonces}")
        self._key = bytes(key)
        self.window = float(window)
        self.max_size = max_size
        self.max_nonces = max_nonces
        self.name = name
        self.drops: Counter[str] = Counter()
        self.drop_log = DropLog("overlay.auth")
        self._seen: set[bytes] = set()
        self._by_age: list[tuple[float, bytes]] = []  # heap of (timestamp, nonce) for the nonces in _seen
        self._horizon = -math.inf  # largest timestamp of a forgotten nonce: at or below it, STALE

    def _mac(self, timestamp: float, nonce: bytes, payload: bytes) -> bytes:
        return hmac.new(self._key, pack([timestamp, nonce, payload]), hashlib.sha256).digest()

    def seal(self, payload: bytes, now: float, nonce: bytes) -> bytes:
        """The datagram carrying payload, stamped `now`; the caller supplies a fresh random nonce."""
        if len(nonce) != NONCE_BYTES:
            raise ValueError(f"nonce must be {NONCE_BYTES} bytes, not {len(nonce)}")
        timestamp = float(now)
        if not math.isfinite(timestamp):
            raise ValueError(f"timestamp must be finite, not {now!r}")
        nonce, payload = bytes(nonce), bytes(payload)
        datagram = pack([timestamp, nonce, payload, self._mac(timestamp, nonce, payload)])
        if len(datagram) > self.max_size:
            raise ValueError(f"sealed datagram of {len(datagram)} bytes exceeds {self.max_size}")
        return datagram

    def drop(self, reason: AuthDrop, peer: object, detail: str) -> None:
        """Count a dropped datagram under its reason; the log line is rate-limited (common.droplog)."""
        self.drops[reason] += 1
        self.drop_log.drop(self.name, peer, str(reason), detail)

    @property
    def remembered(self) -> int:
        """How many nonces are held for replay detection (never more than max_nonces)."""
        return len(self._seen)

    def _forget_oldest(self) -> None:
        timestamp, nonce = heapq.heappop(self._by_age)
        self._seen.discard(nonce)
        self._horizon = max(self._horizon, timestamp)

    def _prune(self, now: float) -> None:
        cutoff = now - self.window
        while self._by_age and self._by_age[0][0] < cutoff:
            self._forget_oldest()

    def open(self, datagram: bytes, now: float, peer: object) -> bytes | None:
        """The authentic, fresh, first-seen payload of a datagram, or None after logging and
        counting why it was dropped."""
        checked = self.check(datagram, now, peer)
        if checked is None:
            return None
        timestamp, nonce, payload = checked
        self.remember(timestamp, nonce)
        return payload

    def check(self, datagram: bytes, now: float, peer: object) -> tuple[float, bytes, bytes] | None:
        """`open` without remembering the nonce: (timestamp, nonce, payload) of an authentic, fresh,
        first-seen datagram, or None after counting why not. A caller that checks more (a
        signature, common.overlay.envelope) calls `remember` once it believes the datagram, so
        that one with a bad signature does not take a genuine datagram's nonce."""
        if len(datagram) > self.max_size:
            self.drop(AuthDrop.OVERSIZED, peer, f"datagram of {len(datagram)} bytes exceeds {self.max_size}")
            return None
        envelope = unpack_array(datagram, 4, "[timestamp, nonce, payload, mac]")
        if isinstance(envelope, str):
            self.drop(AuthDrop.MALFORMED, peer, envelope)
            return None
        timestamp, nonce, payload, mac = envelope
        if not (isinstance(timestamp, float) and math.isfinite(timestamp)):
            self.drop(AuthDrop.MALFORMED, peer, f"timestamp {timestamp!r} is not a finite float")
            return None
        if not (isinstance(nonce, bytes) and len(nonce) == NONCE_BYTES):
            self.drop(AuthDrop.MALFORMED, peer, f"nonce is not {NONCE_BYTES} bytes")
            return None
        if not isinstance(payload, bytes):
            self.drop(AuthDrop.MALFORMED, peer, f"payload is {type(payload).__name__}, not bytes")
            return None
        if not (isinstance(mac, bytes) and len(mac) == MAC_BYTES):
            self.drop(AuthDrop.MALFORMED, peer, f"mac is not {MAC_BYTES} bytes")
            return None
        if not hmac.compare_digest(mac, self._mac(timestamp, nonce, payload)):
            self.drop(AuthDrop.BAD_MAC, peer, "mac does not match (wrong ring key or altered datagram)")
            return None
        skew = now - timestamp
        if abs(skew) > self.window:
            self.drop(AuthDrop.STALE, peer, f"timestamp {skew:+.3f}s from local clock, window {self.window}s")
            return None
        self._prune(now)
        if timestamp <= self._horizon:
            self.drop(
                AuthDrop.STALE, peer, f"timestamp at or before {self._horizon}, the newest forgotten nonce's"
            )
            return None
        if nonce in self._seen:
            self.drop(AuthDrop.REPLAYED, peer, f"nonce {nonce.hex()} already seen")
            return None
        return timestamp, nonce, payload

    def remember(self, timestamp: float, nonce: bytes) -> None:
        """Record a believed datagram's nonce, so that a copy of it is refused as REPLAYED."""
        if nonce in self._seen:
            return
        self._seen.add(nonce)
        heapq.heappush(self._by_age, (timestamp, nonce))
        while len(self._seen) > self.max_nonces:
            self._forget_oldest()  # possibly this very nonce: a replay of it will then be STALE

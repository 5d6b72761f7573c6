"""poold's state file (issue 16): what a poold restarted on this machine, or started on the
machine that took the pool's manager role over, resumes from.

The core exports its durable state as a `PooldState` (PoolCore.export_state) and restores from one
(PoolCore.restore_state); this module is the document and its file. The file is JSON, one
versioned and validated document, written atomically (temporary file, fsync, rename), so a reader
(faultD's Replication Module, which replicates the file named by its `[condor] poold_state`)
sees the old document or the new one, never half.

Times in the document are wall-clock seconds (the core runs on a monotonic clock whose origin is
the process's; `wall_offset` converts), so that what expires expires at the same moment after a
restart or on another machine.

A file that is too big, not JSON, not a poold state file, of another version, or with any field
out of bounds raises `StateFileError` naming the file and the field; poold then logs it, sets the
file aside (`set_aside`: nothing is lost) and starts fresh. Every list is bounded, so a hostile
file cannot make poold hold more than a federation's worth of pools; what the core restores is
checked again as if a peer had said it (hosts, collectors, expiry no later than the core itself
would grant).
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError

from common.condor.config_files import write_atomically
from common.config import StrictModel
from common.files import read_regular
from common.overlay.messages import ADDR, Peer
from poolD.messages import HOST_PORT, POOL_NAME, REQUEST_ID

STATE_FORMAT = "poold-state"
STATE_VERSION = 1
MAX_STATE_BYTES = 8 << 20  # far beyond MAX_POOLS offers; a bigger file is refused unread
MAX_POOLS = 4096  # entries in any one per-pool list of the document
MAX_HOSTS = 1000  # hosts in one grant, schedds in the FLOCK_TO read back
STATE_FILE_MODE = 0o640

Time = Annotated[float, Field(allow_inf_nan=False, ge=-1e12, le=1e12)]
Pool = Annotated[str, Field(pattern=POOL_NAME)]
Text = Annotated[str, Field(max_length=500)]
Collector = Annotated[str, Field(pattern=HOST_PORT, max_length=300)]
HostName = Annotated[str, Field(max_length=300)]


class StateFileError(Exception):
    """A state file that cannot be used; str() is one line naming the file and what is wrong."""


class SavedPeer(StrictModel):
    """A pool's poold as the overlay knows it: its node id (hex) and address."""

    id: str = Field(pattern=r"^[0-9a-f]{32}$")
    addr: str = Field(pattern=ADDR, max_length=300)

    @classmethod
    def of(cls, peer: Peer) -> SavedPeer:
        """The saved form of an overlay peer."""
        return cls(id=f"{peer.id:032x}", addr=peer.addr)

    def peer(self) -> Peer:
        """The overlay peer it was saved from."""
        return Peer(id=int(self.id, 16), addr=self.addr)


class SavedOffer(StrictModel):
    """One willing-list entry: a pool's live offer."""

    pool: Pool
    collector: Collector
    origin: SavedPeer
    row: int = Field(ge=0, le=127)
    free_slots: int = Field(ge=0, le=10_000_000)
    total_slots: int = Field(ge=0, le=10_000_000)
    queue_length: int = Field(ge=0, le=100_000_000)
    utilization: float = Field(ge=0.0, le=1.0)
    expires_at: Time
    tiebreak: float = Field(ge=0.0, le=1.0)


class SavedBlacklisting(StrictModel):
    """A pool refused until `until`, and why."""

    pool: Pool
    until: Time
    reason: Text


class SavedGrant(StrictModel):
    """What FLOCK_FROM lets in for one pool (poolD.core.Grant), and the overlay address it asked from."""

    pool: Pool
    hosts: list[HostName] = Field(max_length=MAX_HOSTS)
    host: HostName
    until: Time
    rule: Text
    addr: HostName | None = None


class SavedAuthorization(StrictModel):
    """A pool's answer to our FlockIntent."""

    pool: Pool
    accepted: bool
    reason: Text
    at: Time


class SavedFlockTo(StrictModel):
    """FLOCK_TO as read back from one schedd."""

    schedd: HostName
    collectors: list[HostName] = Field(max_length=100)


class SavedToken(StrictModel):
    """A token we hold from a peer, or approved for one (poolD.flock_trust), until `until`."""

    pool: Pool
    role: Literal["schedd", "negotiator"]
    until: Time


class SavedTokenRequest(StrictModel):
    """A token request of ours under way at a peer's collector."""

    pool: Pool
    role: Literal["schedd", "negotiator"]
    request_id: Annotated[str, Field(pattern=REQUEST_ID)] | None
    addr: HostName
    deadline: Time


class SavedRound(StrictModel):
    """A flocking round waiting for pools to authorize our schedds."""

    pools: list[Pool] = Field(max_length=100)
    reason: Text
    waiting: list[Pool] = Field(max_length=100)
    deadline: Time


class SavedCollector(StrictModel):
    """The collector a pool last announced, with the (epoch, seq) that said so (repointing)."""

    pool: Pool
    collector: Collector
    origin: SavedPeer
    epoch: int = Field(ge=0, lt=1 << 62)
    seq: int = Field(ge=0, lt=1 << 62)
    trust_domain: str | None = Field(None, max_length=253)


class PooldState(StrictModel):
    """poold's durable state: everything a poold resuming for this pool needs (see the module
    docstring); `PoolCore.export_state` makes it, `PoolCore.restore_state` takes it back."""

    format: Literal["poold-state"] = STATE_FORMAT
    version: Literal[1] = STATE_VERSION
    pool: Pool
    collector: Collector  # ours when saved: a restore elsewhere means the manager role moved
    saved_at: Time  # wall clock
    epoch: int = Field(0, ge=0, lt=1 << 62)  # faultD's epoch of the manager role, 0 without faultD
    seq: int = Field(0, ge=0, lt=1 << 62)  # our offers' sequence number
    offers: list[SavedOffer] = Field(default_factory=list, max_length=MAX_POOLS)
    blacklist: list[SavedBlacklisting] = Field(default_factory=list, max_length=MAX_POOLS)
    flock_to: list[Collector] = Field(default_factory=list, max_length=100)
    flock_to_seen: list[SavedFlockTo] = Field(default_factory=list, max_length=MAX_HOSTS)
    flocking_since: Time | None = None
    quiet_since: Time | None = None
    flock_from: list[HostName] = Field(default_factory=list, max_length=MAX_HOSTS)
    grants: list[SavedGrant] = Field(default_factory=list, max_length=MAX_POOLS)
    authorized: list[SavedAuthorization] = Field(default_factory=list, max_length=MAX_POOLS)
    tokens_held: list[SavedToken] = Field(default_factory=list, max_length=MAX_POOLS)
    tokens_issued: list[SavedToken] = Field(default_factory=list, max_length=MAX_POOLS)
    token_requests: list[SavedTokenRequest] = Field(default_factory=list, max_length=MAX_POOLS)
    round: SavedRound | None = None
    collectors: list[SavedCollector] = Field(default_factory=list, max_length=MAX_POOLS)


# ----------------------------------------------------------------------------- the file


def encode_state(state: PooldState) -> bytes:
    """The document as the file holds it (JSON, one field per line at the top level)."""
    return state.model_dump_json(indent=1).encode()


def decode_state(data: bytes, source: str) -> PooldState:
    """Check and read a document; StateFileError naming `source` and the field on any problem."""
    if len(data) > MAX_STATE_BYTES:
        raise StateFileError(f"{source}: {len(data)} bytes, more than a state file holds ({MAX_STATE_BYTES})")
    try:
        raw = json.loads(data)
    except (UnicodeDecodeError, ValueError) as e:
        raise StateFileError(f"{source}: not JSON: {str(e)[:200]}") from None
    except RecursionError:
        raise StateFileError(f"{source}: not a poold state file (JSON nested too deep)") from None
    if not isinstance(raw, dict) or raw.get("format") != STATE_FORMAT:
        raise StateFileError(f"{source}: not a poold state file (format is not {STATE_FORMAT!r})")
    version = raw.get("version")
    if version != STATE_VERSION:
        raise StateFileError(
            f"{source}: version: {json.dumps(version)[:20]}; "
            f"this poold reads state file version {STATE_VERSION}"
        )
    try:
        return PooldState.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(document)"
        raise StateFileError(f"{source}: {where}: {err['msg'][:200]}") from None


def load_state(path: Path) -> PooldState | None:
    """The state file's document; None when there is no file (a first start)."""
    try:
        data = read_regular(path, MAX_STATE_BYTES)
    except FileNotFoundError:
        return None
    except ValueError as e:
        raise StateFileError(f"{path}: {e}, not a state file") from None
    except OSError as e:
        raise StateFileError(f"{path}: cannot read: {e.strerror or e}") from None
    return decode_state(data, str(path))


def save_state(path: Path, state: PooldState) -> None:
    """Write the document atomically (fsync, rename); StateFileError naming the file on failure."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, encode_state(state), mode=STATE_FILE_MODE)
    except OSError as e:
        raise StateFileError(f"{path}: cannot save: {e.strerror or e}") from None


def set_aside(path: Path, wall: float | None = None) -> Path | None:
    """Move an unusable state file out of the way (kept, for a person to look at) so that poold
    starts fresh and saves anew; returns where it went, or None if it could not be moved. Only
    a regular file is moved (a directory named as the state file by mistake was carried off,
    contents and all), and never over an earlier one set aside."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
    except OSError:
        return None
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if wall is None else wall))
    target = path.with_name(f"{path.name}.rejected-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.rejected-{stamp}.{n}")
    try:
        path.replace(target)
    except OSError:
        return None
    return target


def summary(state: PooldState) -> dict[str, Any]:
    """A few numbers of a document, for the log line that says what poold resumed from."""
    return {
        "saved_at": state.saved_at,
        "offers": len(state.offers),
        "flock_to": len(state.flock_to),
        "grants": len(state.grants),
        "blacklisted": len(state.blacklist),
    }

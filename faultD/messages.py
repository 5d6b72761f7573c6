"""What the machines of one pool tell each other on faultD's ring (seed §3.3, §4.2, Fig. 4)."""

from __future__ import annotations

import hashlib

from pydantic import Field

from common.overlay.messages import AppMessage, Claims, NodeId, Peer, app_message
from common.wire import Message

HOST_PORT = r"^[A-Za-z0-9._-]+:[0-9]{1,5}$"
MAX_STATE_FILES = 64
# Epochs and versions grow by one per takeover or state change; anything near msgpack's 64-bit
# limit is a forgery, and a successor's epoch + 1 must still encode.
COUNTER_LIMIT = 1 << 62
# The role machine refuses a fencing epoch at or above this: it leaves room for 2**61 successors.
MAX_EPOCH = 1 << 61
# A pool's state (Accountant log, manager config files, poold's state) is far smaller. A manager
# replicates at most this many bytes of it (condor_role.read_state) and a holder keeps no more
# (role), so that a successor pushing on what it restored stays within the bulk channel's 64 MiB.
STATE_BYTES_LIMIT = 32 << 20


@app_message
class Alive(AppMessage):
    """The manager's heartbeat, broadcast to every ring member each `interval` seconds.

    `(epoch, manager.id)` is the fencing token: receivers ignore an alive whose token is lower
    than the highest they have seen, so a manager that was replaced cannot pull the pool back.
    """

    TYPE = "faultd.alive"
    manager: Peer
    collector: str = Field(pattern=HOST_PORT, description="where the pool's daemons must report")
    epoch: int = Field(ge=1, lt=COUNTER_LIMIT)
    seq: int = Field(ge=0, lt=COUNTER_LIMIT)
    interval: float = Field(gt=0, le=3600, description="seconds until the next alive")
    incarnation: int = Field(ge=0, lt=1 << 64, description="new each time a node becomes manager")
    state_version: int = Field(0, ge=0, lt=COUNTER_LIMIT)

    def claims(self) -> Claims:
        """The manager speaks for itself and the collector on its host."""
        return Claims(node=self.manager, hosts=(self.collector.rpartition(":")[0],))


@app_message
class ManagerMissing(AppMessage):
    """Routed with the silent manager's id as key: it reaches the live node closest to that id."""

    TYPE = "faultd.missing"
    manager: NodeId
    epoch: int = Field(ge=0, lt=COUNTER_LIMIT, description="the highest epoch the sender has seen")
    sender: Peer

    def claims(self) -> Claims:
        """The sender speaks for itself."""
        return Claims(node=self.sender)


@app_message
class PreemptReplacement(AppMessage):
    """The original manager is back and asks the replacement for its role."""

    TYPE = "faultd.preempt"
    original: Peer
    collector: str = Field(pattern=HOST_PORT)

    def claims(self) -> Claims:
        """The original manager speaks for itself and the collector on its host."""
        return Claims(node=self.original, hosts=(self.collector.rpartition(":")[0],))


class StateFile(Message):
    """One replicated file: what it is (`name`, e.g. "accountant") and its content."""

    TYPE = "faultd.state_file"
    name: str = Field(pattern=r"^[A-Za-z0-9._/-]{1,200}$")
    data: bytes


class PoolState(Message):
    """A versioned, checksummed snapshot of what a replacement needs to act as central manager."""

    TYPE = "faultd.pool_state"
    manager: NodeId
    epoch: int = Field(ge=0, lt=COUNTER_LIMIT)
    version: int = Field(ge=0, lt=COUNTER_LIMIT)
    taken_at: float
    files: list[StateFile] = Field(max_length=MAX_STATE_FILES)
    checksum: str = Field(pattern=r"^[0-9a-f]{64}$")

    @staticmethod
    def digest(files: list[StateFile]) -> str:
        """SHA-256 over the files' names and contents, in name order: the snapshot's checksum."""
        h = hashlib.sha256()
        for f in sorted(files, key=lambda f: f.name):
            h.update(f.name.encode() + b"\0" + len(f.data).to_bytes(8, "big") + f.data)
        return h.hexdigest()

    def intact(self) -> bool:
        """Whether the files still match the checksum (a replica failing it is never used)."""
        return self.digest(self.files) == self.checksum


@app_message
class ReplicaPush(AppMessage):
    """The manager's Replication Module pushes its state to one of its K nearest ring neighbours."""

    TYPE = "faultd.replica"
    sender: Peer
    state: PoolState

    def claims(self) -> Claims:
        """The sender speaks for itself."""
        return Claims(node=self.sender)


@app_message
class ReplicaAck(AppMessage):
    """A replica holder confirms the version it holds, so the manager stops re-sending it every alive."""

    TYPE = "faultd.replica_ack"
    sender: Peer
    version: int = Field(ge=0, lt=COUNTER_LIMIT)

    def claims(self) -> Claims:
        """The sender speaks for itself."""
        return Claims(node=self.sender)


@app_message
class Handover(AppMessage):
    """The replacement's answer to `PreemptReplacement`: the current state, and its role given up."""

    TYPE = "faultd.handover"
    sender: Peer
    epoch: int = Field(ge=1, lt=COUNTER_LIMIT)
    state: PoolState | None

    def claims(self) -> Claims:
        """The sender speaks for itself."""
        return Claims(node=self.sender)


def token(epoch: int, node_id: int) -> tuple[int, int]:
    """The fencing order between managers: higher epoch wins, ties go to the higher id."""
    return (epoch, node_id)

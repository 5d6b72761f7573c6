"""What pools tell each other over the overlay."""

from __future__ import annotations

from pydantic import Field

from common.overlay.messages import AppMessage, Claims, Peer, app_message

POOL_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
HOST_PORT = r"^[A-Za-z0-9._-]+:[0-9]{1,5}$"


@app_message
class Announcement(AppMessage):
    """A pool with free slots offers them (seed §3.2.1-3.2.2). Sent to every node of a routing-table
    row; receivers forward it along their own row of the same index while `ttl` stays above zero.
    Absurd values fail validation here, so the datagram is dropped and counted by the codec."""

    TYPE = "poold.announce"
    pool: str = Field(pattern=POOL_NAME)
    collector: str = Field(pattern=HOST_PORT, description="what a flocking schedd puts in FLOCK_TO")
    origin: Peer
    seq: int = Field(ge=0)
    free_slots: int = Field(ge=0, le=10_000_000)
    total_slots: int = Field(ge=0, le=10_000_000)
    queue_length: int = Field(ge=0, le=100_000_000)
    utilization: float = Field(ge=0.0, le=1.0)
    valid_for: float = Field(gt=0.0, le=86_400.0, description="seconds the offer stands, from receipt")
    ttl: int = Field(ge=0, le=32)
    row: int = Field(ge=0, le=127)

    FORWARD_MUTABLE = frozenset({"ttl"})

    def claims(self) -> Claims:
        """The origin speaks for its pool and its collector's host."""
        return Claims(node=self.origin, pool=self.pool, hosts=(self.collector.rpartition(":")[0],))


@app_message
class FlockIntent(AppMessage):
    """A pool about to flock to us names its schedd hosts so that we authorize them first."""

    TYPE = "poold.flock_intent"
    pool: str = Field(pattern=POOL_NAME)
    origin: Peer
    schedd_hosts: list[str] = Field(max_length=1000)

    def claims(self) -> Claims:
        """The origin speaks for its pool."""
        return Claims(node=self.origin, pool=self.pool)


@app_message
class FlockReply(AppMessage):
    """The answer to a FlockIntent: whether that pool let our schedds in, and why."""

    TYPE = "poold.flock_reply"
    pool: str = Field(pattern=POOL_NAME)
    accepted: bool
    reason: str = Field(max_length=200)

    def claims(self) -> Claims:
        """The answer speaks for the pool that gives it."""
        return Claims(pool=self.pool)

"""What pools tell each other over the overlay."""

from __future__ import annotations

from pydantic import Field

from common.overlay.messages import AppMessage, Claims, Peer, app_message

POOL_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
HOST_PORT = r"^[A-Za-z0-9._-]+:[0-9]{1,5}$"
TRUST_DOMAIN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$"
REQUEST_ID = r"^[0-9]{1,20}$"
EPOCH_LIMIT = 1 << 61  # faultD's MAX_EPOCH: beyond any number of takeovers
SEQ_LIMIT = 1 << 62


@app_message
class Announcement(AppMessage):
    """A pool with free slots offers them (seed §3.2.1-3.2.2). Sent to every node of a routing-table
    row; receivers forward it along their own row of the same index while `ttl` stays above zero.
    Absurd values fail validation here, so the datagram is dropped and counted by the codec."""

    TYPE = "poold.announce"
    pool: str = Field(pattern=POOL_NAME)
    collector: str = Field(pattern=HOST_PORT, description="what a flocking schedd puts in FLOCK_TO")
    origin: Peer
    seq: int = Field(ge=0, lt=SEQ_LIMIT)
    free_slots: int = Field(ge=0, le=10_000_000)
    total_slots: int = Field(ge=0, le=10_000_000)
    queue_length: int = Field(ge=0, le=100_000_000)
    utilization: float = Field(ge=0.0, le=1.0)
    valid_for: float = Field(gt=0.0, le=86_400.0, description="seconds the offer stands, from receipt")
    ttl: int = Field(ge=0, le=32)
    row: int = Field(ge=0, le=127)
    # Issue 16: faultD's epoch of the pool's manager role (0 without faultD); (epoch, seq) orders
    # what a pool says of its collector, so that an older offer cannot move it back.
    epoch: int = Field(0, ge=0, lt=EPOCH_LIMIT)

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
    # Cross-pool trust (issue 15): our TRUST_DOMAIN and collector, so that the pool we flock to
    # can ask our collector for its negotiator's token; None where tokens are not negotiated.
    trust_domain: str | None = Field(None, pattern=TRUST_DOMAIN)
    collector: str | None = Field(None, pattern=HOST_PORT)

    def claims(self) -> Claims:
        """The origin speaks for its pool and, when it names one, its collector's host (we ask
        that collector for a token: no pool may send us to another pool's)."""
        hosts = (self.collector.rpartition(":")[0],) if self.collector is not None else ()
        return Claims(node=self.origin, pool=self.pool, hosts=hosts)


@app_message
class FlockReply(AppMessage):
    """The answer to a FlockIntent: whether that pool let our schedds in, and why."""

    TYPE = "poold.flock_reply"
    pool: str = Field(pattern=POOL_NAME)
    accepted: bool
    reason: str = Field(max_length=200)
    # Cross-pool trust (issue 15): our TRUST_DOMAIN, the domain of the identity the asking pool's
    # schedds request a token for at our collector; None where tokens are not negotiated.
    trust_domain: str | None = Field(None, pattern=TRUST_DOMAIN)

    def claims(self) -> Claims:
        """The answer speaks for the pool that gives it."""
        return Claims(pool=self.pool)


@app_message
class TokenRequestNotice(AppMessage):
    """A token request our tool queued at the other pool's collector (condor_token_request): its
    id and exactly what it asks for. HTCondor's manual allows an approval only of a request id
    that reached the approver out of band; this signed message is that channel (issue 15)."""

    TYPE = "poold.token_request"
    pool: str = Field(pattern=POOL_NAME)
    origin: Peer
    role: str = Field(pattern=r"^(schedd|negotiator)$")
    request_id: str = Field(pattern=REQUEST_ID)
    identity: str = Field(max_length=300)
    authz: list[str] = Field(max_length=8)
    lifetime: int = Field(ge=1, le=7 * 86_400)

    def claims(self) -> Claims:
        """The origin speaks for its pool."""
        return Claims(node=self.origin, pool=self.pool)


@app_message
class TokenVerdict(AppMessage):
    """The answer to a TokenRequestNotice: whether that request was approved, and why."""

    TYPE = "poold.token_verdict"
    pool: str = Field(pattern=POOL_NAME)
    role: str = Field(pattern=r"^(schedd|negotiator)$")
    request_id: str = Field(pattern=REQUEST_ID)
    approved: bool
    reason: str = Field(max_length=200)

    def claims(self) -> Claims:
        """The answer speaks for the pool that gives it."""
        return Claims(pool=self.pool)


@app_message
class CollectorMoved(AppMessage):
    """Our pool's manager role moved (faultD took it over, or the original took it back): the
    pool's collector is now `collector` (issue 16, Deliver 3). Sent by the poold that now acts
    for the pool to the pools it knows flock to it and along its routing table, a few times;
    a pool whose FLOCK_TO names our old collector points it here at once. `(epoch, seq)` orders
    it after what the pool said before; its claims make the signer's certificate vouch for the
    pool and the collector's host, so no other pool's node can move our collector."""

    TYPE = "poold.collector_moved"
    pool: str = Field(pattern=POOL_NAME)
    collector: str = Field(pattern=HOST_PORT)
    origin: Peer
    epoch: int = Field(ge=0, lt=EPOCH_LIMIT)
    seq: int = Field(ge=0, lt=SEQ_LIMIT)

    def claims(self) -> Claims:
        """The origin speaks for its pool and its collector's host."""
        return Claims(node=self.origin, pool=self.pool, hosts=(self.collector.rpartition(":")[0],))

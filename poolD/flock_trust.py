"""Cross-pool trust for flocking in HTCondor's own terms (issue 15, Deliver 3; not wired into
poolD's core yet): which tokens a flocking pair needs, and whether a token request queued at this
pool's collector is exactly the one a peer announced over the signed overlay, the out-of-band
channel HTCondor's manual asks for before an approval.

When pool A flocks to B, A's schedds must authenticate at B's collector (they advertise their
submitters there) and B's negotiator at A's schedds. Each asks the other pool's collector for a
token (condor_token_request), and the other side approves it only after this check. The tokens
authenticate; what they may do stays bounded by their authorizations and by the host lists
poolD already manages (FLOCK_FROM at B, FLOCK_NEGOTIATOR_HOSTS at A), which decide only for
clients that authenticated first. The schedd then claims B's startds with the claim id B's
negotiator handed it, so it needs nothing at the startds.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from poolD.messages import POOL_NAME

# What A's schedds need at B's collector, and B's negotiator at A's schedds.
SCHEDD_AT_RECEIVER = ("READ", "ADVERTISE_SCHEDD")
NEGOTIATOR_AT_SENDER = ("READ", "NEGOTIATOR")
ROLES = {"schedd": SCHEDD_AT_RECEIVER, "negotiator": NEGOTIATOR_AT_SENDER}
_REQUEST_ID = re.compile(r"^[0-9]{1,20}$")


def flock_identity(role: str, peer_pool: str, trust_domain: str) -> str:
    """The identity a peer pool's daemon gets here: `<role>-<peer pool>@<our trust domain>`,
    one per peer and role, so that one can be revoked (SEC_TOKEN_REVOCATION_EXPR, ALLOW lists)
    without touching any other."""
    if role not in ROLES:
        raise ValueError(f"flock role {role!r}: not one of {', '.join(ROLES)}")
    if not re.fullmatch(POOL_NAME, peer_pool):
        raise ValueError(f"pool name {peer_pool!r} is not a valid pool name")
    return f"{role}-{peer_pool}@{trust_domain}"


@dataclass(frozen=True)
class AnnouncedRequest:
    """A token request a peer pool announced over the overlay: the id its tool got from our
    collector and the role it asks for; the identity and the authorizations follow from those."""

    peer_pool: str
    role: str
    request_id: str


def check_queued_request(
    queued: Mapping[str, Any], announced: AnnouncedRequest, trust_domain: str
) -> str | None:
    """None if the request queued at our collector (one entry of condor_token_request_list -json:
    RequestId, RequestedIdentity, LimitAuthorization) is exactly what `announced` may obtain;
    else why it must not be approved."""
    if not _REQUEST_ID.fullmatch(announced.request_id):
        return f"request id {announced.request_id!r} is not a number"
    if str(queued.get("RequestId", "")) != announced.request_id:
        return f"queued request is {queued.get('RequestId')!r}, not the announced {announced.request_id}"
    try:
        identity = flock_identity(announced.role, announced.peer_pool, trust_domain)
    except ValueError as e:
        return str(e)
    requested = str(queued.get("RequestedIdentity", ""))
    if requested != identity:
        return f"request {announced.request_id} asks for identity {requested!r}, not {identity!r}"
    limits = {a.strip().upper() for a in str(queued.get("LimitAuthorization", "")).split(",") if a.strip()}
    if not limits:
        return f"request {announced.request_id} is not bounded to any authorization"
    allowed = set(ROLES[announced.role])
    if not limits <= allowed:
        extra = ", ".join(sorted(limits - allowed))
        return f"request {announced.request_id} asks for {extra}, beyond {', '.join(ROLES[announced.role])}"
    return None

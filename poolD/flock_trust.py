"""Cross-pool trust for flocking in HTCondor's own terms (issue 15, Deliver 3): which tokens a
flocking pair needs, the pure machine that asks for them, approves them and takes them back
(`TrustBroker`, part of poolD's core), and whether a token request queued at this pool's
collector is exactly the one a peer announced over the signed overlay, the out-of-band channel
HTCondor's manual asks for before an approval.

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
from collections import Counter, OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from common.events import Note, note, printable
from common.overlay.messages import Peer
from common.wire import Message
from poolD.messages import POOL_NAME, TokenRequestNotice, TokenVerdict

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


def check_lifetime(queued: Mapping[str, Any], announced_lifetime: int) -> str | None:
    """None if the queued request's TokenLifetime is bounded and within what was announced."""
    try:
        lifetime = int(queued.get("TokenLifetime", -1))
    except (TypeError, ValueError):
        return f"request {queued.get('RequestId')!r} has no readable TokenLifetime"
    if lifetime <= 0:
        return f"request {queued.get('RequestId')!r} asks for a token that never expires"
    if lifetime > announced_lifetime:
        return f"request {queued.get('RequestId')!r} asks for {lifetime} s, more than {announced_lifetime} s"
    return None


# ----------------------------------------------------------------------------- the machine

MAX_APPROVALS = 16  # approvals on their way to our collector, all peers together
SEEN_PER_PEER = 64  # request ids remembered per peer (a replay of one of them is ignored)
MAX_PEERS = 512  # peers remembered at all (their seen ids, tokens, issued grants, back-offs)


@dataclass(frozen=True)
class RequestToken:
    """Ask `collector` (the peer pool's) for a token of `identity` bounded to `authz` and
    `lifetime` (condor_token_request); report the request id with `TrustBroker.on_requested`."""

    peer: str
    role: str
    collector: str
    identity: str
    authz: tuple[str, ...]
    lifetime: int


@dataclass(frozen=True)
class ApproveToken:
    """Approve request `request_id` at our collector if, and only if, the request queued there is
    exactly this (check_queued_request, check_lifetime); report with `TrustBroker.on_approved`."""

    peer: str
    role: str
    request_id: str
    lifetime: int


@dataclass(frozen=True)
class InstallToken:
    """The peer approved our request: put the token its tool receives where the daemons of
    `role` read theirs (the schedd hosts' or the negotiator host's token directory); report with
    `TrustBroker.on_installed`."""

    peer: str
    role: str
    request_id: str


@dataclass(frozen=True)
class RemoveToken:
    """Take the token we hold from `peer` for `role` out of the daemons' token directories."""

    peer: str
    role: str
    reason: str


@dataclass(frozen=True)
class SendMessage:
    """Send this message to a peer's poold (the core turns it into its own Send action)."""

    addr: str
    message: Message


TrustAction = RequestToken | ApproveToken | InstallToken | RemoveToken | SendMessage


@dataclass(frozen=True)
class Asked:
    """A token request of ours: its id once the peer's collector queued it, the peer's overlay
    address, and when we give up waiting for the approval."""

    request_id: str | None
    addr: str
    deadline: float


@dataclass
class TrustOutput:
    """What each input of the broker returns: actions for the driver, decisions worth a log line."""

    actions: list[TrustAction] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)


@dataclass(frozen=True)
class TrustSettings:
    """What the broker needs: our pool and TRUST_DOMAIN, and the lifetime of the tokens we ask
    for and grant (asked for again once half of it is gone)."""

    pool: str
    trust_domain: str
    lifetime: int = 1200
    request_timeout: float = 120.0  # a request not approved by then is given up
    # After a request to a peer failed or was refused, the next waits retry_after, doubled at
    # each failure in a row up to retry_max: a peer refusing every request cannot make us start
    # a condor_token_request per FlockIntent it sends. retry_max stays below the renewal cadence
    # (flocking's reauthorize_after, 600 s), so that an outage of the peer's collector delays
    # our token by at most one renewal once it is back.
    retry_after: float = 30.0
    retry_max: float = 300.0


@dataclass(frozen=True)
class Backoff:
    """Failed or refused token requests of one peer and role in a row, and until when none is made."""

    failures: int
    until: float


class TrustBroker:
    """Tokens between flocking pools, as a pure machine fed with `now`: asks the peer pools'
    collectors for the tokens our daemons need there; approves at our collector only a request
    a peer announced over the signed overlay, for the identity, authorizations and lifetime its
    role allows, and only while the caller (the core, from the policy and its grants) says the
    peer may have that role; installs what a peer approved; takes tokens back when flocking ends.

    Roles: `schedd`, our schedds at a pool we flock to (the peer's key signs it); `negotiator`,
    our negotiator at the schedds of a pool that flocks to us (that pool's key signs it).
    """

    def __init__(self, settings: TrustSettings, me: Peer) -> None:
        self.settings = settings
        self.me = me  # our overlay node: the origin of our notices
        self.held: dict[tuple[str, str], float] = {}  # (peer, role) -> expiry of the token we hold
        self.asked: dict[tuple[str, str], Asked] = {}  # (peer, role) -> our request under way
        # (peer, role) -> until when an approved token is being installed: not asked for again
        # meanwhile (the driver feeds on_installed; the deadline only guards a lost outcome)
        self.installing: dict[tuple[str, str], float] = {}
        self.issued: dict[tuple[str, str], float] = {}  # (peer, role) -> expiry of what we approved
        self.counters: Counter[str] = Counter()
        self._approving: dict[tuple[str, str], tuple[str, str]] = {}  # -> (request id, reply address)
        self._seen: OrderedDict[str, OrderedDict[str, None]] = OrderedDict()  # peer -> request ids
        # (peer, role) -> no request until; at most MAX_PEERS, the oldest forgotten first
        self.backoff: OrderedDict[tuple[str, str], Backoff] = OrderedDict()

    # ------------------------------------------------------------------ asking

    def want(
        self, peer: str, role: str, collector: str, addr: str, peer_domain: str, now: float
    ) -> TrustOutput:
        """Our `role` daemons need a token of `peer` (its collector, overlay address and
        TRUST_DOMAIN): ask for one unless we hold one with more than half its lifetime left, a
        request is under way or an approved token is being installed."""
        out = TrustOutput()
        key = (peer, role)
        if self.held.get(key, 0.0) - now > self.settings.lifetime / 2:
            return out
        if self.installing.get(key, 0.0) > now:
            return out
        asked = self.asked.get(key)
        if asked is not None and asked.deadline > now:
            return out
        backoff = self.backoff.get(key)
        if backoff is not None and backoff.until > now:
            self.counters["token_requests_backed_off"] += 1
            return out
        if key not in self.asked and len(self.asked) >= MAX_PEERS:
            self.counters["token_requests_not_made_full"] += 1
            return out
        try:
            identity = flock_identity(role, self.settings.pool, peer_domain)
        except ValueError as e:
            out.notes.append(note("token_not_requested", f"no token asked of {peer}: {e}", pool=peer))
            return out
        self.asked[key] = Asked(None, addr, now + self.settings.request_timeout)
        out.actions.append(RequestToken(peer, role, collector, identity, ROLES[role], self.settings.lifetime))
        return out

    def on_requested(
        self, action: RequestToken, request_id: str | None, error: str | None, now: float
    ) -> TrustOutput:
        """Our request is queued at the peer's collector (its id), or could not be made: tell the
        peer the id and what we asked for, over the signed overlay."""
        out = TrustOutput()
        key = (action.peer, action.role)
        asked = self.asked.get(key)
        if asked is None or asked.request_id is not None:
            return out  # withdrawn meanwhile, or an outcome fed twice
        if request_id is None or not _REQUEST_ID.fullmatch(request_id):
            del self.asked[key]
            self.counters["token_requests_failed"] += 1
            self._back_off(key, now)
            error = printable(str(error))  # the tool's last words may quote the peer's collector
            text = f"token request to {action.peer} ({action.role}) failed: {error}"
            out.notes.append(
                note("token_request_failed", text, pool=action.peer, role=action.role, error=error)
            )
            return out
        self.asked[key] = Asked(request_id, asked.addr, asked.deadline)
        notice = TokenRequestNotice(
            pool=self.settings.pool,
            origin=self.me,
            role=action.role,
            request_id=request_id,
            identity=action.identity,
            authz=list(action.authz),
            lifetime=action.lifetime,
        )
        out.actions.append(SendMessage(asked.addr, notice))
        return out

    def on_verdict(self, verdict: TokenVerdict, now: float) -> TrustOutput:
        """The peer approved (install what its collector hands our tool) or refused our request."""
        out = TrustOutput()
        key = (verdict.pool, verdict.role)
        asked = self.asked.get(key)
        if asked is None or asked.request_id != verdict.request_id:
            self.counters["token_verdicts_unexpected"] += 1
            return out
        del self.asked[key]
        if verdict.approved:
            self.installing[key] = now + self.settings.request_timeout
            out.actions.append(InstallToken(verdict.pool, verdict.role, verdict.request_id))
        else:
            self.counters["token_requests_refused"] += 1
            self._back_off(key, now)
            reason = printable(verdict.reason)  # the peer's words, bound for logs and status
            text = f"{verdict.pool} refused our {verdict.role} token: {reason}"
            out.notes.append(note("token_refused", text, pool=verdict.pool, role=verdict.role, reason=reason))
        return out

    def on_installed(self, action: InstallToken, error: str | None, now: float) -> TrustOutput:
        """The token is where our daemons read it (it is good for the lifetime we asked), or not."""
        out = TrustOutput()
        key = (action.peer, action.role)
        self.installing.pop(key, None)
        if error is None:
            self.held[key] = now + self.settings.lifetime
            self.backoff.pop(key, None)
            text = f"{action.role} token of {action.peer} installed"
            out.notes.append(note("token_installed", text, pool=action.peer, role=action.role))
        else:
            self.counters["token_installs_failed"] += 1
            self._back_off(key, now)
            text = f"{action.role} token of {action.peer} not installed: {error}"
            out.notes.append(
                note("token_install_failed", text, pool=action.peer, role=action.role, error=error)
            )
        return out

    def _back_off(self, key: tuple[str, str], now: float) -> None:
        """A request of `key` failed, was refused or never answered: none is made for a while,
        longer at each failure in a row (TrustSettings.retry_after, retry_max)."""
        s = self.settings
        failures = self.backoff.pop(key, Backoff(0, now)).failures + 1
        wait = min(s.retry_after * 2 ** min(failures - 1, 30), s.retry_max)
        self.backoff[key] = Backoff(failures, now + wait)
        if len(self.backoff) > MAX_PEERS:
            self.backoff.popitem(last=False)

    def forget(self, peer: str, role: str) -> None:
        """Ask for this token anew at the next `want` (the peer's collector moved, to a collector
        that may grant what the old one refused): what we hold, ask, install or wait for is
        forgotten, and the token file stays where our daemons read it until the new one
        replaces it."""
        key = (peer, role)
        self.backoff.pop(key, None)
        self.held.pop(key, None)
        self.asked.pop(key, None)
        self.installing.pop(key, None)

    def drop(self, peer: str, role: str, reason: str) -> TrustOutput:
        """We no longer need (or may no longer hold) this token: remove it, forget the request."""
        out = TrustOutput()
        key = (peer, role)
        self.asked.pop(key, None)
        self.installing.pop(key, None)
        if self.held.pop(key, None) is not None:
            out.actions.append(RemoveToken(peer, role, reason))
            text = f"{role} token of {peer} removed: {reason}"
            out.notes.append(note("token_removed", text, pool=peer, role=role, reason=reason))
        return out

    # ------------------------------------------------------------------ granting

    def on_notice(self, notice: TokenRequestNotice, may: bool, why: str, now: float) -> TrustOutput:
        """A peer announced a token request queued at our collector. `may`: whether the policy
        and the core's grants let this peer have this role now (`why` says which rule or why
        not). Approve only what the role allows, once per request id, one at a time per peer
        and role; refuse the rest with the reason. Nothing here touches HTCondor but the
        approval itself (ApproveToken), so no lie of a peer changes our configuration."""
        out = TrustOutput()
        peer, role, rid = notice.pool, notice.role, notice.request_id
        seen = self._seen.get(peer)
        if seen is not None and rid in seen:
            self.counters["token_requests_replayed"] += 1
            return out  # a replay: answered (or being answered) once already
        if seen is None:
            if len(self._seen) >= MAX_PEERS:
                self._seen.popitem(last=False)
            seen = self._seen[peer] = OrderedDict()
        seen[rid] = None
        if len(seen) > SEEN_PER_PEER:
            seen.popitem(last=False)
        addr = notice.origin.addr
        problem = self._refusal(notice, may, why)
        if problem is None and (peer, role) in self._approving:
            self.counters["token_requests_busy"] += 1
            problem = "busy: a request of this pool and role is being approved"
        if problem is None and len(self._approving) >= MAX_APPROVALS:
            self.counters["token_requests_busy"] += 1
            problem = "busy: too many approvals in progress"
        if problem is not None:
            self.counters["token_requests_refused_here"] += 1
            self._verdict(addr, role, rid, False, problem, out)
            return out
        self._approving[(peer, role)] = (rid, addr)
        out.actions.append(ApproveToken(peer, role, rid, min(notice.lifetime, self.settings.lifetime)))
        return out

    def _refusal(self, notice: TokenRequestNotice, may: bool, why: str) -> str | None:
        if notice.role not in ROLES:
            return f"role {notice.role!r} is not one of {', '.join(ROLES)}"
        if not may:
            return f"not granted: {why}"
        try:
            identity = flock_identity(notice.role, notice.pool, self.settings.trust_domain)
        except ValueError as e:
            return str(e)
        if notice.identity != identity:
            return f"identity {notice.identity[:80]!r} is not {identity!r}"
        asked = {a.strip().upper() for a in notice.authz}
        allowed = set(ROLES[notice.role])
        if not asked:
            return "a token bounded to no authorization is refused"
        if not asked <= allowed:
            return (
                f"asks for {', '.join(sorted(asked - allowed))[:80]}, beyond {', '.join(ROLES[notice.role])}"
            )
        if notice.lifetime > self.settings.lifetime:
            return f"asks for {notice.lifetime} s, at most {self.settings.lifetime} s"
        return None

    def on_approved(self, action: ApproveToken, error: str | None, now: float) -> TrustOutput:
        """Our collector approved the request (the token is the peer's now), or we would not
        (the queued request was not what was announced) or could not: tell the peer."""
        out = TrustOutput()
        key = (action.peer, action.role)
        pending = self._approving.get(key)
        if pending is None or pending[0] != action.request_id:
            return out
        del self._approving[key]
        rid, addr = pending
        if error is None:
            self.issued[key] = now + action.lifetime
            self._verdict(addr, action.role, rid, True, "approved", out)
            text = f"{action.role} token for {action.peer} approved (request {rid})"
            out.notes.append(note("token_approved", text, pool=action.peer, role=action.role, request=rid))
        else:
            self.counters["token_approvals_refused"] += 1
            self._verdict(addr, action.role, rid, False, error, out)
        return out

    def revoke(self, peer: str, role: str, reason: str) -> TrustOutput:
        """What we approved for `peer` is no longer granted: no new approval is pending for it,
        and its bookkeeping goes (the token expires; the core removes the identity from the
        ALLOW entries poold controls)."""
        out = TrustOutput()
        key = (peer, role)
        self._approving.pop(key, None)
        if self.issued.pop(key, None) is not None:
            text = f"{role} token of {peer} revoked: {reason}"
            out.notes.append(note("token_revoked", text, pool=peer, role=role, reason=reason))
        return out

    def expire(self, now: float) -> TrustOutput:
        """Forget what expired: tokens we hold (removed), requests never approved, grants."""
        out = TrustOutput()
        for key, until in list(self.held.items()):
            if until <= now:
                out.actions += self.drop(*key, "expired").actions
        for key, asked in list(self.asked.items()):
            if asked.deadline <= now:
                del self.asked[key]
                self.counters["token_requests_timed_out"] += 1
                self._back_off(key, now)
        for key, until in list(self.issued.items()):
            if until <= now:
                del self.issued[key]
        for key, until in list(self.installing.items()):
            if until <= now:
                del self.installing[key]  # its outcome never came: `want` may ask again
        for key, backoff in list(self.backoff.items()):
            if backoff.until + self.settings.retry_max <= now:
                del self.backoff[key]  # quiet long enough: the next failure starts afresh
        return out

    def wakeup(self) -> float | None:
        """When `expire` has something to do next."""
        times = (
            list(self.held.values()) + [a.deadline for a in self.asked.values()] + list(self.issued.values())
        )
        return min(times) if times else None

    def _verdict(self, addr: str, role: str, rid: str, approved: bool, reason: str, out: TrustOutput) -> None:
        verdict = TokenVerdict(
            pool=self.settings.pool, role=role, request_id=rid, approved=approved, reason=reason[:200]
        )
        out.actions.append(SendMessage(addr, verdict))
        if not approved:
            text = f"token request {rid} ({role}) refused: {reason}"
            out.notes.append(note("token_request_refused", text, role=role, request=rid, reason=reason[:200]))

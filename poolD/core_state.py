"""Translating a PoolCore's durable state to and from the state file's document (issue 16).

poolD.state is the document itself (its schema, bounds and file); this module is the mapping
between it and a live core: which parts of the core are durable, how monotonic times become
wall-clock seconds and back (`wall_offset` = wall clock - the core's `now`), and how a restored
document is checked as if a peer had said it. Kept apart from poolD.core so the core reads as
the state machine it is; PoolCore.export_state and PoolCore.restore_state delegate here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from common.events import note
from poolD.collector_moves import CollectorClaim
from poolD.core import (
    GRANT_PERIODS,
    Authorization,
    CoreOutput,
    Grant,
    _is_grant,
    _Round,
)
from poolD.discovery import collector_problem
from poolD.flock_trust import Asked
from poolD.state import (
    MAX_HOSTS,
    MAX_POOLS,
    PooldState,
    SavedAuthorization,
    SavedBlacklisting,
    SavedCollector,
    SavedFlockTo,
    SavedGrant,
    SavedOffer,
    SavedPeer,
    SavedRound,
    SavedToken,
    SavedTokenRequest,
)
from poolD.willing import WillingEntry

if TYPE_CHECKING:
    from poolD.core import PoolCore

# Offers made after a restore continue our sequence this far ahead: the state a replacement
# restores may be a few offers behind the last one the old manager sent.
SEQ_RESTART_GAP = 1000


def export_state(core: PoolCore, now: float, wall_offset: float) -> PooldState:
    """`core`'s durable state as a document (poolD.state); times become wall-clock seconds
    (`wall_offset` = wall clock - `now`). Pure: the driver writes it."""

    def wall(t: float) -> float:
        return t + wall_offset

    offers = [
        SavedOffer(
            pool=e.pool,
            collector=e.collector,
            origin=SavedPeer.of(e.origin),
            row=e.row,
            free_slots=e.free_slots,
            total_slots=e.total_slots,
            queue_length=e.queue_length,
            utilization=e.utilization,
            expires_at=wall(e.expires_at),
            tiebreak=e.tiebreak,
        )
        for e in core.willing.entries.values()
        if e.expires_at > now
    ]
    trust = core.trust
    r = core._round
    return PooldState(
        pool=core.settings.pool,
        collector=core.settings.collector,
        saved_at=wall(now),
        epoch=core.epoch,
        seq=core.discovery.seq,
        offers=offers[:MAX_POOLS],
        blacklist=[
            SavedBlacklisting(pool=p, until=wall(u), reason=why[:500])
            for p, (u, why) in core.policy.blacklist.items()
            if u > now
        ][:MAX_POOLS],
        flock_to=list(core.flocking.active),
        flock_to_seen=[  # as read back from HTCondor: bounded to what the document holds
            SavedFlockTo(schedd=s[:300], collectors=[x[:300] for x in c[:100]])
            for s, c in core.flock_to_seen.items()
        ][:MAX_HOSTS],
        flocking_since=None if core.flocking_since is None else wall(core.flocking_since),
        quiet_since=None if core.flocking.quiet_since is None else wall(core.flocking.quiet_since),
        flock_from=sorted(core.flock_from)[:MAX_HOSTS],
        grants=[
            SavedGrant(
                pool=p,
                hosts=sorted(g.hosts),
                host=g.host,
                until=wall(g.until),
                rule=g.rule[:500],
                addr=core.grant_addrs.get(p),
            )
            for p, g in core.grants.items()
        ][:MAX_POOLS],
        authorized=[
            SavedAuthorization(pool=p, accepted=a.accepted, reason=a.reason[:500], at=wall(a.at))
            for p, a in core.authorized.items()
        ][:MAX_POOLS],
        tokens_held=[] if trust is None else _saved_tokens(trust.held, wall),
        tokens_issued=[] if trust is None else _saved_tokens(trust.issued, wall),
        token_requests=[]
        if trust is None
        else [
            SavedTokenRequest(
                pool=p, role=role, request_id=a.request_id, addr=a.addr, deadline=wall(a.deadline)
            )
            for (p, role), a in trust.asked.items()
        ][:MAX_POOLS],
        round=None
        if r is None
        else SavedRound(
            pools=[e.pool for e in r.entries],
            reason=r.reason[:500],
            waiting=sorted(r.waiting),
            deadline=wall(r.deadline),
        ),
        collectors=[
            SavedCollector(
                pool=p,
                collector=c.collector,
                origin=SavedPeer.of(c.origin),
                epoch=c.epoch,
                seq=c.seq,
                trust_domain=c.trust_domain,
            )
            for p, c in core.collector_claims.items()
        ][:MAX_POOLS],
    )


def restore_state(core: PoolCore, state: PooldState, now: float, wall_offset: float, out: CoreOutput) -> bool:
    """Put a document `export_state` made into `core` (see PoolCore.restore_state, which then
    reviews the grants and tells of a move); True when it comes from another collector (the
    manager role moved here). What it holds is checked as if a peer had said it: hosts and
    collectors by HTCondor's grammar, expiries no later than this core would give them now,
    bounds as the core's own. ValueError if the document is another pool's."""
    if state.pool != core.settings.pool:
        raise ValueError(f"pool: the state is pool {state.pool!r}'s, not {core.settings.pool!r}'s")
    fl, disc = core.settings.flocking, core.settings.discovery

    def mono(t: float, at_most: float) -> float:
        return min(t - wall_offset, at_most)

    for o in state.offers:
        if o.pool == core.settings.pool or collector_problem(o.collector) is not None:
            core.counters["state_entries_refused"] += 1
            continue
        core.willing.entries[o.pool] = WillingEntry(
            pool=o.pool,
            collector=o.collector,
            origin=o.origin.peer(),
            row=o.row,
            free_slots=min(o.free_slots, o.total_slots),
            total_slots=o.total_slots,
            queue_length=o.queue_length,
            utilization=o.utilization,
            expires_at=mono(o.expires_at, now + disc.max_valid_for),
            tiebreak=o.tiebreak,
        )
    for b in state.blacklist:
        until = mono(b.until, now + fl.blacklist_for)
        if until > now:
            core.policy.add_to_blacklist(b.pool, until, b.reason)
    core.willing.expire(now)
    for pool in list(core.willing.entries):
        if pool in core.policy.blacklist:
            core.willing.remove(pool)
    core.flocking.active = [c for c in state.flock_to if collector_problem(c) is None][: fl.max_pools]
    core.flock_to_seen = {s.schedd: list(s.collectors) for s in state.flock_to_seen}
    if core.flocking.active and state.flocking_since is not None:
        core.flocking_since = mono(state.flocking_since, now)
    if state.quiet_since is not None:
        core.flocking.quiet_since = mono(state.quiet_since, now)
    _restore_grants(core, state, now, mono)
    moved = state.collector != core.settings.collector
    if moved and core.trust is not None:
        # With cross-pool trust an authorization comes with our schedds' token at that pool's
        # collector, a file on the machine that managed our pool before: here it is asked for
        # again (FlockIntent, whose reply asks for the token), or FLOCK_TO would name the pool
        # with no token at its collector (seen after a handback, issue 16).
        core.counters["authorizations_left_on_the_old_manager"] += len(state.authorized)
    else:
        for a in state.authorized:
            core.authorized[a.pool] = Authorization(a.accepted, a.reason, mono(a.at, now))
    if core.trust is not None:
        life = core.trust.settings.lifetime
        core.trust.issued |= {(t.pool, t.role): mono(t.until, now + life) for t in state.tokens_issued}
        if not moved:
            core.trust.held |= {(t.pool, t.role): mono(t.until, now + life) for t in state.tokens_held}
            timeout = core.trust.settings.request_timeout
            for q in state.token_requests:
                deadline = mono(q.deadline, now + timeout)
                core.trust.asked[(q.pool, q.role)] = Asked(q.request_id, q.addr, deadline)
        elif state.tokens_held or state.token_requests:
            # The tokens we held are files on the machine that managed the pool (its
            # negotiator's and schedd's token directories), and the tool waiting for an
            # approval ran there: here our daemons have none, so each is asked for again
            # when next needed (a pool that flocks to us re-sends its intent on our move).
            core.counters["tokens_left_on_the_old_manager"] += len(state.tokens_held)
            core.counters["token_requests_left_on_the_old_manager"] += len(state.token_requests)
    for c in state.collectors:
        if c.pool != core.settings.pool and collector_problem(c.collector) is None:
            claim = CollectorClaim(c.collector, c.origin.peer(), c.epoch, c.seq, c.trust_domain, heard_at=now)
            core.collector_claims[c.pool] = claim
    r = state.round
    if r is not None:
        entries = [core.willing.entries[p] for p in r.pools if p in core.willing.entries]
        waiting = {p for p in r.waiting if p in core.willing.entries}
        if entries:
            deadline = mono(r.deadline, now + fl.authorize_timeout)
            core._round = _Round(entries, r.reason, waiting, deadline)
    core.discovery.seq = max(core.discovery.seq, state.seq + SEQ_RESTART_GAP)
    if moved:
        core.flock_from = set()  # a new collector: FLOCK_FROM is set there anew
        core._flock_from_wanted = set()
    text = f"resumed from the state saved at {state.saved_at:.0f}" + (
        f" by the manager at {state.collector}" if moved else ""
    )
    offers, grants = len(core.willing.entries), len(core.grants)
    out.notes.append(note("state_restored", text, offers=offers, grants=grants, moved=moved))
    return moved


def _restore_grants(
    core: PoolCore, state: PooldState, now: float, mono: Callable[[float, float], float]
) -> None:
    """The grants of a document, each host checked as an intent's would be (a host, or a
    grant the policy names exactly: `_review_grants` revokes what it no longer grants),
    within the per-pool and total bounds; FLOCK_FROM as applied, only of such hosts."""
    fl = core.settings.flocking
    longest = now + GRANT_PERIODS * fl.reauthorize_after
    total: set[str] = set()
    for g in state.grants:
        hosts = {h for h in g.hosts if _is_grant(h)}
        if len(hosts) != len(g.hosts) or len(hosts) > fl.flock_from_hosts_per_pool:
            core.counters["state_entries_refused"] += 1
            continue
        if len(total | hosts) > fl.flock_from_max_hosts:
            core.counters["state_entries_refused"] += 1
            continue
        total |= hosts
        core.grants[g.pool] = Grant(frozenset(hosts), g.host, mono(g.until, longest), g.rule)
        if g.addr is not None:
            core.grant_addrs[g.pool] = g.addr
    core.flock_from = {h for h in state.flock_from if _is_grant(h)}
    core._flock_from_wanted = set(core.flock_from)


def _saved_tokens(tokens: dict[tuple[str, str], float], wall: Callable[[float], float]) -> list[SavedToken]:
    return [SavedToken(pool=p, role=role, until=wall(u)) for (p, role), u in tokens.items()][:MAX_POOLS]  # type: ignore[arg-type]

"""poolD's decisions as one pure state machine: the Information Gatherer, the willing list, the
Policy Manager and the Flocking Manager of a pool (seed §3.2), wired together.

The core is fed, each with `now`:
- a timer firing (`on_timer`): it asks for a load reading when a round is due, runs the
  Flocking Manager's round on the latest reading, and ends authorization waits that timed out;
- a reading of the pool's load (`on_load`): the Information Gatherer offers free slots;
- a message from another pool (`on_message`): an offer, an authorization request or its answer;
- the outcome of an action it asked for (`on_flock_to_applied`, `on_flock_from_applied`,
  `on_shut_out`, `on_flock_to_read`).

It returns a `CoreOutput`: actions for the driver to carry out (`ReadLoad`, `Send`, `Measure`,
`SetFlockTo`, `SetFlockFrom`, `ShutOutSchedds`, `ReadFlockTo`), decisions worth a log line, and when it next
wants `on_timer`. It never reads a clock, sleeps, sends or calls HTCondor, so `poold run`
(poolD.service) and every `poold simulate` experiment drive this same object.

One load reading per cycle: a reading is asked for when the gatherer's interval or a flocking
round is due, and the round then decides on it. The round runs from `on_timer`, after the
reading's offers went out: a driver that feeds many pools at one instant (the simulators) gives
every pool its reading first and then fires their timers, so each pool decides on the offers of
that instant, as it would if the offers had arrived just before its round.

Rounds that need another pool's consent: before a pool enters FLOCK_TO it must have authorized
our schedds (FlockIntent, answered by FlockReply). A round that finds pools not yet asked (or
asked longer than `reauthorize_after` ago) asks them and waits, up to `authorize_timeout`, then
keeps the pools that agreed, in order. FLOCK_TO changes only when it withdraws or adds a pool.
While FLOCK_TO stays as it is, pools in it are asked again every `reauthorize_after`, so that
their grants (below) do not lapse under running jobs.

Letting other pools in (FLOCK_FROM): a FlockIntent names the asking pool's schedd hosts. Each
must be a host name or an IP address (common.condor.knobs); an intent naming anything else
(a glob, a newline, an `=`) is refused whole and counted. When the policy rule that let the pool
in lists `schedd_hosts`, hosts outside it are dropped (a glob passes only if the rule names it
exactly). The hosts a pool is granted replace its earlier grant, are bounded (per pool and in
all), and last two `reauthorize_after` periods: a grant not renewed by then, or whose pool the
policy now refuses (a reloaded file, the blacklist), is revoked, and FLOCK_FROM shrinks. A pool
has at most one FLOCK_FROM change under way for its intents: what it asks meanwhile is answered
once that is done (after one more change if it named other hosts), so no pool fills the queue.

Shutting a pool out: FLOCK_FROM only decides who may advertise and be let in from now on. A
schedd that already holds a claim on one of our startds keeps starting its jobs there (it reuses
the claim without asking the collector), and its submitter ads stay in our collector until they
expire. So when the *policy* revokes a pool's grant (not when a grant merely lapses unrenewed:
that pool is leaving by itself), once FLOCK_FROM no longer holds its hosts the core asks for
`ShutOutSchedds`: its schedd and submitter ads go from our collector and the claims its schedds
hold on our startds are vacated. The hosts are the revoked grant's, without our own schedds'
hosts and without hosts another pool's grant still holds (the driver checks our own again).

Cross-pool trust (issue 15, with `trust_domain` set; poolD.flock_trust): the pools of a flocking
pair ask each other's collectors for the tokens their daemons need (our schedds at the pool we
flock to, its negotiator at our schedds) and announce each request over the signed overlay
(TokenRequestNotice); the TrustBroker approves only what a peer may have now: a `schedd` token to
a pool holding a grant here, a `negotiator` token to a pool we flock to and that accepted us.
The token only authenticates: what it may do here stays decided by FLOCK_FROM (its schedd
hosts, above; identities cannot pass the knobs gate, which refuses '@' in any value), so
revoking the grant still shuts the pool out at once, and the token expires; the tokens we hold
go when flocking ends or the pool is refused.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from common.condor.address import sinful_host
from common.condor.knobs import check_host, check_host_grant, grant_covers, is_host_glob
from common.condor.types import PoolLoad
from common.events import Note, note, printable
from common.overlay.messages import Peer
from common.overlay.node import OverlayNode
from common.wire import Message
from poolD.collector_moves import CollectorClaim, CollectorMoves
from poolD.config import DiscoverySection, FlockingSection
from poolD.discovery import Discovery, DiscoverySettings, collector_problem, peer_host
from poolD.flock_to_readback import FlockToReadBack, ReadFlockTo
from poolD.flock_trust import (
    ApproveToken,
    InstallToken,
    RemoveToken,
    RequestToken,
    SendMessage,
    TrustBroker,
    TrustOutput,
    TrustSettings,
)
from poolD.flocking import FlockingManager
from poolD.messages import (
    Announcement,
    CollectorMoved,
    FlockIntent,
    FlockReply,
    TokenRequestNotice,
    TokenVerdict,
)
from poolD.policy import Direction, Policy, Subject
from poolD.state import PooldState
from poolD.willing import WillingEntry, WillingList

MAX_PENDING_INTENTS = 64  # authorization requests from other pools waiting for FLOCK_FROM to be set
GRANT_PERIODS = 2  # a grant lasts this many reauthorize_after periods: one lost renewal is survived


# ----------------------------------------------------------------------------- actions


@dataclass(frozen=True)
class ReadLoad:
    """Read the pool's load (slots and the own schedds' jobs) and feed it to `on_load`."""


@dataclass(frozen=True)
class Send:
    """Send a message to another pool's poold (overlay address host:port)."""

    addr: str
    message: Message


@dataclass(frozen=True)
class Measure:
    """Measure the round-trip time to a peer (the willing list orders pools by it)."""

    peer: Peer


@dataclass(frozen=True)
class SetFlockTo:
    """Set FLOCK_TO on every schedd of the pool to these collectors, in order; an empty list
    removes our runtime value, so that each schedd's own configuration returns. Report back with
    `on_flock_to_applied`."""

    collectors: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class SetFlockFrom:
    """Let exactly these schedd hosts of other pools in (FLOCK_FROM on the collector and
    startds; none: remove our runtime value), then report back with `on_flock_from_applied`,
    which answers the pool that asked (`reply_to`; None when grants were revoked)."""

    hosts: tuple[str, ...]
    reply_to: str | None  # overlay address of the asking pool
    pool: str | None  # the asking pool
    rule: str  # the policy rule that let it in, or why grants were revoked
    globs: frozenset[str] = frozenset()  # entries of `hosts` that are globs a policy rule granted


@dataclass(frozen=True)
class ShutOutSchedds:
    """The policy revoked `pool`'s grant and FLOCK_FROM no longer lets its schedds in: take their
    schedd and submitter ads out of our collector and vacate the claims they hold on our startds
    (a claim outlives FLOCK_FROM: the schedd reuses it). `hosts`: the revoked grant's schedd
    hosts (and globs it named), never our own schedds'. Report back with `on_shut_out`."""

    pool: str
    hosts: tuple[str, ...]
    reason: str


Action = (
    ReadLoad
    | Send
    | Measure
    | SetFlockTo
    | SetFlockFrom
    | ShutOutSchedds
    | ReadFlockTo
    | RequestToken
    | ApproveToken
    | InstallToken
    | RemoveToken
)


@dataclass
class CoreOutput:
    """What every input returns: actions for the driver, decisions worth a log line, next wake-up."""

    actions: list[Action] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)  # decisions worth a log line (common.events)
    wakeup: float | None = None


# ----------------------------------------------------------------------------- results fed back


@dataclass(frozen=True)
class FlockToApplied:
    """What setting FLOCK_TO did: `applied` when every schedd took it (read back equal);
    `seen` is FLOCK_TO as read back from each schedd."""

    action: SetFlockTo
    applied: bool
    seen: dict[str, list[str]]


@dataclass(frozen=True)
class FlockFromApplied:
    """What setting FLOCK_FROM did: `error` is None when it was set."""

    action: SetFlockFrom
    error: str | None  # None: set


@dataclass(frozen=True)
class ShutOutDone:
    """What shutting a pool out did: ads taken out of our collector, claims vacated (slot
    names), or `error` (what was done before it is still counted)."""

    action: ShutOutSchedds
    ads_invalidated: int = 0
    claims_vacated: tuple[str, ...] = ()
    error: str | None = None


# ----------------------------------------------------------------------------- the core


@dataclass(frozen=True)
class CoreSettings:
    """What the core needs of poold's configuration."""

    pool: str
    collector: str  # ours, host:port, as other pools reach it
    discovery: DiscoverySection
    flocking: FlockingSection
    trust_domain: str | None = None  # ours; set: tokens between flocking pools are negotiated
    token_lifetime: int = 1200  # seconds, of the tokens we ask for and approve

    def discovery_settings(self) -> DiscoverySettings:
        """The discovery module's settings, from our pool and the `[discovery]` section."""
        d = self.discovery
        return DiscoverySettings(
            pool=self.pool,
            collector=self.collector,
            ttl=d.ttl,
            valid_for=d.valid_for,
            max_valid_for=d.max_valid_for,
        )


@dataclass(frozen=True)
class Authorization:
    """Another pool's answer to our FlockIntent."""

    accepted: bool
    reason: str
    at: float


@dataclass(frozen=True)
class Grant:
    """What FLOCK_FROM lets in for one pool, on whose word, and until when."""

    hosts: frozenset[str]
    host: str  # the pool's central-manager host, as the policy saw it
    until: float
    rule: str


@dataclass
class _Round:
    """A flocking round waiting for other pools to authorize our schedds."""

    entries: list[WillingEntry]  # the willing pools the decision picked, in order
    reason: str
    waiting: set[str]  # pools not yet answered
    deadline: float


class PoolCore:
    """One pool's poolD: offers, willing list, policy, FLOCK_TO and FLOCK_FROM decisions."""

    def __init__(
        self, settings: CoreSettings, overlay: OverlayNode, policy: Policy, rng: random.Random
    ) -> None:
        self.settings = settings
        self.overlay = overlay  # read only: identity, routing-table rows, measured RTTs
        self.willing = WillingList(rng, resolution=settings.discovery.proximity_resolution)
        self.discovery = Discovery(settings.discovery_settings(), overlay, policy, self.willing)
        fl = settings.flocking
        self.flocking = FlockingManager(max_pools=fl.max_pools, withdraw_after=fl.withdraw_after)
        self.load: PoolLoad | None = None
        self.load_error: str | None = None
        # our own schedds' hosts as the last good reading named them (a failed one forgets
        # nothing): a shut-out never names them, and waits until they are known
        self._own_schedd_hosts: set[str] | None = None
        self.flocking_since: float | None = None  # when the current FLOCK_TO was applied
        self.flock_to_seen: dict[str, list[str]] = {}  # schedd -> FLOCK_TO as read back
        self.flock_from: set[str] = set()  # schedd hosts of other pools in FLOCK_FROM (applied)
        self.grants: dict[str, Grant] = {}  # pool -> the schedd hosts we let in for it
        self.authorized: dict[str, Authorization] = {}  # pool -> its answer to our intent
        self.counters: Counter[str] = Counter()
        self._flock_from_wanted: set[str] = set()  # applied or on its way
        self._pending_intents = 0
        # pool -> overlay address of its latest intent, while a FLOCK_FROM change for it is on
        # its way: a pool has at most one, and what it asks meanwhile joins the next (one pool
        # flooding intents cannot fill MAX_PENDING_INTENTS and keep the others out)
        self._intent_writing: dict[str, str] = {}
        self._reading_at = -math.inf  # when the latest reading was fed
        self._reading_asked = False
        self._last_offer = -math.inf
        self._next_reading = -math.inf
        self._next_round = math.inf
        self._round: _Round | None = None
        self._applying: SetFlockTo | None = None
        self._intent_sent: dict[str, float] = {}  # pool -> when we last asked it to renew
        # Issue 16: repointing and the state file.
        self.collector_moves = CollectorMoves(settings.pool, self.counters)
        self.flock_to_readback = FlockToReadBack()  # after an activation (poolD.flock_to_readback)
        self.grant_addrs: dict[str, str] = {}  # pool holding a grant -> its overlay address
        # pools whose grant the policy revoked, shut out once FLOCK_FROM no longer holds their hosts
        self._shut_out_due: dict[str, ShutOutSchedds] = {}
        self.trust: TrustBroker | None = None
        if settings.trust_domain is not None:
            trust = TrustSettings(settings.pool, settings.trust_domain, settings.token_lifetime)
            self.trust = TrustBroker(trust, overlay.me)

    @property
    def epoch(self) -> int:
        """faultD's epoch of our pool's manager role (0 without faultD): orders what we say of
        our collector after what an earlier manager said (issue 16)."""
        return self.discovery.epoch

    @epoch.setter
    def epoch(self, value: int) -> None:
        """Set by the active/standby gate (poolD.manager_role) from faultD's reading."""
        self.discovery.epoch = value

    @property
    def collector_claims(self) -> dict[str, CollectorClaim]:
        """What each pool last said of its collector (poolD.collector_moves)."""
        return self.collector_moves.claims

    @property
    def policy(self) -> Policy:
        """The policy in force (replace_policy swaps it, keeping the blacklist)."""
        return self.discovery.policy

    # ------------------------------------------------------------------ inputs

    def start(self, now: float) -> CoreOutput:
        """The gatherer reads at once; the first flocking round comes one interval later."""
        self._next_round = now + self.settings.flocking.interval
        return self.on_timer(now)

    def on_timer(self, now: float) -> CoreOutput:
        """Ask for a reading when one is due; run a due flocking round on a fresh reading; end an
        authorization wait that timed out."""
        out = CoreOutput()
        self._review_grants(now, out)
        if self.trust is not None:
            self._take(self.trust.expire(now), out)
        self._send_move_notices(now, out)
        if self.flock_to_readback.due(now):
            self._ask_flock_to(out)
        if self._round is not None and now >= self._round.deadline:
            self._finish_round(now, out)
        round_due = self._round is None and now >= self._next_round
        if round_due and self._reading_at >= self._next_round:
            self._flocking_round(now, out)
        elif (round_due or now >= self._next_reading) and not self._reading_asked:
            self._reading_asked = True
            self._next_reading = now + self.settings.discovery.interval
            out.actions.append(ReadLoad())
        out.wakeup = self._wakeup()
        return out

    def on_load(self, load: PoolLoad | None, now: float, error: str | None = None) -> CoreOutput:
        """A reading of the pool (None with `error` when it could not be read). With free slots,
        and at most once per discovery interval, the gatherer offers them along every row."""
        out = CoreOutput()
        self._reading_asked = False
        self._reading_at = now
        self._next_reading = max(self._next_reading, now + self.settings.discovery.interval)
        self.load, self.load_error = load, error
        if load is not None:
            self._own_schedd_hosts = set(self._schedd_hosts(load))
            self._release_shut_outs(out)  # one held back until our own schedds were known
        if (
            load is not None
            and load.free_slots > 0
            and now >= self._last_offer + self.settings.discovery.interval
        ):
            self._last_offer = now
            sends = self.discovery.announce(load, now)
            out.actions += [Send(addr, msg) for addr, msg in sends]
            self.counters["offers_sent"] += len(sends)
        if self._round is None and now >= self._next_round:
            out.wakeup = now  # the round decides on this reading, after its offers went out
        else:
            out.wakeup = self._wakeup()
        return out

    def on_message(self, message: Message, now: float) -> CoreOutput:
        """Another pool's offer, authorization request or answer."""
        out = CoreOutput()
        if isinstance(message, Announcement):
            self._on_announcement(message, now, out)
        elif isinstance(message, FlockIntent):
            self._on_flock_intent(message, now, out)
        elif isinstance(message, FlockReply):
            self._on_flock_reply(message, now, out)
        elif isinstance(message, TokenRequestNotice) and self.trust is not None:
            may, why = self._may_have_token(message.pool, message.role, now)
            self._take(self.trust.on_notice(message, may, why, now), out)
        elif isinstance(message, TokenVerdict) and self.trust is not None:
            self._take(self.trust.on_verdict(message, now), out)
        elif isinstance(message, CollectorMoved):
            self._on_collector_moved(message, now, out)
        out.wakeup = self._wakeup()
        return out

    def on_token_requested(
        self, action: RequestToken, request_id: str | None, error: str | None, now: float
    ) -> CoreOutput:
        """Our token request is queued at the peer's collector (its id), or failed (`error`)."""
        return self._trust_outcome(lambda t: t.on_requested(action, request_id, error, now))

    def on_token_approved(self, action: ApproveToken, error: str | None, now: float) -> CoreOutput:
        """Our collector approved the peer's request (error None), or the driver would not."""
        return self._trust_outcome(lambda t: t.on_approved(action, error, now))

    def on_token_installed(self, action: InstallToken, error: str | None, now: float) -> CoreOutput:
        """The token the peer approved is where our daemons read it (error None), or not."""
        return self._trust_outcome(lambda t: t.on_installed(action, error, now))

    @property
    def applying_flock_to(self) -> SetFlockTo | None:
        """The FLOCK_TO change handed to the driver and not fed back yet, if any."""
        return self._applying

    def on_flock_to_applied(self, result: FlockToApplied, now: float) -> CoreOutput:
        """FLOCK_TO is what every schedd now has, or the driver restored the old values."""
        out = CoreOutput()
        if result.action == self._applying:
            self._applying = None
        self.flock_to_seen.update(result.seen)
        if result.applied:
            self.flocking.active = list(result.action.collectors)
            self.flocking_since = now if result.action.collectors else None
            if self.trust is not None:
                self._drop_tokens_of_pools_left(now, out)
        self._repoint(out)
        out.wakeup = self._wakeup()
        return out

    def read_back_flock_to(self, now: float) -> CoreOutput:
        """This machine just took the pool's manager role: learn FLOCK_TO as the schedds have it
        (poolD.flock_to_readback), since the state resumed may predate the last change."""
        out = CoreOutput()
        self.flock_to_readback.start()
        self._ask_flock_to(out)
        out.wakeup = self._wakeup()
        return out

    def on_flock_to_read(self, seen: dict[str, list[str]] | None, now: float) -> CoreOutput:
        """FLOCK_TO as each schedd has it (None: no schedd reported, or one could not be asked):
        taken as applied when the schedds agree on a value we do not have."""
        value = self.flock_to_readback.on_read(seen, self._flock_to_snapshot(), now)
        if value is None or seen is None:
            return CoreOutput(wakeup=self._wakeup())
        # FLOCK_TO poold sets names host:port only (what the state file holds); an entry the
        # schedds have otherwise (an administrator's, without a port) is not poold's to manage.
        odd = [c for c in value if collector_problem(c) is not None]
        notes = []
        if odd:
            named = ", ".join(repr(c[:80]) for c in odd[:5])
            text = f"FLOCK_TO read back from the schedds names {named}: not host:port, left out"
            notes.append(note("flock_to_read_back_skipped", text, entries=",".join(c[:80] for c in odd[:5])))
            value = tuple(c for c in value if c not in odd)
            if value == tuple(self.flocking.active):
                self.flock_to_seen.update(seen)
                return CoreOutput(notes=notes, wakeup=self._wakeup())
        had, has = ", ".join(self.flocking.active) or "none", ", ".join(value) or "not set"
        text = f"FLOCK_TO read back from the schedds: {has}; the resumed state had {had}"
        applied = FlockToApplied(SetFlockTo(value, "read back from the schedds"), applied=True, seen=seen)
        out = self.on_flock_to_applied(applied, now)
        out.notes[:0] = [*notes, note("flock_to_read_back", text, flock_to=",".join(value))]
        return out

    def _ask_flock_to(self, out: CoreOutput) -> None:
        self.flock_to_readback.asked(self._flock_to_snapshot())
        out.actions.append(ReadFlockTo())

    def _flock_to_snapshot(self) -> tuple[tuple[str, ...], object]:
        return tuple(self.flocking.active), self._applying

    def on_flock_from_applied(self, result: FlockFromApplied, now: float) -> CoreOutput:
        """Answer the pool that asked, now that its schedds are let in (or could not be). A
        change that failed is tried again from `on_timer` (a revocation must not be lost)."""
        out = CoreOutput()
        action = result.action
        self._pending_intents -= 1
        latest = self._intent_writing.pop(action.pool, None) if action.pool is not None else None
        if result.error is None:
            self.flock_from = set(action.hosts)
            self._release_shut_outs(out)
            pool = action.pool
            grant = self.grants.get(pool) if pool is not None else None
            if pool and latest and grant is not None and not grant.hosts <= self.flock_from:
                # the pool asked for other hosts meanwhile: one more change, answered when done
                self._intent_writing[pool] = latest
                self._set_flock_from(self._granted(), latest, pool, grant.rule, out)
            elif action.reply_to is not None and action.pool is not None:
                self._reply(latest or action.reply_to, action.pool, True, action.rule, out)
            else:
                text = f"FLOCK_FROM now {len(action.hosts)} host(s): {action.rule}"
                out.notes.append(note("flock_from_set", text, hosts=len(action.hosts), reason=action.rule))
        else:
            self.counters["flock_from_errors"] += 1
            self._flock_from_wanted = set(self.flock_from)
            if action.reply_to is not None and action.pool is not None:
                grant = self.grants.get(action.pool)
                if grant is not None and not grant.hosts <= self.flock_from:
                    del self.grants[action.pool]
                why = f"could not authorize: {result.error}"
                self._reply(latest or action.reply_to, action.pool, False, why, out)
            else:
                text = f"FLOCK_FROM not changed ({result.error}); trying again"
                out.notes.append(note("flock_from_failed", text, error=result.error))
        out.wakeup = self._wakeup()
        return out

    def on_shut_out(self, result: ShutOutDone, now: float) -> CoreOutput:
        """A revoked pool's schedds were shut out (or not: counted and logged; FLOCK_FROM keeps
        them from coming back, and their claims end with their jobs)."""
        out = CoreOutput()
        pool = result.action.pool
        vacated = len(result.claims_vacated)
        self.counters["claims_vacated"] += vacated
        self.counters["schedd_ads_invalidated"] += result.ads_invalidated
        if result.error is None:
            self.counters["pools_shut_out"] += 1
            text = (
                f"{pool} shut out: {result.ads_invalidated} ad(s) invalidated, {vacated} claim(s) "
                f"vacated ({result.action.reason})"
            )
            out.notes.append(
                note(
                    "shut_out",
                    text,
                    pool=pool,
                    ads=result.ads_invalidated,
                    claims=vacated,
                    reason=result.action.reason,
                )
            )
        else:
            self.counters["shut_out_errors"] += 1
            text = f"{pool} not fully shut out: {result.error}"
            out.notes.append(note("shut_out_failed", text, pool=pool, error=result.error))
        out.wakeup = self._wakeup()
        return out

    def stop(self) -> CoreOutput:
        """poold is stopping: take back our runtime FLOCK_TO, so each schedd's own value returns."""
        action = SetFlockTo((), "poold stopping")
        self._applying = action
        stopping = note("flock_to_withdrawn", "poold stopping: FLOCK_TO withdrawn", reason="poold stopping")
        return CoreOutput(actions=[action], notes=[stopping])

    def replace_policy(self, policy: Policy, now: float | None = None) -> CoreOutput:
        """A reloaded policy file takes effect; the blacklist carries over. With `now`, grants
        of pools the new policy refuses (or no longer grants those hosts) are revoked at once."""
        policy.blacklist = self.policy.blacklist
        self.discovery.policy = policy
        out = CoreOutput(
            notes=[note("policy_reloaded", f"policy reloaded from {policy.source}", file=policy.source)]
        )
        if now is not None:
            self._review_grants(now, out)
            out.wakeup = self._wakeup()
        return out

    # ------------------------------------------------------------------ the Information Gatherer

    def _on_announcement(self, ann: Announcement, now: float, out: CoreOutput) -> None:
        """An offer: checked and decided by discovery first; only one it takes may move the
        pool's collector (an older word, or one moved too often, drops the offer)."""

        def take_claim() -> bool:
            return self._collector_claim(ann.pool, ann.collector, ann.origin, ann.epoch, ann.seq, now, out)

        forwards = self.discovery.on_announcement(ann, now, take_claim)
        out.actions += [Send(addr, msg) for addr, msg in forwards]
        if ann.pool in self.willing.entries and ann.origin.id not in self.overlay.rtt:
            out.actions.append(Measure(ann.origin))

    # ------------------------------------------------------------------ authorizing other pools

    def _on_flock_intent(self, intent: FlockIntent, now: float, out: CoreOutput) -> None:
        """A pool is about to flock to us: let its schedds in (FLOCK_FROM), if the policy agrees
        and its schedd hosts are hosts the policy grants (see the module docstring)."""
        subject = Subject(intent.pool, peer_host(intent.origin))
        decision = self.policy.decide(subject, Direction.ACCEPT, now)
        addr = intent.origin.addr
        if not decision.allowed:
            why = f"{intent.pool} refused: {decision.rule}"
            self._revoke([intent.pool], why, now, out, shut_out=True)
            self._reply(addr, intent.pool, False, decision.rule, out)
            return
        self._want_negotiator_token(intent, now, out)
        if not self.settings.flocking.authorize_incoming:
            self._reply(addr, intent.pool, True, "authorization is configured statically", out)
            return
        hosts, problem = self._grantable(intent.schedd_hosts, decision.schedd_hosts)
        if problem is not None:
            self._reply(addr, intent.pool, False, problem, out)
            return
        fl = self.settings.flocking
        others = {h for p, g in self.grants.items() if p != intent.pool for h in g.hosts}
        if len(others | hosts) > fl.flock_from_max_hosts:
            self.counters["flock_intents_refused_full"] += 1
            why = f"FLOCK_FROM full: at most {fl.flock_from_max_hosts} hosts of other pools"
            self._reply(addr, intent.pool, False, why, out)
            return
        writing = intent.pool in self._intent_writing
        if not writing and self._pending_intents >= MAX_PENDING_INTENTS:
            self.counters["intents_refused_busy"] += 1
            self._reply(addr, intent.pool, False, "busy: too many authorizations in progress", out)
            return
        until = now + GRANT_PERIODS * fl.reauthorize_after
        self._shut_out_due.pop(intent.pool, None)  # let in again before it was shut out
        self.grants[intent.pool] = Grant(frozenset(hosts), subject.host, until, decision.rule)
        self.grant_addrs[intent.pool] = addr  # told first if our collector moves
        for gone in [p for p in self.grant_addrs if p not in self.grants]:
            del self.grant_addrs[gone]
        if writing:
            # its earlier intent is being written: this one is answered once that is done (and,
            # if it names other hosts, after one more change with them)
            self.counters["flock_intents_coalesced"] += 1
            self._intent_writing[intent.pool] = addr
            return
        wanted = self._granted()
        applied = self._pending_intents == 0 or hosts <= self.flock_from
        if wanted == self._flock_from_wanted and applied:
            self._reply(addr, intent.pool, True, decision.rule, out)
            return
        self._intent_writing[intent.pool] = addr
        self._set_flock_from(wanted, addr, intent.pool, decision.rule, out)

    def _grantable(self, named: list[str], grants: tuple[str, ...]) -> tuple[set[str], str | None]:
        """The schedd hosts of an intent that FLOCK_FROM may hold, or why the intent is refused.
        Every entry must be a host (or a glob `grants` names exactly); with `grants`, a host
        outside all of them is dropped and counted."""
        fl = self.settings.flocking
        if len(named) > fl.flock_from_hosts_per_pool:
            self.counters["flock_intents_refused_hosts"] += 1
            return set(), f"{len(named)} schedd hosts, at most {fl.flock_from_hosts_per_pool} per pool"
        hosts: set[str] = set()
        for entry in named:
            if entry in grants:
                hosts.add(entry)  # a glob or block the rule grants, named exactly
                continue
            try:
                check_host(entry)
            except ValueError as e:
                self.counters["flock_intents_refused_hosts"] += 1
                return set(), f"schedd host refused: {e}"
            if not _granted_by(grants, entry):
                self.counters["flock_from_hosts_not_granted"] += 1
                continue
            hosts.add(entry)
        if named and not hosts:
            self.counters["flock_intents_refused_hosts"] += 1
            return set(), "none of its schedd hosts is one the policy grants"
        return hosts, None

    def _granted(self) -> set[str]:
        return {h for g in self.grants.values() for h in g.hosts}

    def _set_flock_from(
        self, wanted: set[str], reply_to: str | None, pool: str | None, rule: str, out: CoreOutput
    ) -> None:
        self._flock_from_wanted = set(wanted)
        self._pending_intents += 1
        globs = frozenset(h for h in wanted if is_host_glob(h))
        out.actions.append(SetFlockFrom(tuple(sorted(wanted)), reply_to, pool, rule, globs))

    def _revoke(
        self, pools: list[str], why: str, now: float, out: CoreOutput, *, shut_out: bool = False
    ) -> None:
        """Take these pools' grants back; FLOCK_FROM shrinks (unless another pool holds the hosts).
        `shut_out` (a policy revocation): their schedds are shut out once FLOCK_FROM lets them
        in no more (ShutOutSchedds)."""
        granted = {p: self.grants.pop(p) for p in pools if p in self.grants}
        revoked = list(granted)
        if self.trust is not None:
            for pool in pools:
                self._take(self.trust.revoke(pool, "schedd", why), out)
                self._take(self.trust.drop(pool, "negotiator", why), out)
        if not revoked:
            return
        self.counters["flock_from_revoked"] += len(revoked)
        text = f"FLOCK_FROM grant revoked for {', '.join(sorted(revoked))}: {why}"
        out.notes.append(note("flock_from_revoked", text, pools=",".join(sorted(revoked)), reason=why))
        if shut_out:
            still = self._granted() | (self._own_schedd_hosts or set())
            for pool, grant in granted.items():
                hosts = tuple(sorted(grant.hosts - still))
                if hosts:
                    self._shut_out_due[pool] = ShutOutSchedds(pool, hosts, why)
        wanted = self._granted()
        if wanted != self._flock_from_wanted and self._pending_intents < MAX_PENDING_INTENTS:
            self._set_flock_from(wanted, None, None, why, out)
        self._release_shut_outs(out)

    def _release_shut_outs(self, out: CoreOutput) -> None:
        """Shut out the revoked pools whose hosts FLOCK_FROM holds no more (applied, and not on
        its way back in): before that their schedds could advertise again at once."""
        own = self._own_schedd_hosts
        if own is None:
            return  # our own schedds unknown yet: a shut-out could name one of them
        present = self.flock_from | self._flock_from_wanted
        for pool, action in list(self._shut_out_due.items()):
            if present.isdisjoint(action.hosts):
                del self._shut_out_due[pool]
                hosts = tuple(h for h in action.hosts if h not in own)
                if hosts:
                    out.actions.append(replace(action, hosts=hosts))

    def _review_grants(self, now: float, out: CoreOutput) -> None:
        """Revoke grants that expired or that the policy no longer gives; redo a FLOCK_FROM change
        that failed."""
        expired = [p for p, g in self.grants.items() if g.until <= now]
        self._revoke(expired, "grant expired (not renewed)", now, out)
        for pool, grant in list(self.grants.items()):
            decision = self.policy.decide(Subject(pool, grant.host), Direction.ACCEPT, now)
            if not decision.allowed or not all(_granted_by(decision.schedd_hosts, h) for h in grant.hosts):
                why = f"the policy no longer grants it ({decision.rule})"
                self._revoke([pool], why, now, out, shut_out=True)
        wanted = self._granted()
        if self._pending_intents == 0 and wanted != self.flock_from:
            self._set_flock_from(wanted, None, None, "FLOCK_FROM brought in line with the grants", out)

    def _reply(self, addr: str, pool: str, accepted: bool, reason: str, out: CoreOutput) -> None:
        verdict = "accepted" if accepted else "refused"
        text = f"flock intent from {pool}: {verdict} ({reason})"
        out.notes.append(note("flock_intent", text, pool=pool, accepted=accepted, reason=reason))
        domain = self.settings.trust_domain
        reply = FlockReply(
            pool=self.settings.pool, accepted=accepted, reason=reason[:200], trust_domain=domain
        )
        out.actions.append(Send(addr, reply))

    def _on_flock_reply(self, reply: FlockReply, now: float, out: CoreOutput) -> None:
        """A pool's answer to our intent. Only an answer to an intent we sent, within
        `reauthorize_after` of it, counts (once): an acceptance nobody asked for would make the
        pool one we flock to, and so get its negotiator a token here."""
        sent = self._intent_sent.get(reply.pool)
        waiting = self._round is not None and reply.pool in self._round.waiting
        if not waiting and (sent is None or now - sent > self.settings.flocking.reauthorize_after):
            self.counters["flock_replies_unsolicited"] += 1
            return
        self._intent_sent.pop(reply.pool, None)
        self.authorized[reply.pool] = Authorization(reply.accepted, printable(reply.reason), now)
        claim = self.collector_claims.get(reply.pool)
        if claim is not None and reply.trust_domain:
            claim.trust_domain = reply.trust_domain  # for a token at its collector if that moves
        entry = self.willing.entries.get(reply.pool)
        if self.trust is not None and reply.accepted and reply.trust_domain and entry is not None:
            # Our schedds will advertise there: ask its collector for their token.
            want = self.trust.want(
                reply.pool, "schedd", entry.collector, entry.origin.addr, reply.trust_domain, now
            )
            self._take(want, out)
        r = self._round
        if r is not None and reply.pool in r.waiting:
            r.waiting.discard(reply.pool)
            if not r.waiting:
                self._finish_round(now, out)

    # ------------------------------------------------------------------ the Flocking Manager

    def _flocking_round(self, now: float, out: CoreOutput) -> None:
        """Decide FLOCK_TO on the latest reading (seed §4.1)."""
        self._next_round = now + self.settings.flocking.interval
        answerable = now - self.settings.flocking.reauthorize_after  # older intents count no more
        self._intent_sent = {p: t for p, t in self._intent_sent.items() if t > answerable}
        load = self.load
        if load is None:
            return  # the reading failed: nothing to decide on
        self._check_delivery(load, now, out)
        needy = load.idle_jobs > load.free_slots
        fl = self.settings.flocking
        entries = self.willing.ordered(now, self.overlay.rtt.get, within=fl.max_rtt) if needy else []
        decision = self.flocking.decide(load, entries, now)
        if decision.flock_to is None:
            self._renew_authorizations(load, now, out)
            return
        chosen = [e for e in entries if e.collector in decision.flock_to]
        stale = now - self.settings.flocking.reauthorize_after
        pending = [e for e in chosen if self.authorized.get(e.pool, _NEVER).at < stale]
        if not pending:
            self._apply(chosen, decision.reason, out)
            return
        hosts = self._schedd_hosts(load)
        for e in pending:
            self._intent_sent[e.pool] = now
            out.actions.append(Send(e.origin.addr, self._intent(hosts)))
        deadline = now + self.settings.flocking.authorize_timeout
        self._round = _Round(chosen, decision.reason, {e.pool for e in pending}, deadline)

    def _renew_authorizations(self, load: PoolLoad, now: float, out: CoreOutput) -> None:
        """FLOCK_TO stays as it is: ask the pools in it again once their authorization is older
        than `reauthorize_after`, so that their grant of our schedds does not lapse."""
        fl = self.settings.flocking
        stale = now - fl.reauthorize_after
        active = set(self.flocking.active)
        for entry in self.willing.entries.values():
            if entry.collector not in active or self.authorized.get(entry.pool, _NEVER).at >= stale:
                continue
            if self._intent_sent.get(entry.pool, -math.inf) > now - fl.authorize_timeout:
                continue  # asked a moment ago; its answer is on its way
            self._intent_sent[entry.pool] = now
            out.actions.append(Send(entry.origin.addr, self._intent(self._schedd_hosts(load))))

    def _intent(self, hosts: list[str]) -> FlockIntent:
        """Our FlockIntent; with cross-pool trust it names our TRUST_DOMAIN and collector."""
        trusted = self.settings.trust_domain is not None
        return FlockIntent(
            pool=self.settings.pool,
            origin=self.overlay.me,
            schedd_hosts=hosts,
            trust_domain=self.settings.trust_domain,
            collector=self.settings.collector if trusted else None,
        )

    def _finish_round(self, now: float, out: CoreOutput) -> None:
        r = self._round
        assert r is not None
        self._round = None
        self._apply(r.entries, r.reason, out)

    def _apply(self, chosen: list[WillingEntry], reason: str, out: CoreOutput) -> None:
        """FLOCK_TO becomes the chosen pools that authorized us, if that withdraws or adds one."""
        target = [e.collector for e in chosen if self.authorized.get(e.pool, _NEVER).accepted]
        if self._applying is not None or not self.flocking.changes(target):
            return
        out.notes.append(note("flock_to", reason, flock_to=",".join(target), pools=len(target)))
        action = SetFlockTo(tuple(target), reason)
        self._applying = action
        out.actions.append(action)

    def _check_delivery(self, load: PoolLoad, now: float, out: CoreOutput) -> None:
        """Offers that do not deliver: our jobs wait, FLOCK_TO has been set for a while, and none
        of them has flocked. The first pool in FLOCK_TO is the one the schedds tried first."""
        if not self.flocking.active or self.flocking_since is None:
            return
        flocked = sum(s.flocked for s in load.schedds)
        fl = self.settings.flocking
        if load.idle_jobs == 0 or flocked > 0 or now - self.flocking_since < fl.deliver_timeout:
            return
        first = self.flocking.active[0]
        culprit = next((p for p, e in self.willing.entries.items() if e.collector == first), None)
        if culprit is None:
            return
        self.policy.add_to_blacklist(
            culprit, now + fl.blacklist_for, "offered slots, flocked jobs stayed idle"
        )
        if self.trust is not None:
            self._take(self.trust.drop(culprit, "schedd", "blacklisted"), out)
            self._take(self.trust.revoke(culprit, "negotiator", "blacklisted"), out)
        self.willing.remove(culprit)
        self.flocking_since = now
        text = f"blacklisted {culprit}: offered slots, our jobs stayed idle"
        out.notes.append(note("blacklisted", text, pool=culprit, for_s=fl.blacklist_for))

    @staticmethod
    def _schedd_hosts(load: PoolLoad) -> list[str]:
        """Our schedds' hosts, by address and machine name, for the other pool's FLOCK_FROM (only
        what passes the host grammar: the other pool refuses an intent naming anything else)."""
        return sorted(
            {h for s in load.schedds for h in (sinful_host(s.address), s.machine) if h and _is_host(h)}
        )

    def _wakeup(self) -> float:
        times = [self._next_reading, self._next_round]
        if self._round is not None:
            times.append(self._round.deadline)
        times += [g.until for g in self.grants.values()]
        if self.trust is not None and (due := self.trust.wakeup()) is not None:
            times.append(due)
        if (notice := self.collector_moves.next_notice()) is not None:
            times.append(notice)
        if (read := self.flock_to_readback.wakeup()) is not None:
            times.append(read)
        return min(times)

    # ------------------------------------------------------------------ cross-pool trust

    def _take(self, trust: TrustOutput, out: CoreOutput) -> None:
        """The broker's actions and notes into ours (its messages become Sends)."""
        for action in trust.actions:
            out.actions.append(
                Send(action.addr, action.message) if isinstance(action, SendMessage) else action
            )
        out.notes += trust.notes

    def _trust_outcome(self, feed: Any) -> CoreOutput:
        out = CoreOutput()
        if self.trust is not None:
            self._take(feed(self.trust), out)
        out.wakeup = self._wakeup()
        return out

    def _may_have_token(self, pool: str, role: str, now: float) -> tuple[bool, str]:
        """Whether `pool` may have a token of `role` from us now, and why (not). `schedd`: it
        holds a grant here (the policy let its schedds in). `negotiator`: we flock to it, or are
        about to (it accepted our intent lately), and the policy still accepts it."""
        if role == "schedd":
            grant = self.grants.get(pool)
            if grant is None or grant.until <= now:
                return False, f"{pool} holds no grant here (no accepted flock intent)"
            return True, grant.rule
        entry = self.willing.entries.get(pool)
        auth = self.authorized.get(pool, _NEVER)
        fresh = auth.accepted and now - auth.at <= GRANT_PERIODS * self.settings.flocking.reauthorize_after
        # Asked just now: its token request may come before its FlockReply (it asks on our intent).
        asking = self._round is not None and pool in self._round.waiting
        asking |= self._intent_sent.get(pool, -math.inf) > now - self.settings.flocking.authorize_timeout
        if entry is None or not (fresh or asking or entry.collector in self.flocking.active):
            return False, f"we do not flock to {pool}"
        decision = self.policy.decide(Subject(pool, peer_host(entry.origin)), Direction.ACCEPT, now)
        return decision.allowed, decision.rule

    def _want_negotiator_token(self, intent: FlockIntent, now: float, out: CoreOutput) -> None:
        """A pool the policy lets flock to us: our negotiator will negotiate at its schedds, so
        ask its collector for the token (it approves only while it flocks to us)."""
        if self.trust is None or intent.trust_domain is None or intent.collector is None:
            return
        want = self.trust.want(
            intent.pool, "negotiator", intent.collector, intent.origin.addr, intent.trust_domain, now
        )
        self._take(want, out)

    def _drop_tokens_of_pools_left(self, now: float, out: CoreOutput) -> None:
        """Flocking to a pool ended: our schedds' token of it goes, and so does its negotiator's
        grant here, and its authorization of our schedds is forgotten: flocking to it again
        starts with a FlockIntent, whose reply asks for the token again (with the authorization
        kept fresh, FLOCK_TO was set again with no token at its collector)."""
        assert self.trust is not None
        active = set(self.flocking.active)
        ours = {p for p, r in [*self.trust.held, *self.trust.asked] if r == "schedd"}
        theirs = {p for p, r in self.trust.issued if r == "negotiator"}
        for pool in sorted(ours | theirs):
            entry = self.willing.entries.get(pool)
            if entry is not None and entry.collector in active:
                continue
            self.authorized.pop(pool, None)
            self._take(self.trust.drop(pool, "schedd", "flocking to it ended"), out)
            self._take(self.trust.revoke(pool, "negotiator", "flocking to it ended"), out)

    # ------------------------------------------------------------------ repointing (issue 16)

    def _collector_claim(
        self, pool: str, collector: str, origin: Peer, epoch: int, seq: int, now: float, out: CoreOutput
    ) -> bool:
        """Take what a pool says of its collector (CollectorMoves.take); a move is followed at
        once: the pool's offer names the new collector, and when FLOCK_TO names (or is about to
        name) the old one, the pool is asked to authorize us again and FLOCK_TO is repointed.
        False: the message is not to be taken."""
        taken = self.collector_moves.take(pool, collector, origin, epoch, seq, now, out.notes)
        old = taken.moved_from
        if old is None:
            return taken.accepted
        entry = self.willing.entries.get(pool)
        if entry is not None:
            entry.collector, entry.origin = collector, origin
        if old in self.flocking.active or (self._applying is not None and old in self._applying.collectors):
            self.collector_moves.follow(old, collector)
            self._reestablish(pool, self.collector_moves.claims[pool], now, out)
        self._repoint(out)
        return True

    def _on_collector_moved(self, msg: CollectorMoved, now: float, out: CoreOutput) -> None:
        """A pool we know says its collector moved (CollectorMoves.admits says which we take)."""
        offered = msg.pool in self.willing.entries
        if self.collector_moves.admits(msg, offered, self.policy, now):
            self._collector_claim(msg.pool, msg.collector, msg.origin, msg.epoch, msg.seq, now, out)

    def _repoint(self, out: CoreOutput) -> None:
        """FLOCK_TO names a collector that moved: set it to the new one now (one change at a time)."""
        repointed = self.collector_moves.repoint(self.flocking.active, self._applying is not None)
        if repointed is None:
            return
        target, reason = repointed
        out.notes.append(note("flock_to", reason, flock_to=",".join(target), pools=len(target)))
        action = SetFlockTo(tuple(target), reason)
        self._applying = action
        out.actions.append(action)

    def _reestablish(self, pool: str, claim: CollectorClaim, now: float, out: CoreOutput) -> None:
        """We flock to `pool`, whose collector moved: ask its new manager's poold to authorize
        our schedds again (its FLOCK_FROM is on the new collector now) and, with cross-pool
        trust, its new collector for our schedds' token. The token we hold stays where our
        schedds read it until the new one replaces it."""
        if self.load is not None:
            self._intent_sent[pool] = now
            out.actions.append(Send(claim.origin.addr, self._intent(self._schedd_hosts(self.load))))
        if self.trust is not None and claim.trust_domain is not None:
            self.trust.forget(pool, "schedd")
            addr, domain = claim.origin.addr, claim.trust_domain
            self._take(self.trust.want(pool, "schedd", claim.collector, addr, domain, now), out)

    def reassert_flock_from(self, now: float) -> CoreOutput:
        """The manager role came to this machine: whatever FLOCK_FROM its collector and startds
        had from an earlier stint here, set it to exactly the grants now (none: removed)."""
        out = CoreOutput()
        if self._pending_intents == 0:
            why = "manager role taken: FLOCK_FROM set to the grants"
            self._set_flock_from(self._granted(), None, None, why, out)
        out.wakeup = self._wakeup()
        return out

    @property
    def announcing_move(self) -> bool:
        """Whether notices of our collector's move are still to be sent."""
        return self.collector_moves.next_notice() is not None

    def announce_move(self, now: float) -> CoreOutput:
        """Our pool's collector is ours now, where it was another (a takeover, or the original
        taking its role back): tell the pools that flock to us and our routing table, now and
        twice more (poolD.collector_moves.MOVE_NOTICE_DELAYS)."""
        self.collector_moves.schedule_notices(now)
        out = CoreOutput()
        self._send_move_notices(now, out)
        out.wakeup = self._wakeup()
        return out

    def _send_move_notices(self, now: float, out: CoreOutput) -> None:
        """Tell the pools we let in and our routing table that our collector moved, when a
        notice is due (CollectorMoves.notice_due)."""
        if not self.collector_moves.notice_due(now):
            return
        self.discovery.seq += 1
        moved = CollectorMoved(
            pool=self.settings.pool,
            collector=self.settings.collector,
            origin=self.overlay.me,
            epoch=self.epoch,
            seq=self.discovery.seq,
        )
        targets = dict.fromkeys(self.grant_addrs[p] for p in self.grants if p in self.grant_addrs)
        targets |= dict.fromkeys(self.discovery.announce_targets(now))
        out.actions += [Send(addr, moved) for addr in targets]
        self.counters["collector_move_notices"] += len(targets)

    # ------------------------------------------------------------------ the state file (issue 16)

    def export_state(self, now: float, wall_offset: float) -> PooldState:
        """Our durable state as a document (poolD.state); times become wall-clock seconds
        (`wall_offset` = wall clock - `now`). Pure (poolD.core_state): the driver
        writes it."""
        from poolD.core_state import export_state  # it builds on this module's types

        return export_state(self, now, wall_offset)

    def restore_state(self, state: PooldState, now: float, wall_offset: float) -> CoreOutput:
        """Resume from a document `export_state` made (here, or on the machine that managed the
        pool before). What it holds is checked as if a peer had said it (poolD.core_state).
        FLOCK_TO is taken as what the schedds still have (not set again); FLOCK_FROM is set
        again when the document comes from another collector (the manager role moved here),
        and then the pools we know are told our collector moved. Expired grants are revoked
        at once. ValueError if the document is another pool's."""
        from poolD.core_state import restore_state  # it builds on this module's types

        out = CoreOutput()
        moved = restore_state(self, state, now, wall_offset, out)
        self._review_grants(now, out)
        if self.trust is not None:
            self._take(self.trust.expire(now), out)
        if moved:
            self.collector_moves.schedule_notices(now)
            self._send_move_notices(now, out)
        out.wakeup = self._wakeup()
        return out

    # ------------------------------------------------------------------ status

    def status(self, now: float) -> dict[str, Any]:
        """What `poold status` shows of the decisions (the driver adds the overlay and load)."""
        rtt = self.overlay.rtt.get
        return {
            "willing_list": [
                {
                    "pool": e.pool,
                    "collector": e.collector,
                    "row": e.row,
                    "free_slots": e.free_slots,
                    "queue_length": e.queue_length,
                    "utilization": e.utilization,
                    "rtt_ms": None if rtt(e.origin.id) is None else round(rtt(e.origin.id) * 1000, 2),
                    "expires_in": round(e.expires_at - now, 1),
                }
                for e in self.willing.ordered(now, rtt)
            ],
            "flock_to": self.flock_to_seen,
            "flock_active": self.flocking.active,
            "flock_from": sorted(self.flock_from),
            "flock_from_grants": {
                p: {"hosts": sorted(g.hosts), "expires_in": round(g.until - now, 1), "rule": g.rule}
                for p, g in self.grants.items()
            },
            "authorized": {
                p: {"accepted": a.accepted, "reason": a.reason, "age": round(now - a.at, 1)}
                for p, a in self.authorized.items()
            },
            "blacklist": {
                p: {"until_in": round(u - now, 1), "reason": r} for p, (u, r) in self.policy.blacklist.items()
            },
            "offers": {"accepted": self.discovery.accepted, "dropped": dict(self.discovery.dropped)},
            "tokens": self._trust_status(now),
        }

    def _trust_status(self, now: float) -> dict[str, Any]:
        t = self.trust
        if t is None:
            return {}
        return {
            "held": {f"{p}/{r}": round(u - now, 1) for (p, r), u in t.held.items()},
            "asked": {f"{p}/{r}": a.request_id for (p, r), a in t.asked.items()},
            "issued": {f"{p}/{r}": round(u - now, 1) for (p, r), u in t.issued.items()},
            "backing_off": {
                f"{p}/{r}": round(b.until - now, 1) for (p, r), b in t.backoff.items() if b.until > now
            },
            "counters": dict(t.counters),
        }


_NEVER = Authorization(False, "", -math.inf)


def _is_host(text: str) -> bool:
    try:
        check_host(text)
    except ValueError:
        return False
    return True


def _is_grant(text: str) -> bool:
    """A host or a grant glob (check_host_grant): what FLOCK_FROM may hold at all."""
    try:
        check_host_grant(text)
    except ValueError:
        return False
    return True


def _granted_by(grants: tuple[str, ...], host: str) -> bool:
    """Whether a rule's `schedd_hosts` let `host` into FLOCK_FROM: any single host when the rule
    names none; else a host under one of them, or a glob/block the rule names exactly."""
    if not grants or host in grants:
        return True
    return not is_host_glob(host) and any(grant_covers(g, host) for g in grants)

"""The cross-pool trust machine (poolD.flock_trust.TrustBroker) and the core around it, fed by
hand with `now`: asking, announcing, approving, installing and taking back the tokens of a
flocking pair (issue 15, Deliver 3), with no network, clock or HTCondor."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from common.overlay.messages import Peer
from poolD.config import DiscoverySection, FlockingSection
from poolD.core import CoreSettings, FlockFromApplied, FlockToApplied, PoolCore, SetFlockFrom, SetFlockTo
from poolD.flock_trust import (
    MAX_PEERS,
    ApproveToken,
    InstallToken,
    RemoveToken,
    RequestToken,
    SendMessage,
    TrustBroker,
    TrustSettings,
)
from poolD.messages import FlockIntent, FlockReply, TokenRequestNotice, TokenVerdict
from poolD.policy import Policy, PolicyFile, Rule
from tests.poolD.test_core import INTERVAL, load, of, round_at, sends, willing
from tests.poolD.test_discovery import node_with_rows

A = Peer(id=7, addr="10.0.0.7:7640")
B = Peer(id=8, addr="10.0.0.8:7640")


def broker(pool: str = "home", me: Peer = A, lifetime: int = 1200) -> TrustBroker:
    return TrustBroker(TrustSettings(pool, f"{pool}.sandbox", lifetime), me)


def notice(pool: str = "physics", rid: str = "0004711", **kw: object) -> TokenRequestNotice:
    fields: dict[str, object] = {
        "pool": pool,
        "origin": B,
        "role": "schedd",
        "request_id": rid,
        "identity": f"schedd-{pool}@home.sandbox",
        "authz": ["READ", "ADVERTISE_SCHEDD"],
        "lifetime": 1200,
    }
    return TokenRequestNotice(**(fields | kw))


def only(actions: list, kind: type) -> list:
    return [a for a in actions if isinstance(a, kind)]


# ----------------------------------------------------------------------------- asking


def test_ask_announce_install_and_renew_at_half_life() -> None:
    t = broker("home")
    (req,) = t.want("physics", "schedd", "cm.physics.org:9618", B.addr, "physics.sandbox", 0.0).actions
    assert req == RequestToken(
        "physics",
        "schedd",
        "cm.physics.org:9618",
        "schedd-home@physics.sandbox",
        ("READ", "ADVERTISE_SCHEDD"),
        1200,
    )
    assert t.want("physics", "schedd", "cm.physics.org:9618", B.addr, "physics.sandbox", 1.0).actions == []
    (sent,) = t.on_requested(req, "0012345", None, 2.0).actions
    assert isinstance(sent, SendMessage) and sent.addr == B.addr
    assert sent.message == TokenRequestNotice(
        pool="home",
        origin=A,
        role="schedd",
        request_id="0012345",
        identity="schedd-home@physics.sandbox",
        authz=["READ", "ADVERTISE_SCHEDD"],
        lifetime=1200,
    )
    verdict = TokenVerdict(
        pool="physics", role="schedd", request_id="0012345", approved=True, reason="approved"
    )
    (install,) = t.on_verdict(verdict, 3.0).actions
    assert install == InstallToken("physics", "schedd", "0012345")
    assert t.on_verdict(verdict, 3.5).actions == []  # a second verdict is unexpected, counted
    assert t.counters["token_verdicts_unexpected"] == 1
    t.on_installed(install, None, 4.0)
    assert t.held == {("physics", "schedd"): 1204.0}
    assert t.want("physics", "schedd", "cm.physics.org:9618", B.addr, "physics.sandbox", 600.0).actions == []
    assert only(t.want("physics", "schedd", "x:1", B.addr, "physics.sandbox", 700.0).actions, RequestToken)


def test_no_second_request_while_the_approved_token_is_being_installed() -> None:
    """A flocking round that comes between the approval and the install's outcome asked again
    (a second request, approved too, replacing the first token): now it waits for the outcome."""
    t = broker()
    want = lambda now: t.want("physics", "schedd", "c:9618", B.addr, "physics.sandbox", now)  # noqa: E731
    (req,) = want(0.0).actions
    t.on_requested(req, "0000001", None, 0.0)
    ok = TokenVerdict(pool="physics", role="schedd", request_id="0000001", approved=True, reason="approved")
    (install,) = t.on_verdict(ok, 1.0).actions
    assert want(2.0).actions == []
    t.on_installed(install, "permission denied", 3.0)
    assert want(4.0).actions == []  # the install failed: asked again after the back-off
    retry = 3.0 + t.settings.retry_after
    assert only(want(retry).actions, RequestToken)
    t.on_requested(req, "0000002", None, retry)
    ok2 = TokenVerdict(pool="physics", role="schedd", request_id="0000002", approved=True, reason="approved")
    t.on_verdict(ok2, retry + 1)
    t.expire(retry + 1 + t.settings.request_timeout)  # the install's outcome was lost: forgotten in time
    assert t.installing == {}
    assert only(want(retry + 2 + t.settings.request_timeout).actions, RequestToken)


def test_a_refused_or_failed_request_is_noted_and_forgotten() -> None:
    t = broker()
    (req,) = t.want("physics", "schedd", "c:9618", B.addr, "physics.sandbox", 0.0).actions
    out = t.on_requested(req, None, "Failed to authenticate using SSL", 1.0)
    assert out.actions == [] and t.asked == {} and out.notes[0].event == "token_request_failed"
    retry = 1.0 + t.settings.retry_after
    (req,) = t.want("physics", "schedd", "c:9618", B.addr, "physics.sandbox", retry).actions
    t.on_requested(req, "0000001", None, retry)
    refused = TokenVerdict(pool="physics", role="schedd", request_id="0000001", approved=False, reason="no")
    assert t.on_verdict(refused, retry + 1).actions == [] and t.asked == {}
    assert t.counters["token_requests_refused"] == 1


def test_requests_to_a_peer_that_refuses_or_fails_back_off_until_one_succeeds() -> None:
    """poolD review, finding 1: every refusal cleared the request, so the peer's next FlockIntent
    started a new condor_token_request at once. Now each failure in a row doubles the wait (up
    to retry_max); a token installed ends it; the back-offs kept are bounded by MAX_PEERS."""
    t = broker()
    s = t.settings
    want = lambda now: only(  # noqa: E731
        t.want("physics", "schedd", "c:9618", B.addr, "physics.sandbox", now).actions, RequestToken
    )
    now, waits = 0.0, []
    for i in range(8):
        (req,) = want(now)
        t.on_requested(req, f"{i:07d}", None, now)
        no = TokenVerdict(pool="physics", role="schedd", request_id=f"{i:07d}", approved=False, reason="no")
        t.on_verdict(no, now)
        assert want(now) == [] and want(now + 0.5) == []
        wait = t.backoff[("physics", "schedd")].until - now
        waits.append(wait)
        now += wait
    assert waits == [30.0, 60.0, 120.0, 240.0, 300.0, 300.0, 300.0, 300.0]  # below the 600 s renewal
    assert t.counters["token_requests_backed_off"] == 16
    (req,) = want(now)
    t.on_requested(req, "0000099", None, now)
    ok = TokenVerdict(pool="physics", role="schedd", request_id="0000099", approved=True, reason="approved")
    (install,) = only(t.on_verdict(ok, now).actions, InstallToken)
    t.on_installed(install, None, now)
    assert t.backoff == {}
    for i in range(2 * MAX_PEERS):
        (req,) = t.want(f"p{i}", "schedd", "c:9618", B.addr, "physics.sandbox", now).actions
        t.on_requested(req, None, "refused", now)
    assert len(t.backoff) == MAX_PEERS
    t.expire(now + s.retry_after + s.retry_max)
    assert t.backoff == {}  # quiet long enough: forgotten


def test_held_tokens_are_removed_when_dropped_or_expired() -> None:
    t = broker(lifetime=100)
    (req,) = t.want("physics", "schedd", "c:9618", B.addr, "physics.sandbox", 0.0).actions
    t.on_requested(req, "0000001", None, 0.0)
    ok = TokenVerdict(pool="physics", role="schedd", request_id="0000001", approved=True, reason="approved")
    (install,) = t.on_verdict(ok, 1.0).actions
    t.on_installed(install, None, 1.0)
    assert t.wakeup() == 101.0
    assert t.expire(101.0).actions == [RemoveToken("physics", "schedd", "expired")]
    assert t.drop("physics", "schedd", "again").actions == []  # nothing held any more


# ----------------------------------------------------------------------------- granting


def test_the_announced_request_is_approved_and_answered() -> None:
    t = broker("home")
    (approve,) = t.on_notice(notice(), True, "rule 1", 1.0).actions
    assert approve == ApproveToken("physics", "schedd", "0004711", 1200)
    (verdict,) = t.on_approved(approve, None, 2.0).actions
    assert isinstance(verdict, SendMessage) and verdict.addr == B.addr and verdict.message.approved
    assert t.issued == {("physics", "schedd"): 1202.0}
    # The driver would not approve (the queued request is not what was announced): refused.
    (approve,) = t.on_notice(notice(rid="0004712"), True, "rule 1", 3.0).actions
    (verdict,) = t.on_approved(
        approve, "request 0004712 asks for identity 'condor@home.sandbox'", 3.0
    ).actions
    assert not verdict.message.approved and "condor@home.sandbox" in verdict.message.reason
    assert t.revoke("physics", "schedd", "policy").notes[0].event == "token_revoked"
    assert t.issued == {}


@pytest.mark.parametrize(
    ("lie", "why"),
    [
        ({"authz": ["READ", "ADVERTISE_SCHEDD", "ADMINISTRATOR"]}, "asks for ADMINISTRATOR"),
        ({"authz": ["DAEMON"]}, "asks for DAEMON"),
        ({"authz": []}, "bounded to no authorization"),
        ({"identity": "condor@home.sandbox"}, "is not 'schedd-physics@home.sandbox'"),
        ({"identity": "schedd-other@home.sandbox"}, "is not 'schedd-physics@home.sandbox'"),
        ({"identity": "schedd-physics@physics.sandbox"}, "is not 'schedd-physics@home.sandbox'"),
        ({"role": "negotiator"}, "is not 'negotiator-physics@home.sandbox'"),
        ({"lifetime": 86_400}, "at most 1200 s"),
    ],
)
def test_a_lie_is_refused_with_the_reason_and_never_approved(lie: dict, why: str) -> None:
    t = broker("home")
    out = t.on_notice(notice(**lie), True, "rule 1", 1.0)
    assert only(out.actions, ApproveToken) == []
    (verdict,) = out.actions
    assert not verdict.message.approved and why in verdict.message.reason


def test_a_pool_not_granted_is_refused() -> None:
    (verdict,) = broker().on_notice(notice(), False, "no grant here", 1.0).actions
    assert not verdict.message.approved and verdict.message.reason == "not granted: no grant here"


def test_a_replayed_request_id_is_ignored() -> None:
    t = broker()
    assert len(only(t.on_notice(notice(), True, "r", 1.0).actions, ApproveToken)) == 1
    assert t.on_notice(notice(), True, "r", 2.0).actions == []
    assert t.counters["token_requests_replayed"] == 1


# ----------------------------------------------------------------------------- the core


def trust_core(pool: str, policy: Policy | None = None) -> PoolCore:
    settings = CoreSettings(
        pool=pool,
        collector=f"cm.{pool}.org:9618",
        discovery=DiscoverySection(interval=INTERVAL, valid_for=600.0),
        flocking=FlockingSection(interval=INTERVAL, authorize_timeout=5.0),
        trust_domain=f"{pool}.sandbox",
    )
    return PoolCore(settings, node_with_rows(), policy or Policy.allow_all(), random.Random(1))


def trusted_intent(pool: str = "physics") -> FlockIntent:
    return FlockIntent(
        pool=pool,
        origin=B,
        schedd_hosts=["s1.physics.org"],
        trust_domain=f"{pool}.sandbox",
        collector=f"cm.{pool}.org:9618",
    )


def test_the_receiving_pool_grants_the_identity_and_asks_for_its_negotiator_token() -> None:
    c = trust_core("home")
    out = c.on_message(trusted_intent(), 1.0)
    (request,) = of(out, RequestToken)
    assert request == RequestToken(
        "physics",
        "negotiator",
        "cm.physics.org:9618",
        "negotiator-home@physics.sandbox",
        ("READ", "NEGOTIATOR"),
        1200,
    )
    (flock_from,) = of(out, SetFlockFrom)
    assert flock_from.hosts == ("s1.physics.org",)  # FLOCK_FROM stays hosts (the gate refuses '@')
    out = c.on_flock_from_applied(FlockFromApplied(flock_from, None), 2.0)
    (reply,) = sends(out, FlockReply)
    assert reply.message.accepted and reply.message.trust_domain == "home.sandbox"
    assert c.flock_from == {"s1.physics.org"}
    # Its announced schedd request is approved; a negotiator request is not (we do not flock there).
    (approve,) = of(c.on_message(notice(), 3.0), ApproveToken)
    assert approve.role == "schedd"
    out = c.on_message(
        notice(
            rid="0000002",
            role="negotiator",
            identity="negotiator-physics@home.sandbox",
            authz=["READ", "NEGOTIATOR"],
        ),
        3.0,
    )
    assert of(out, ApproveToken) == []
    assert "we do not flock to physics" in sends(out, TokenVerdict)[0].message.reason


def test_revoking_a_pool_takes_its_identity_out_of_flock_from_and_its_token_back() -> None:
    c = trust_core("home")
    out = c.on_message(trusted_intent(), 1.0)
    (request,) = of(out, RequestToken)
    c.on_flock_from_applied(FlockFromApplied(of(out, SetFlockFrom)[0], None), 1.0)
    # Our negotiator's token of physics arrives.
    c.on_token_requested(request, "0000009", None, 1.5)
    ok = TokenVerdict(
        pool="physics", role="negotiator", request_id="0000009", approved=True, reason="approved"
    )
    (install,) = of(c.on_message(ok, 2.0), InstallToken)
    c.on_token_installed(install, None, 2.5)
    (approve,) = of(c.on_message(notice(), 3.0), ApproveToken)
    c.on_token_approved(approve, None, 3.0)
    assert c.trust is not None and ("physics", "schedd") in c.trust.issued
    # B's policy now refuses physics.
    deny = Policy(PolicyFile(default="allow", rule=[Rule(action="deny", pools=["physics"])]))
    out = c.replace_policy(deny, 10.0)
    (flock_from,) = of(out, SetFlockFrom)
    assert flock_from.hosts == ()
    assert of(out, RemoveToken) == [RemoveToken("physics", "negotiator", of(out, RemoveToken)[0].reason)]
    assert c.trust.issued == {} and c.trust.held == {}
    # A notice it sends now is refused: it holds no grant.
    out = c.on_message(notice(rid="0000010"), 11.0)
    assert of(out, ApproveToken) == []
    assert not sends(out, TokenVerdict)[0].message.approved


def test_a_flock_reply_nobody_asked_for_gets_no_negotiator_token() -> None:
    """poolD review, finding 4: a FlockReply(accepted=True) from a pool we sent no intent made
    it a pool we flock to for _may_have_token, and its negotiator got a token here. Only an
    answer to an intent we sent counts, once."""
    negotiator = {
        "role": "negotiator",
        "identity": "negotiator-near@home.sandbox",
        "authz": ["READ", "NEGOTIATOR"],
    }
    c = trust_core("home")
    c.start(0.0)
    willing(c, 1.0, "near")  # it offers slots; we have no idle jobs and ask nothing of it
    yes = FlockReply(pool="near", accepted=True, reason="sure", trust_domain="near.sandbox")
    out = c.on_message(yes, 3.0)
    assert of(out, RequestToken) == [] and "near" not in c.authorized
    assert c.counters["flock_replies_unsolicited"] == 1
    out = c.on_message(notice(pool="near", rid="0000002", **negotiator), 3.5)
    assert of(out, ApproveToken) == []
    assert "we do not flock to near" in sends(out, TokenVerdict)[0].message.reason
    # Asked in a round, its answer counts (once: a second one is unsolicited).
    (intent,) = sends(round_at(c, 60.0, load(free=0, idle=5)), FlockIntent)
    assert intent.addr == willing_addr(c, "near")
    assert of(c.on_message(yes, 61.0), RequestToken) and c.authorized["near"].accepted
    c.on_message(yes.model_copy(update={"accepted": False}), 62.0)
    assert c.authorized["near"].accepted and c.counters["flock_replies_unsolicited"] == 2


def test_an_intent_never_answered_is_forgotten_after_reauthorize_after() -> None:
    """The intents a reply may answer (finding 4) are kept only as long as an answer counts:
    pools that never answer leave nothing behind, and a late answer counts no more."""
    c = trust_core("home")
    c.start(0.0)
    willing(c, 1.0, "near")
    assert sends(round_at(c, 60.0, load(free=0, idle=5)), FlockIntent)  # "near" never answers
    assert "near" in c._intent_sent
    later = 60.0 + c.settings.flocking.reauthorize_after + INTERVAL
    c.willing.entries.clear()  # it offers no more: the next round asks no one
    c.on_load(load(free=0, idle=5), later)
    c.on_timer(later)
    assert c._intent_sent == {}
    yes = FlockReply(pool="near", accepted=True, reason="late", trust_domain="near.sandbox")
    assert of(c.on_message(yes, later), RequestToken) == [] and "near" not in c.authorized


def willing_addr(c: PoolCore, pool: str) -> str:
    return c.willing.entries[pool].origin.addr


def test_the_flocking_pool_asks_for_its_schedds_token_and_drops_it_when_flocking_ends() -> None:
    c = trust_core("home")
    c.start(0.0)
    willing(c, 1.0, "near")
    out = round_at(c, 60.0, load(free=0, idle=5))
    (intent,) = sends(out, FlockIntent)
    assert intent.message.trust_domain == "home.sandbox" and intent.message.collector == "cm.home.org:9618"
    reply = FlockReply(pool="near", accepted=True, reason="rule", trust_domain="near.sandbox")
    out = c.on_message(reply, 61.0)
    (request,) = of(out, RequestToken)
    assert (request.role, request.collector, request.identity) == (
        "schedd",
        "near.example.org:9618",
        "schedd-home@near.sandbox",
    )
    (flock_to,) = of(out, SetFlockTo)
    c.on_flock_to_applied(FlockToApplied(flock_to, True, {}), 61.5)
    c.on_token_requested(request, "0000042", None, 62.0)
    ok = TokenVerdict(pool="near", role="schedd", request_id="0000042", approved=True, reason="approved")
    (install,) = of(c.on_message(ok, 63.0), InstallToken)
    c.on_token_installed(install, None, 64.0)
    # The negotiator of "near" may have its token here while we flock there.
    neg = notice(
        pool="near", role="negotiator", identity="negotiator-near@home.sandbox", authz=["READ", "NEGOTIATOR"]
    )
    assert of(c.on_message(neg, 65.0), ApproveToken)
    # FLOCK_TO withdrawn: our schedds' token goes.
    withdraw = SetFlockTo((), "quiet")
    out = c.on_flock_to_applied(FlockToApplied(withdraw, True, {}), 400.0)
    assert of(out, RemoveToken) == [RemoveToken("near", "schedd", "flocking to it ended")]


def test_a_negotiator_request_that_overtakes_the_flock_reply_is_approved() -> None:
    """Seen on real pools: the pool we ask asks for its negotiator's token on our intent, before
    its FlockReply (sent once its FLOCK_FROM is set) reaches us."""
    c = trust_core("home")
    c.start(0.0)
    willing(c, 1.0, "near")
    round_at(c, 60.0, load(free=0, idle=5))  # the intent to "near" is out, no answer yet
    neg = notice(
        pool="near", role="negotiator", identity="negotiator-near@home.sandbox", authz=["READ", "NEGOTIATOR"]
    )
    assert of(c.on_message(neg, 60.5), ApproveToken)


def test_a_machine_taking_the_manager_role_asks_for_authorization_and_token_again() -> None:
    """The authorization a pool gave us comes with our schedds' token at its collector, a file
    on the machine that managed our pool before. A core resumed on another machine asks again
    (intent, then token) before FLOCK_TO names the pool; seen on real pools after a handback,
    where the resumed authorization set FLOCK_TO with no token at the pool's collector."""
    before = trust_core("home")
    before.start(0.0)
    willing(before, 1.0, "near")
    round_at(before, 60.0, load(free=0, idle=5))
    before.on_message(
        FlockReply(pool="near", accepted=True, reason="rule", trust_domain="near.sandbox"), 61.0
    )
    assert "near" in before.authorized
    state = before.export_state(100.0, 0.0)

    moved = trust_core("home")
    moved.settings = replace(moved.settings, collector="cm2.home.org:9618")  # another machine
    moved.restore_state(state, 100.0, 0.0)
    assert moved.authorized == {} and moved.counters["authorizations_left_on_the_old_manager"] == 1
    moved.start(100.0)
    willing(moved, 101.0, "near")
    out = round_at(moved, 160.0, load(free=0, idle=5))
    assert sends(out, FlockIntent) and of(out, SetFlockTo) == []  # asked again first
    out = moved.on_message(
        FlockReply(pool="near", accepted=True, reason="rule", trust_domain="near.sandbox"), 161.0
    )
    assert of(out, RequestToken) and of(out, SetFlockTo)

    same = trust_core("home")  # the same machine again (a restart): nothing asked again
    same.restore_state(state, 100.0, 0.0)
    assert "near" in same.authorized


def test_a_moved_collector_is_asked_for_a_token_even_while_the_old_one_is_being_installed() -> None:
    t = broker()
    (req,) = t.want("physics", "schedd", "old:9618", B.addr, "physics.sandbox", 0.0).actions
    t.on_requested(req, "0000001", None, 0.0)
    ok = TokenVerdict(pool="physics", role="schedd", request_id="0000001", approved=True, reason="approved")
    t.on_verdict(ok, 1.0)  # being installed
    t.forget("physics", "schedd")  # its collector moved
    (again,) = t.want("physics", "schedd", "new:9618", B.addr, "physics.sandbox", 2.0).actions
    assert again.collector == "new:9618"

"""Repointing (issue 16, Deliver 3), in poolD's pure core: when pool B's manager role moves, B's
new collector reaches us (CollectorMoved, or B's next offer) and our FLOCK_TO follows at once,
B is asked to authorize our schedds again and, with cross-pool trust, its new collector for
their token; an older word, a flapping pool, an unknown pool or another pool's node cannot move
it (the last is the driver's claim check, tested here at the certificate level too)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.overlay.claims import ClaimChecker, endorse
from common.overlay.identity import IdentityFiles, NodeIdentity, load_identity
from common.overlay.messages import Peer
from deploy.harness.ring_keys import RingKeys
from poolD.collector_moves import (
    EPOCH_TRUSTED_FOR,
    MAX_EPOCH_JUMP,
    MAX_MOVES,
    MOVE_NOTICE_DELAYS,
    MOVE_WINDOW,
)
from poolD.config import DiscoverySection, FlockingSection
from poolD.core import (
    CoreOutput,
    CoreSettings,
    FlockToApplied,
    PoolCore,
    RequestToken,
    SetFlockTo,
)
from poolD.flock_trust import InstallToken, RemoveToken
from poolD.messages import EPOCH_LIMIT, Announcement, CollectorMoved, FlockIntent, FlockReply, TokenVerdict
from poolD.policy import Policy, PolicyFile, Rule
from tests.poolD.test_core import INTERVAL, load, of, round_at, sends
from tests.poolD.test_discovery import node_with_rows

OLD, NEW = "b1.example.org:9618", "b2.example.org:9618"
B1 = Peer(id=0x5 << 124, addr="10.0.0.5:7640")  # B's original manager (in our routing table)
B2 = Peer(id=0x7 << 124, addr="10.0.0.7:7640")  # the machine that took B's manager role over


def core(policy: Policy | None = None, trust: bool = False) -> PoolCore:
    settings = CoreSettings(
        pool="home",
        collector="home.example.org:9618",
        discovery=DiscoverySection(interval=INTERVAL, valid_for=600.0),
        flocking=FlockingSection(interval=INTERVAL, authorize_timeout=5.0),
        trust_domain="home.example" if trust else None,
    )
    return PoolCore(settings, node_with_rows(), policy or Policy.allow_all(), random.Random(1))


def offer_of_b(origin: Peer, collector: str, *, seq: int, epoch: int = 0) -> Announcement:
    return Announcement(
        pool="b",
        collector=collector,
        origin=origin,
        seq=seq,
        free_slots=5,
        total_slots=10,
        queue_length=0,
        utilization=0.5,
        valid_for=600.0,
        ttl=1,
        row=0,
        epoch=epoch,
    )


def moved(
    collector: str = NEW, *, seq: int, epoch: int = 1, origin: Peer = B2, pool: str = "b"
) -> CollectorMoved:
    return CollectorMoved(pool=pool, collector=collector, origin=origin, epoch=epoch, seq=seq)


def flocking_to_b(trust: bool = False, policy: Policy | None = None, epoch: int = 0) -> PoolCore:
    """A needy core whose FLOCK_TO names B's original collector (its first word: `epoch`)."""
    c = core(policy, trust)
    c.start(0.0)
    c.overlay.rtt[B1.id] = 0.01
    c.on_message(offer_of_b(B1, OLD, seq=1, epoch=epoch), 1.0)
    round_at(c, 60.0, load(free=0, idle=5))
    reply = FlockReply(pool="b", accepted=True, reason="ok", trust_domain="b.example" if trust else None)
    out = c.on_message(reply, 61.0)
    (action,) = of(out, SetFlockTo)
    c.on_flock_to_applied(FlockToApplied(action, True, {}), 61.0)
    assert c.flocking.active == [OLD]
    return c


def apply_all(c: PoolCore, out: CoreOutput, now: float) -> list[SetFlockTo]:
    """Apply every FLOCK_TO change the core asks for (and those it asks for next)."""
    applied = []
    pending = of(out, SetFlockTo)
    while pending:
        action = pending.pop(0)
        applied.append(action)
        pending += of(c.on_flock_to_applied(FlockToApplied(action, True, {}), now), SetFlockTo)
    return applied


def test_a_moved_collector_repoints_flock_to_at_once() -> None:
    c = flocking_to_b()
    out = c.on_message(moved(seq=5), 70.0)  # long before the next round (120)
    assert [a.collectors for a in of(out, SetFlockTo)] == [(NEW,)]
    assert [s.addr for s in sends(out, FlockIntent)] == [B2.addr]  # authorize us at B's new manager
    apply_all(c, out, 70.0)
    assert c.flocking.active == [NEW]
    assert c.willing.entries["b"].collector == NEW and c.willing.entries["b"].origin == B2
    assert c.counters["collector_moves"] == 1


def test_an_offer_from_the_new_manager_repoints_too() -> None:
    c = flocking_to_b()
    out = c.on_message(offer_of_b(B2, NEW, seq=2, epoch=1), 70.0)
    assert [a.collectors for a in of(out, SetFlockTo)] == [(NEW,)]


def test_an_older_word_cannot_move_it_back() -> None:
    c = flocking_to_b()
    apply_all(c, c.on_message(moved(seq=5, epoch=1), 70.0), 70.0)
    for late in (
        offer_of_b(B1, OLD, seq=4, epoch=1),
        offer_of_b(B1, OLD, seq=99, epoch=0),
        moved(OLD, seq=5),
    ):
        out = c.on_message(late, 71.0)  # a delayed offer, the old manager back from a partition
        assert of(out, SetFlockTo) == []
    assert c.flocking.active == [NEW] and c.willing.entries["b"].collector == NEW
    assert c.counters["collector_moves_stale"] == 3


def test_the_original_taking_its_role_back_repoints_again() -> None:
    c = flocking_to_b()
    apply_all(c, c.on_message(moved(seq=5, epoch=1), 70.0), 70.0)
    out = c.on_message(moved(OLD, seq=6, epoch=2, origin=B1), 90.0)
    assert [a.collectors for a in apply_all(c, out, 90.0)] == [(OLD,)]


def test_a_flapping_pool_moves_flock_to_a_bounded_number_of_times() -> None:
    c = flocking_to_b()
    changes = 0
    for i in range(20):  # a node of B (its certificate is B's) alternates every second
        out = c.on_message(moved(NEW if i % 2 == 0 else OLD, seq=10 + i, epoch=1 + i), 70.0 + i)
        changes += len(apply_all(c, out, 70.0 + i))
    assert changes == MAX_MOVES
    # after the third move, every other message names the collector it already has (no move)
    assert c.counters["collector_moves_limited"] == (20 - MAX_MOVES) // 2 + 1
    later = 70.0 + MOVE_WINDOW + 1  # the window passed: it may move again
    assert len(apply_all(c, c.on_message(moved(OLD, seq=99, epoch=99), later), later)) == 1


def test_an_unknown_or_refused_pool_moves_nothing_and_leaves_nothing_behind() -> None:
    c = flocking_to_b()
    out = c.on_message(moved(pool="stranger", seq=1), 70.0)
    assert out.actions == [] and "stranger" not in c.collector_claims
    assert c.counters["collector_moves_unknown"] == 1
    deny_b = Policy(PolicyFile(default="allow", rule=[Rule(action="deny", pools=["b"])]))
    c.replace_policy(deny_b)
    assert of(c.on_message(moved(seq=5), 71.0), SetFlockTo) == []
    assert c.flocking.active == [OLD]


def test_an_offer_the_policy_refuses_or_that_is_absurd_moves_nothing() -> None:
    """poolD review, finding 2: an offer's collector move was followed before discovery's sanity
    and policy checks, so an offer the policy refuses (by pool, or from a host it refuses) or an
    absurd one repointed FLOCK_TO where the same move as CollectorMoved is refused."""
    deny_b = Policy(PolicyFile(default="allow", rule=[Rule(action="deny", pools=["b"])]))
    only_b1 = Policy(PolicyFile(default="deny", rule=[Rule(action="allow", pools=["b"], hosts=["10.0.0.5"])]))
    absurd = offer_of_b(B2, NEW, seq=5, epoch=1).model_copy(update={"free_slots": 10, "total_slots": 1})
    for policy, offer in [
        (deny_b, offer_of_b(B2, NEW, seq=5, epoch=1)),
        (only_b1, offer_of_b(B2, NEW, seq=5, epoch=1)),
        (None, absurd),
    ]:
        c = flocking_to_b(policy=only_b1 if policy is only_b1 else None)
        if policy is deny_b:
            c.replace_policy(deny_b)
        out = c.on_message(offer, 70.0)
        assert of(out, SetFlockTo) == [] and sends(out, FlockIntent) == []
        assert c.collector_claims["b"].collector == OLD and c.counters["collector_moves"] == 0
        assert c.flocking.active == [OLD]
    # The same offer from B's new manager under a policy that accepts it still repoints at once.
    c = flocking_to_b()
    assert [
        a.collectors for a in of(c.on_message(offer_of_b(B2, NEW, seq=5, epoch=1), 70.0), SetFlockTo)
    ] == [(NEW,)]


def test_a_move_during_a_flock_to_change_follows_once_it_is_applied() -> None:
    c = flocking_to_b()
    withdraw = c.stop().actions[0]  # a FLOCK_TO change in flight (naming nothing)
    assert of(c.on_message(moved(seq=5), 70.0), SetFlockTo) == []
    (action,) = of(c.on_flock_to_applied(FlockToApplied(withdraw, False, {}), 71.0), SetFlockTo)
    assert action.collectors == (NEW,)  # the change failed, FLOCK_TO still names B's old collector


def test_with_cross_pool_trust_the_new_collector_is_asked_for_our_schedds_token() -> None:
    c = flocking_to_b(trust=True)
    out = c.on_message(moved(seq=5), 70.0)
    (request,) = of(out, RequestToken)
    assert request.collector == NEW and request.peer == "b" and request.role == "schedd"


def token_installed(c: PoolCore, out: CoreOutput, now: float, rid: str) -> RequestToken:
    """B approves the schedd token request in `out`; it is installed where our schedds read it."""
    (request,) = of(out, RequestToken)
    c.on_token_requested(request, rid, None, now)
    verdict = TokenVerdict(pool="b", role="schedd", request_id=rid, approved=True, reason="approved")
    (install,) = of(c.on_message(verdict, now), InstallToken)
    c.on_token_installed(install, None, now)
    assert ("b", "schedd") in c.trust.held  # type: ignore[union-attr]
    return request


def quiet_until_withdrawn(c: PoolCore, start: float) -> float:
    """Our queue drained: rounds until FLOCK_TO is withdrawn (and B's token with it); the time."""
    t = start
    while c.flocking.active:
        (withdraw,) = of(round_at(c, t, load(free=3, idle=0)), SetFlockTo) or [None]
        if withdraw is not None:
            removed = of(c.on_flock_to_applied(FlockToApplied(withdraw, True, {}), t), RemoveToken)
            assert [(r.peer, r.role) for r in removed] == [("b", "schedd")]
        t += INTERVAL
    assert ("b", "schedd") not in c.trust.held  # type: ignore[union-attr]  # RemoveToken went out
    return t


def flock_again(c: PoolCore, now: float, origin: Peer, collector: str) -> list[SetFlockTo]:
    """Our queue fills again well within reauthorize_after of B's last answer: B is asked to
    authorize our schedds and, on its yes, its collector for their token, then FLOCK_TO is set."""
    out = round_at(c, now, load(free=0, idle=5))
    assert [s.addr for s in sends(out, FlockIntent)] == [origin.addr], "B not asked again"
    reply = FlockReply(pool="b", accepted=True, reason="ok", trust_domain="b.example")
    out = c.on_message(reply, now + 1)
    (request,) = of(out, RequestToken)
    assert request.collector == collector and request.role == "schedd"
    return apply_all(c, out, now + 1)


def test_flocking_again_after_it_ended_asks_for_the_token_it_dropped() -> None:
    """The token of B goes when flocking to B ends, well within reauthorize_after of B's answer
    (an authorization is renewed once per reauthorize_after). Flocking again must ask B and
    then for a token again, not set FLOCK_TO alone: our schedds could not advertise at B's
    collector."""
    c = core(trust=True)
    c.start(0.0)
    c.overlay.rtt[B1.id] = 0.01
    c.on_message(offer_of_b(B1, OLD, seq=1), 1.0)
    assert sends(round_at(c, 60.0, load(free=0, idle=5)), FlockIntent)
    out = c.on_message(FlockReply(pool="b", accepted=True, reason="ok", trust_domain="b.example"), 61.0)
    apply_all(c, out, 61.0)
    token_installed(c, out, 62.0, "0000001")
    t = quiet_until_withdrawn(c, 120.0)
    assert t < 61.0 + c.settings.flocking.reauthorize_after  # B's answer is not stale
    assert [a.collectors for a in flock_again(c, t, B1, OLD)] == [(OLD,)]


def test_flocking_again_after_bs_handback_asks_its_original_for_a_token() -> None:
    """bench/federation-failover, run 2 (docs/results.md): we flocked to B across its failover
    (B's replacement authorized us, its collector gave our schedds' token), our queue drained
    (FLOCK_TO withdrawn, the token removed), B's original took its role back (a move while we
    did not flock: nothing to re-establish). Our next burst must ask B's original to authorize
    us and its collector for a token; before, FLOCK_TO named it with no token there, and no
    job of ours ran in B."""
    c = flocking_to_b(trust=True)
    out = c.on_message(moved(seq=5, epoch=1), 70.0)  # B's manager killed; the replacement says so
    apply_all(c, out, 70.0)
    reply = FlockReply(pool="b", accepted=True, reason="ok", trust_domain="b.example")
    c.on_message(reply, 71.0)  # the replacement authorized us again
    token_installed(c, out, 72.0, "0000002")
    t = quiet_until_withdrawn(c, 120.0)
    out = c.on_message(moved(OLD, seq=1006, epoch=2, origin=B1), t)  # the handback
    assert of(out, SetFlockTo) == [] and c.willing.entries["b"].collector == OLD
    assert [a.collectors for a in flock_again(c, t + 10, B1, OLD)] == [(OLD,)]


def test_our_own_move_is_told_to_the_pools_that_flock_to_us_a_few_times() -> None:
    c = core()
    c.start(0.0)
    c.on_load(load(free=3, idle=0), 0.5)
    intent = FlockIntent(
        pool="a", origin=Peer(id=0x9 << 124, addr="10.0.0.99:7640"), schedd_hosts=["s.a.org"]
    )
    c.on_message(intent, 1.0)
    c.epoch = 4
    out = c.announce_move(10.0)
    notices = [s for s in out.actions if isinstance(getattr(s, "message", None), CollectorMoved)]
    assert "10.0.0.99:7640" in {s.addr for s in notices}  # the pool holding a grant here
    assert {s.message.epoch for s in notices} == {4}
    assert out.wakeup == 10.0 + MOVE_NOTICE_DELAYS[1]
    told = []
    for t in (11.0, 10.0 + MOVE_NOTICE_DELAYS[1], 10.0 + MOVE_NOTICE_DELAYS[2], 30.0):
        again = c.on_timer(t).actions
        told.append(len([s for s in again if isinstance(getattr(s, "message", None), CollectorMoved)]))
    assert told == [0, len(notices), len(notices), 0]  # told again twice, then no more


# ----------------------------------------------------------------------------- who may move it


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RingKeys]:
    yield RingKeys(tmp_path_factory.mktemp("repoint-keys"), ring="poold")


def identity(keys: RingKeys, name: str, host: str, pool: str) -> NodeIdentity:
    files = keys.node(name, hosts=[host], pool=pool)
    return load_identity(IdentityFiles(files.key, files.cert, keys.ca_file, None))


def test_only_the_pools_own_certified_node_may_name_its_collector(keys: RingKeys, tmp_path: Path) -> None:
    """The driver checks every payload's claims against its signer's certificate: a
    CollectorMoved (or an offer) must come from a node certified for the pool it names, whose
    certificate covers the collector's host."""
    del tmp_path
    me = identity(keys, "home", "10.0.0.1", "home")
    checker = ClaimChecker(me)
    replacement = identity(keys, "b2", "b2.example.org", "b")
    other_pool = identity(keys, "evil", "b2.example.org", "c")
    wrong_host = identity(keys, "b3", "b3.example.org", "b")
    now = replacement.cert.not_before + 10

    def origin(who: NodeIdentity) -> Peer:
        return Peer(id=who.cert.node_id, addr=f"{who.cert.hosts[0]}:7640")

    good = moved(NEW, seq=1, origin=origin(replacement))
    assert checker.payload_problem(endorse(replacement, good, now), now) is None
    lie = moved(NEW, seq=1, origin=origin(other_pool))  # another pool's node names B's collector
    assert checker.payload_problem(endorse(other_pool, lie, now), now) is not None
    elsewhere = moved(NEW, seq=1, origin=origin(wrong_host))  # B's node, but not the collector's host
    assert checker.payload_problem(endorse(wrong_host, elsewhere, now), now) is not None


def test_a_flock_intent_may_name_only_a_collector_its_signers_certificate_covers(keys: RingKeys) -> None:
    """poolD review, finding 3: FlockIntent's collector was not among its claims, so a pool's
    certified node could name another pool's collector and we asked that one for a token."""
    me = identity(keys, "home", "10.0.0.1", "home")
    checker = ClaimChecker(me)
    liar = identity(keys, "liar", "cm.liar.org", "liar")
    now = liar.cert.not_before + 10
    origin = Peer(id=liar.cert.node_id, addr="cm.liar.org:7640")

    def intent(collector: str | None) -> FlockIntent:
        domain = None if collector is None else "liar.example"
        return FlockIntent(
            pool="liar", origin=origin, schedd_hosts=["s1.liar.org"], trust_domain=domain, collector=collector
        )

    assert checker.payload_problem(endorse(liar, intent("cm.liar.org:9618"), now), now) is None
    assert checker.payload_problem(endorse(liar, intent(None), now), now) is None
    problem = checker.payload_problem(endorse(liar, intent("cm.victim.org:9618"), now), now)
    assert problem is not None and "cm.victim.org" in problem[1]


def test_an_epoch_jumping_out_of_reach_is_refused() -> None:
    """A node of B's that forged a huge epoch would pin B's collector for good."""
    c = flocking_to_b()
    out = c.on_message(moved(seq=5, epoch=MAX_EPOCH_JUMP + 1), 70.0)
    assert of(out, SetFlockTo) == [] and c.counters["collector_epoch_jumps"] == 1
    assert c.collector_claims["b"].epoch == 0
    assert of(c.on_message(moved(seq=6, epoch=3), 71.0), SetFlockTo) != []  # three takeovers: fine


def test_a_forged_epoch_pins_the_collector_only_while_it_is_said_again() -> None:
    """poolD review, finding 6: the first word of a pool may carry any epoch (and a later one
    jump by MAX_EPOCH_JUMP); B's real failover at epoch 1 was then refused as stale for good
    (and saved in the state file). A word no newer one confirms outranks nothing after
    EPOCH_TRUSTED_FOR: B's manager speaking on at its real epoch resets the claim, and then
    the real failover repoints at once; if B's manager died, the failover repoints once the
    lie went unconfirmed that long."""
    for first_word, jump in ((EPOCH_LIMIT - 1, 0), (0, MAX_EPOCH_JUMP)):
        c = flocking_to_b(epoch=first_word)  # the lie as the first word we hear of B
        c.on_message(offer_of_b(B1, OLD, seq=2, epoch=jump), 62.0)  # or as an allowed jump
        assert c.collector_claims["b"].epoch == first_word + jump
        assert of(c.on_message(moved(NEW, seq=1, epoch=1), 70.0), SetFlockTo) == []  # pinned, for now
        # B's manager goes on offering at its real epoch 0; the lie is not said again.
        now = 62.0
        while now <= 62.0 + EPOCH_TRUSTED_FOR + 60:
            c.on_message(offer_of_b(B1, OLD, seq=int(now), epoch=0), now)
            now += 60.0
        assert c.collector_claims["b"].epoch == 0 and c.counters["collector_claims_expired"] == 1
        out = c.on_message(moved(NEW, seq=2, epoch=1), now)  # B's real failover
        assert [a.collectors for a in of(out, SetFlockTo)] == [(NEW,)]
    # B's manager died with the lie in place: the failover is followed once it went unconfirmed.
    c = flocking_to_b(epoch=EPOCH_LIMIT - 1)
    assert of(c.on_message(moved(NEW, seq=1, epoch=1), 1.0 + EPOCH_TRUSTED_FOR), SetFlockTo) == []
    out = c.on_message(moved(NEW, seq=2, epoch=1), 2.0 + EPOCH_TRUSTED_FOR)
    assert [a.collectors for a in of(out, SetFlockTo)] == [(NEW,)]

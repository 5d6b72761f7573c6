"""poolD's pure core: readings, offers, rounds, authorization and FLOCK_TO decisions, fed by
hand with `now`, with no network, clock or HTCondor."""

from __future__ import annotations

import random

from common.condor.types import PoolLoad, ScheddLoad
from common.overlay.messages import Peer
from poolD.config import DiscoverySection, FlockingSection
from poolD.core import (
    CoreOutput,
    CoreSettings,
    FlockFromApplied,
    FlockToApplied,
    Measure,
    PoolCore,
    ReadLoad,
    Send,
    SetFlockFrom,
    SetFlockTo,
)
from poolD.messages import Announcement, FlockIntent, FlockReply
from poolD.policy import Policy, PolicyFile, Rule
from tests.poolD.test_discovery import node_with_rows, offer

INTERVAL = 60.0


def load(free: int, idle: int, total: int = 3, flocked: int = 0) -> PoolLoad:
    schedd = ScheddLoad(
        name="schedd@cm",
        address="<10.0.0.1:9618?addrs=10.0.0.1-9618>",
        machine="cm.home.org",
        idle=idle,
        running=total - free,
        held=0,
        flocked=flocked,
    )
    return PoolLoad(total_slots=total, free_slots=free, claimed_slots=total - free, schedds=[schedd])


def core(policy: Policy | None = None, **flocking: float) -> PoolCore:
    settings = CoreSettings(
        pool="home",
        collector="home.example.org:9618",
        discovery=DiscoverySection(interval=INTERVAL, valid_for=600.0),
        flocking=FlockingSection(interval=INTERVAL, authorize_timeout=5.0, **flocking),
    )
    return PoolCore(settings, node_with_rows(), policy or Policy.allow_all(), random.Random(1))


def of(out: CoreOutput, kind: type) -> list:
    return [a for a in out.actions if isinstance(a, kind)]


def sends(out: CoreOutput, kind: type) -> list[Send]:
    return [a for a in of(out, Send) if isinstance(a.message, kind)]


def willing(c: PoolCore, now: float, *pools: str) -> None:
    """Offers from these pools (ids 2, 3, ... with measured RTTs in that order)."""
    for i, pool in enumerate(pools, 2):
        c.overlay.rtt[i] = 0.01 * i  # 5 ms buckets: a clear order
        c.on_message(offer(pool, oid=i, valid=600.0), now)


def test_one_reading_per_cycle_feeds_both_the_offers_and_the_round() -> None:
    c = core()
    out = c.start(0.0)
    assert of(out, ReadLoad) == [ReadLoad()]  # the gatherer reads at once
    assert of(c.on_timer(1.0), ReadLoad) == []  # one reading outstanding at a time
    out = c.on_load(load(free=2, idle=0), 1.0)
    assert {s.addr for s in sends(out, Announcement)} == {"10.0.0.5:7640", "10.0.0.9:7640", "10.0.0.13:7640"}
    assert out.wakeup == 60.0  # the first round is due one interval after the start
    assert of(c.on_timer(60.0), ReadLoad) == [ReadLoad()]  # it decides on a fresh reading
    out = c.on_load(load(free=2, idle=0), 60.5)
    assert out.wakeup == 60.5  # the round runs after the reading's offers went out
    out = c.on_timer(60.5)
    assert of(out, ReadLoad) == [] and out.wakeup == 120.5  # reading and round due together again
    assert of(c.on_timer(120.5), ReadLoad) == [ReadLoad()]  # one reading for both
    out = c.on_load(load(free=2, idle=0), 121.0)
    assert len(sends(out, Announcement)) == 3 and out.wakeup == 121.0
    assert of(c.on_timer(121.0), ReadLoad) == []


def test_offers_at_most_once_per_interval_and_never_without_free_slots() -> None:
    c = core()
    c.start(0.0)
    assert sends(c.on_load(load(free=0, idle=3), 1.0), Announcement) == []
    assert len(sends(c.on_load(load(free=1, idle=0), 2.0), Announcement)) == 3  # free now: offer
    assert sends(c.on_load(load(free=1, idle=0), 30.0), Announcement) == []  # not again this interval
    assert len(sends(c.on_load(load(free=1, idle=0), 62.0), Announcement)) == 3


def test_an_offer_from_an_unmeasured_pool_is_measured() -> None:
    c = core()
    out = c.on_message(offer("far", oid=7, valid=600.0), 1.0)
    assert of(out, Measure) == [Measure(Peer(id=7, addr="10.0.0.7:7640"))]
    c.overlay.rtt[7] = 0.02
    assert of(c.on_message(offer("far", oid=7, seq=2, valid=600.0), 2.0), Measure) == []


def round_at(c: PoolCore, now: float, reading: PoolLoad) -> CoreOutput:
    """Feed a reading and fire the round it makes due."""
    c.on_load(reading, now)
    return c.on_timer(now)


def test_a_round_asks_for_authorization_then_flocks_to_the_pools_that_agreed() -> None:
    c = core(max_pools=2)
    c.start(0.0)
    willing(c, 1.0, "near", "mid", "far")
    out = round_at(c, 60.0, load(free=0, idle=5))
    intents = sends(out, FlockIntent)
    assert [s.addr for s in intents] == ["10.0.0.2:7640", "10.0.0.3:7640"]  # the two nearest
    assert intents[0].message.schedd_hosts == ["10.0.0.1", "cm.home.org"]
    assert of(out, SetFlockTo) == [] and out.wakeup == 65.0  # waits up to authorize_timeout
    out = c.on_message(FlockReply(pool="near", accepted=True, reason="ok"), 61.0)
    assert of(out, SetFlockTo) == []  # "mid" has not answered yet
    out = c.on_message(FlockReply(pool="mid", accepted=False, reason="not you"), 62.0)
    (action,) = of(out, SetFlockTo)
    assert action.collectors == ("near.example.org:9618",)
    assert c.flocking.active == []  # not until the driver says it is applied
    c.on_flock_to_applied(
        FlockToApplied(action, applied=True, seen={"schedd@cm": ["near.example.org:9618"]}), 63.0
    )
    assert c.flocking.active == ["near.example.org:9618"] and c.flocking_since == 63.0
    # Next round: both answered recently, nobody is asked again, nothing changes.
    out = round_at(c, 122.0, load(free=0, idle=5))
    assert sends(out, FlockIntent) == [] and of(out, SetFlockTo) == []


def test_a_round_gives_up_waiting_at_the_authorization_timeout() -> None:
    c = core(max_pools=2)
    c.start(0.0)
    willing(c, 1.0, "near", "silent")
    round_at(c, 60.0, load(free=0, idle=5))
    c.on_message(FlockReply(pool="near", accepted=True, reason="ok"), 61.0)
    assert of(c.on_timer(64.9), SetFlockTo) == []
    (action,) = of(c.on_timer(65.0), SetFlockTo)
    assert action.collectors == ("near.example.org:9618",)


def test_flock_to_is_withdrawn_after_a_quiet_spell_and_kept_when_it_does_not_apply() -> None:
    c = core(max_pools=1, withdraw_after=100.0)
    c.start(0.0)
    willing(c, 1.0, "near")
    out = round_at(c, 60.0, load(free=0, idle=5))
    (reply_addr,) = [s.addr for s in sends(out, FlockIntent)]
    (first,) = of(c.on_message(FlockReply(pool="near", accepted=True, reason="ok"), 60.1), SetFlockTo)
    # The driver could not apply it (a schedd refused; the old values were restored).
    c.on_flock_to_applied(FlockToApplied(first, applied=False, seen={}), 60.2)
    assert c.flocking.active == []
    (again,) = of(round_at(c, 120.0, load(free=0, idle=5)), SetFlockTo)  # decided again
    c.on_flock_to_applied(FlockToApplied(again, applied=True, seen={}), 120.1)
    assert of(round_at(c, 180.0, load(free=2, idle=0)), SetFlockTo) == []  # quiet since 180
    (withdraw,) = of(round_at(c, 300.0, load(free=2, idle=0)), SetFlockTo)
    assert withdraw.collectors == () and reply_addr == "10.0.0.2:7640"


def test_a_pool_whose_offer_does_not_deliver_is_blacklisted() -> None:
    c = core(max_pools=1, deliver_timeout=200.0, blacklist_for=1000.0)
    c.start(0.0)
    willing(c, 1.0, "liar", "honest")
    round_at(c, 60.0, load(free=0, idle=5))
    (action,) = of(c.on_message(FlockReply(pool="liar", accepted=True, reason="ok"), 60.0), SetFlockTo)
    c.on_flock_to_applied(FlockToApplied(action, applied=True, seen={}), 60.0)
    for now in (120.0, 180.0, 240.0):  # jobs wait, none flocked; FLOCK_TO stays (nothing new)
        out = round_at(c, now, load(free=0, idle=5, flocked=0))
        assert "liar" in c.willing.entries and not out.notes
    out = round_at(c, 300.0, load(free=0, idle=5, flocked=0))
    assert "liar" not in c.willing.entries and "blacklisted liar" in str(out.notes[0])
    assert (out.notes[0].event, out.notes[0].fields["pool"]) == ("blacklisted", "liar")
    assert "liar" in c.policy.blacklist
    assert [s.addr for s in sends(out, FlockIntent)] == ["10.0.0.3:7640"]  # the next pool is asked
    # Its next offer is refused while the blacklist lasts.
    c.on_message(offer("liar", oid=2, seq=9, valid=600.0), 301.0)
    assert "liar" not in c.willing.entries


def test_a_pool_whose_flocked_jobs_run_is_not_blacklisted() -> None:
    c = core(max_pools=1, deliver_timeout=200.0)
    c.start(0.0)
    willing(c, 1.0, "good")
    round_at(c, 60.0, load(free=0, idle=5))
    (action,) = of(c.on_message(FlockReply(pool="good", accepted=True, reason="ok"), 60.0), SetFlockTo)
    c.on_flock_to_applied(FlockToApplied(action, applied=True, seen={}), 60.0)
    round_at(c, 400.0, load(free=0, idle=5, flocked=2))
    assert "good" in c.willing.entries and not c.policy.blacklist


def intent(pool: str, hosts: list[str], oid: int = 7) -> FlockIntent:
    return FlockIntent(pool=pool, origin=Peer(id=oid, addr=f"10.0.0.{oid}:7640"), schedd_hosts=hosts)


def test_an_incoming_intent_is_answered_after_flock_from_is_set() -> None:
    c = core()
    out = c.on_message(intent("other", ["s1.other.org"]), 1.0)
    (action,) = of(out, SetFlockFrom)
    assert action.hosts == ("s1.other.org",) and sends(out, FlockReply) == []
    # A second pool asks while the first change is on its way: its change includes the first's.
    (second,) = of(c.on_message(intent("third", ["s3.third.org"], oid=8), 1.5), SetFlockFrom)
    assert second.hosts == ("s1.other.org", "s3.third.org")
    out = c.on_flock_from_applied(FlockFromApplied(action, None), 2.0)
    (reply,) = sends(out, FlockReply)
    assert reply.addr == "10.0.0.7:7640" and reply.message.accepted
    out = c.on_flock_from_applied(FlockFromApplied(second, None), 2.5)
    assert sends(out, FlockReply)[0].message.accepted and c.flock_from == {"s1.other.org", "s3.third.org"}
    # Asking again with hosts already let in: answered at once.
    out = c.on_message(intent("other", ["s1.other.org"]), 3.0)
    assert of(out, SetFlockFrom) == [] and sends(out, FlockReply)[0].message.accepted


def test_an_incoming_intent_is_refused_by_policy_or_when_flock_from_fails() -> None:
    deny = Policy(PolicyFile(default="allow", rule=[Rule(action="deny", pools=["evil*"])]))
    c = core(deny)
    out = c.on_message(intent("evilcorp", ["x.evil.org"]), 1.0)
    assert of(out, SetFlockFrom) == []
    (reply,) = sends(out, FlockReply)
    assert not reply.message.accepted and "evil*" in reply.message.reason
    (action,) = of(c.on_message(intent("other", ["s1.other.org"]), 2.0), SetFlockFrom)
    out = c.on_flock_from_applied(FlockFromApplied(action, "collector refused"), 3.0)
    (reply,) = sends(out, FlockReply)
    assert not reply.message.accepted and "collector refused" in reply.message.reason
    assert c.flock_from == set()


def test_stopping_withdraws_flock_to() -> None:
    c = core()
    out = c.stop()
    assert of(out, SetFlockTo) == [SetFlockTo((), "poold stopping")]


def test_a_failed_reading_skips_the_round_and_shows_in_status() -> None:
    c = core()
    c.start(0.0)
    willing(c, 1.0, "near")
    c.on_load(None, 60.0, "collector unreachable")
    out = c.on_timer(60.0)
    assert out.actions == [] and out.wakeup == 120.0
    assert c.load_error == "collector unreachable"
    status = c.status(61.0)
    assert [e["pool"] for e in status["willing_list"]] == ["near"]
    assert status["offers"]["accepted"] == 1


def test_two_cores_flock_through_each_other_with_no_network() -> None:
    """The busy pool's core and the free pool's core, piped into each other by the simulation
    driver: offers, the authorization handshake and FLOCK_TO, as the daemons would do it."""
    from common.overlay.node import OverlayNode, OverlayParams
    from sim.poold import SimulatedPoolDs

    def node(i: int) -> OverlayNode:
        n = OverlayNode(Peer(id=(i + 1) << 124, addr=f"n{i}"), OverlayParams(), random.Random(i))
        n.start(0.0)
        return n

    nodes = [node(0), node(1)]
    for a, b in ((0, 1), (1, 0)):
        nodes[a]._consider(nodes[b].me, 0.0, firsthand=True)
        nodes[a]._flush()
    settings = [
        CoreSettings(
            pool=name,
            collector=f"{name}.sim:9618",
            discovery=DiscoverySection(interval=1.0, valid_for=2.0),
            flocking=FlockingSection(interval=1.0, withdraw_after=1.0, deliver_timeout=1e9),
        )
        for name in ("busy", "free")
    ]
    cores = [
        PoolCore(s, n, Policy.allow_all(), random.Random(0)) for s, n in zip(settings, nodes, strict=True)
    ]

    def transport(src: int, addr: str, msg: object, now: float) -> None:
        poolds.deliver(int(addr[1:]), msg, now)  # type: ignore[arg-type]

    def measure(src: int, peer: Peer, now: float) -> None:
        cores[src].overlay.rtt[peer.id] = 0.01

    poolds = SimulatedPoolDs(cores, ["n0", "n1"], ["busy.sim:9618", "free.sim:9618"], transport, measure)
    poolds.start(0.0)
    for now in (1.0, 2.0):
        poolds.read(0, load(free=0, idle=9), now)
        poolds.read(1, load(free=3, idle=0), now)
        poolds.fire(0, now)
        poolds.fire(1, now)
    assert poolds.targets == [[1], []]
    assert cores[0].authorized["free"].accepted and cores[1].flock_from == {"10.0.0.1", "cm.home.org"}
    assert cores[0].flocking.active == ["free.sim:9618"]


def test_max_rtt_keeps_far_pools_out_of_flock_to_even_when_they_are_all_that_is_willing() -> None:
    """With `max_rtt`, FLOCK_TO names only pools measured within it: the far pool of a nearer
    sublist is passed over, a pool alone in the willing list stays out when far, and an offer
    not yet measured waits for its probe."""
    c = core(max_pools=5, max_rtt=0.05)
    c.start(0.0)
    c.overlay.rtt.update({2: 0.09, 3: 0.03, 4: 0.04})
    c.on_message(offer("far", oid=2, row=0, valid=600.0), 1.0)  # row 0, yet beyond max_rtt
    c.on_message(offer("near", oid=3, row=1, valid=600.0), 1.0)
    c.on_message(offer("mid", oid=4, row=1, valid=600.0), 1.0)
    out = c.on_message(offer("new", oid=5, row=0, valid=600.0), 1.0)
    assert of(out, Measure) == [Measure(Peer(id=5, addr="10.0.0.5:7640"))]  # not measured yet
    out = round_at(c, 60.0, load(free=0, idle=5))
    assert [s.addr for s in sends(out, FlockIntent)] == ["10.0.0.3:7640", "10.0.0.4:7640"]
    for pool in ("near", "mid"):
        out = c.on_message(FlockReply(pool=pool, accepted=True, reason="ok"), 60.5)
    (action,) = of(out, SetFlockTo)
    assert action.collectors == ("near.example.org:9618", "mid.example.org:9618")
    c.on_flock_to_applied(FlockToApplied(action, applied=True, seen={}), 60.5)
    # The probe answers: "new" is near, so the next round adds it.
    c.overlay.rtt[5] = 0.01
    out = round_at(c, 120.0, load(free=0, idle=5))
    assert [s.addr for s in sends(out, FlockIntent)] == ["10.0.0.5:7640"]
    assert "far" in c.willing.entries  # still willing, only never flocked to


def test_max_rtt_with_only_far_pools_willing_leaves_flock_to_unset() -> None:
    c = core(max_rtt=0.05)
    c.start(0.0)
    c.overlay.rtt[2] = 0.2
    c.on_message(offer("far", oid=2, valid=600.0), 1.0)
    out = round_at(c, 60.0, load(free=0, idle=5))
    assert sends(out, FlockIntent) == [] and of(out, SetFlockTo) == []
    assert c.flocking.active == []
    # Without a bound the same pool is asked: the bound, not the offer, kept it out.
    c = core()
    c.start(0.0)
    c.overlay.rtt[2] = 0.2
    c.on_message(offer("far", oid=2, valid=600.0), 1.0)
    assert [s.addr for s in sends(round_at(c, 60.0, load(free=0, idle=5)), FlockIntent)] == ["10.0.0.2:7640"]

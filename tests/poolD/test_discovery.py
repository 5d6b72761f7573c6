"""Announcements, the willing list and the Flocking Manager's decisions, without I/O."""

from __future__ import annotations

import random

import pytest
from pydantic import ValidationError

from common.condor.types import PoolLoad, ScheddLoad
from common.overlay.messages import Peer
from common.overlay.node import OverlayNode, OverlayParams
from poolD.discovery import Discovery, DiscoverySettings
from poolD.flocking import FlockingManager, format_flock_to, parse_flock_to
from poolD.messages import Announcement
from poolD.policy import Policy, PolicyFile, Rule
from poolD.willing import WillingList


def load(free: int, idle: int, total: int = 3) -> PoolLoad:
    return PoolLoad(
        total_slots=total,
        free_slots=free,
        claimed_slots=total - free,
        schedds=[ScheddLoad(name="s", address=None, idle=idle, running=total - free, held=0)],
    )


def offer(
    pool: str,
    *,
    oid: int,
    free: int = 2,
    row: int = 0,
    seq: int = 1,
    ttl: int = 1,
    valid: float = 60.0,
    total: int = 10,
) -> Announcement:
    return Announcement(
        pool=pool,
        collector=f"{pool}.example.org:9618",
        origin=Peer(id=oid, addr=f"10.0.0.{oid}:7640"),
        seq=seq,
        free_slots=free,
        total_slots=total,
        queue_length=0,
        utilization=0.5,
        valid_for=valid,
        ttl=ttl,
        row=row,
    )


def node_with_rows() -> OverlayNode:
    """Our node (id 0x1...) knowing peers in rows 0 and 1."""
    node = OverlayNode(Peer(id=0x1 << 124, addr="10.0.0.1:7640"), OverlayParams(), random.Random(0))
    node.start(0.0)
    for oid, addr in [
        (0x5 << 124, "10.0.0.5:7640"),
        (0x9 << 124, "10.0.0.9:7640"),
        (0x13 << 120, "10.0.0.13:7640"),
    ]:
        node._consider(Peer(id=oid, addr=addr), 0.0, firsthand=True)
    node._flush()
    return node


def discovery(policy: Policy | None = None, ttl: int = 1) -> Discovery:
    return Discovery(
        DiscoverySettings(pool="home", collector="home.example.org:9618", ttl=ttl),
        node_with_rows(),
        policy or Policy.allow_all(),
        WillingList(random.Random(1)),
    )


def test_announces_to_every_row_only_with_free_slots() -> None:
    d = discovery(ttl=2)
    assert d.announce(load(free=0, idle=4), 1.0) == []
    sends = d.announce(load(free=2, idle=0), 1.0)
    assert sorted((addr, m.row) for addr, m in sends) == [
        ("10.0.0.13:7640", 1),
        ("10.0.0.5:7640", 0),
        ("10.0.0.9:7640", 0),
    ]
    assert all(m.ttl == 2 and m.free_slots == 2 and m.pool == "home" for _, m in sends)


def test_policy_filters_announcements_by_host() -> None:
    policy = Policy(PolicyFile(default="allow", rule=[Rule(action="deny", networks=["10.0.0.9/32"])]))
    d = discovery(policy)
    assert {addr for addr, _ in d.announce(load(free=1, idle=0), 1.0)} == {"10.0.0.5:7640", "10.0.0.13:7640"}
    assert any("not announcing to 10.0.0.9:7640" in line for line in d.decisions)


def test_offers_fill_the_willing_list_and_forward_while_ttl_lasts() -> None:
    d = discovery(ttl=3)
    assert d.on_announcement(offer("far", oid=7, ttl=1, row=0), 0.0) == []  # ttl 1: not forwarded
    forwards = d.on_announcement(offer("near", oid=8, ttl=3, row=0), 0.0)
    assert {addr for addr, _ in forwards} == {"10.0.0.5:7640", "10.0.0.9:7640"}
    assert all(m.ttl == 2 and m.pool == "near" for _, m in forwards)
    assert set(d.willing.entries) == {"far", "near"}
    assert d.on_announcement(offer("near", oid=8, ttl=3, row=0), 0.0) == []  # duplicate
    assert d.dropped["duplicate"] == 1


def test_an_offer_travels_no_farther_than_our_own_ttl() -> None:
    """poolD review, finding 7: receivers forwarded an offer while the sender's ttl lasted (up
    to 32), so one signed datagram of a lying pool went along row after row past the
    federation's [discovery] ttl. Our own ttl caps it (and the cap is counted)."""
    d = discovery(ttl=1)
    assert d.on_announcement(offer("liar", oid=8, ttl=32, row=0), 0.0) == []
    assert d.dropped["ttl_capped"] == 1 and "liar" in d.willing.entries  # the offer itself stands
    d = discovery(ttl=2)
    forwards = d.on_announcement(offer("liar", oid=8, ttl=32, row=0), 0.0)
    assert forwards and all(m.ttl == 1 for _, m in forwards)


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [({"free": 50, "total": 10}, "absurd"), ({"valid": 80_000.0}, "absurd")],
)
def test_absurd_offers_are_dropped_and_counted(kwargs: dict, reason: str) -> None:
    d = discovery()
    assert d.on_announcement(offer("liar", oid=9, **kwargs), 0.0) == []
    assert d.dropped[reason] == 1 and not d.willing.entries


@pytest.mark.parametrize(
    "field", [{"free_slots": -1}, {"free_slots": 10**9}, {"valid_for": 10**7}, {"pool": "a b"}]
)
def test_impossible_offers_fail_validation(field: dict) -> None:
    good = offer("ok", oid=3).model_dump()
    with pytest.raises(ValidationError):
        Announcement.model_validate(good | field)


def test_policy_refuses_offers_and_says_why() -> None:
    d = discovery(Policy(PolicyFile(default="allow", rule=[Rule(action="deny", pools=["bad*"])])))
    d.on_announcement(offer("bad-pool", oid=4), 0.0)
    assert d.dropped["policy"] == 1 and "bad-pool" not in d.willing.entries
    assert "refused offer of bad-pool" in d.decisions[-1] and "rule 1" in d.decisions[-1]


def test_willing_list_order_expiry_and_tiebreak() -> None:
    w = WillingList(random.Random(3), resolution=0.005)
    w.offer(offer("row1-near", oid=1, row=1), 0.0)
    w.offer(offer("row0-far", oid=2, row=0), 0.0)
    w.offer(offer("row0-near-few", oid=3, row=0, free=1), 0.0)
    w.offer(offer("row0-near-many", oid=4, row=0, free=5), 0.0)
    w.offer(offer("row0-unmeasured", oid=5, row=0), 0.0)
    w.offer(offer("short", oid=6, row=0, valid=5.0), 0.0)
    rtt = {1: 0.001, 2: 0.080, 3: 0.0101, 4: 0.0102, 6: 0.0}.get
    order = [e.pool for e in w.ordered(1.0, rtt)]
    assert order == ["short", "row0-near-many", "row0-near-few", "row0-far", "row0-unmeasured", "row1-near"]
    assert "short" not in [e.pool for e in w.ordered(5.0, rtt)]  # expired


def test_equal_proximity_order_is_random_across_pools_but_stable_in_one() -> None:
    """Different pools order the same equally near offers differently (no pile-on), while one
    pool's order stays put as offers refresh (no FLOCK_TO churn)."""
    orders = set()
    for seed in range(20):
        w = WillingList(random.Random(seed))
        seen = set()
        for round_ in range(5):
            for oid, pool in enumerate(["a", "b", "c"], 1):
                w.offer(offer(pool, oid=oid, seq=round_), float(round_))
            seen.add(tuple(e.pool for e in w.ordered(float(round_), lambda _: 0.010)))
        assert len(seen) == 1
        orders |= seen
    assert len(orders) > 1


def test_flocking_manager_flocks_keeps_and_withdraws() -> None:
    fm = FlockingManager(max_pools=2, withdraw_after=30.0)
    w = WillingList(random.Random(0))
    for oid, pool in enumerate(["a", "b", "c"], 1):
        w.offer(offer(pool, oid=oid), 0.0)
    entries = w.ordered(0.0, {1: 0.01, 2: 0.02, 3: 0.03}.get)
    decision = fm.decide(load(free=0, idle=5), entries, 0.0)
    assert decision.flock_to == ["a.example.org:9618", "b.example.org:9618"]
    assert decision.flock_to is not None and fm.changes(decision.flock_to)
    fm.active = decision.flock_to
    assert not fm.changes(["b.example.org:9618", "a.example.org:9618"])  # same pools, new order
    assert fm.changes(["a.example.org:9618"])  # b dropped out of the willing list: dropped (issue 18)
    assert fm.changes(["c.example.org:9618", "a.example.org:9618"])  # a new pool
    assert fm.decide(load(free=0, idle=5), [], 1.0).flock_to is None  # nobody willing: leave it
    assert fm.decide(load(free=1, idle=1), entries, 2.0).flock_to is None  # balanced: keep
    assert fm.decide(load(free=2, idle=0), entries, 10.0).flock_to is None  # quiet, not long enough
    withdraw = fm.decide(load(free=2, idle=0), entries, 40.0)
    assert withdraw.flock_to == [] and "no idle jobs" in withdraw.reason
    assert parse_flock_to(format_flock_to(decision.flock_to)) == decision.flock_to
    assert parse_flock_to(None) == [] and parse_flock_to("a:1 b:2,c:3") == ["a:1", "b:2", "c:3"]


def test_remembered_row_targets_follow_table_pool_names_policy_and_blacklist() -> None:
    """Announcement targets are remembered per row; each thing they depend on must refresh them."""
    deny_lab = PolicyFile(default="allow", rule=[Rule(action="deny", pools=["lab"])])
    d = discovery(Policy(deny_lab))

    def targets(now: float) -> set[str]:
        return {addr for addr, _ in d.announce(load(free=1, idle=0), now)}

    everyone = {"10.0.0.5:7640", "10.0.0.9:7640", "10.0.0.13:7640"}
    assert targets(1.0) == everyone
    # A peer's pool name becomes known (from its own offer) and a rule denies that pool.
    d.on_announcement(offer("lab", oid=0x9 << 124), 2.0)
    assert targets(3.0) == everyone - {"10.0.0.9:7640"}
    # A new peer enters the routing table.
    d.overlay._consider(Peer(id=0x17 << 120, addr="10.0.0.17:7640"), 4.0, firsthand=True)
    d.overlay._flush()
    assert targets(5.0) == (everyone - {"10.0.0.9:7640"}) | {"10.0.0.17:7640"}
    # A reloaded policy (a new Policy object, as SIGHUP installs) applies at once.
    d.policy = Policy.allow_all()
    assert targets(6.0) == everyone | {"10.0.0.17:7640"}
    # A blacklisted pool is skipped until its entry expires.
    d.on_announcement(offer("lab", oid=0x9 << 124, seq=2), 6.5)
    d.policy.add_to_blacklist("lab", until=10.0, reason="offered slots, ran nothing")
    assert targets(7.0) == (everyone | {"10.0.0.17:7640"}) - {"10.0.0.9:7640"}
    assert targets(11.0) == everyone | {"10.0.0.17:7640"}


def test_willing_list_within_a_round_trip_drops_far_and_unmeasured_pools_keeping_the_order() -> None:
    w = WillingList(random.Random(3), resolution=0.005)
    w.offer(offer("row1-near", oid=1, row=1), 0.0)
    w.offer(offer("row0-far", oid=2, row=0), 0.0)
    w.offer(offer("row0-near", oid=3, row=0), 0.0)
    w.offer(offer("row0-unmeasured", oid=5, row=0), 0.0)
    w.offer(offer("row1-edge", oid=6, row=1), 0.0)
    rtt = {1: 0.001, 2: 0.080, 3: 0.0101, 6: 0.050}.get
    assert [e.pool for e in w.ordered(1.0, rtt, within=0.05)] == ["row0-near", "row1-near", "row1-edge"]
    assert [e.pool for e in w.ordered(1.0, rtt)] == [
        "row0-near", "row0-far", "row0-unmeasured", "row1-near", "row1-edge"
    ]  # fmt: skip
    assert set(w.entries) == {"row1-near", "row0-far", "row0-near", "row0-unmeasured", "row1-edge"}

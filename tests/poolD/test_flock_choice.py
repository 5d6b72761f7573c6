"""The Flocking Manager's choice of FLOCK_TO among the willing pools (issue 18, item 5): the
nearest pools that can take the queue, a farther one only when the nearer cannot, and a pool
that left the willing list dropped. Pure: no overlay, no I/O."""

from __future__ import annotations

import random

from common.condor.types import PoolLoad, ScheddLoad
from common.overlay.messages import Peer
from poolD.flocking import FlockingManager, choose_nearest_covering
from poolD.willing import WillingEntry


def entry(pool: str, free: int) -> WillingEntry:
    return WillingEntry(
        pool=pool,
        collector=f"{pool}.example.org:9618",
        origin=Peer(id=hash(pool) & 0xFFFF, addr=f"{pool}:7640"),
        row=0,
        free_slots=free,
        total_slots=50,
        queue_length=0,
        utilization=0.5,
        expires_at=100.0,
        tiebreak=0.0,
    )


def load(free: int, idle: int, total: int = 10) -> PoolLoad:
    schedd = ScheddLoad(name="s", address=None, idle=idle, running=total - free, held=0)
    return PoolLoad(total_slots=total, free_slots=free, claimed_slots=total - free, schedds=[schedd])


def pools(chosen: list[WillingEntry]) -> list[str]:
    return [e.pool for e in chosen]


def test_the_nearest_pools_that_take_the_queue_and_no_farther_one() -> None:
    willing = [entry("a", 3), entry("b", 4), entry("c", 50), entry("d", 50)]  # nearest first
    assert pools(choose_nearest_covering(willing, 2, max_pools=5)) == ["a"]
    assert pools(choose_nearest_covering(willing, 7, max_pools=5)) == ["a", "b"]
    assert pools(choose_nearest_covering(willing, 8, max_pools=5)) == ["a", "b", "c"]
    assert choose_nearest_covering(willing, 0, max_pools=5) == []
    assert choose_nearest_covering([], 9, max_pools=5) == []


def test_a_farther_pool_replaces_a_nearer_one_that_offers_fewer_slots_only_when_the_cap_binds() -> None:
    """Five near pools with a slot each cannot take 20 jobs; the sixth, farther, offers 30: it
    takes the place of the farthest of those that offer least, and FLOCK_TO stays nearest first."""
    willing = [entry(p, 1) for p in "abcde"] + [entry("f", 30), entry("g", 40)]
    assert pools(choose_nearest_covering(willing, 20, max_pools=5)) == ["a", "b", "c", "d", "f"]
    # Under the cap nothing is replaced: more pools, each near.
    assert pools(choose_nearest_covering(willing, 20, max_pools=7)) == ["a", "b", "c", "d", "e", "f"]
    # When nothing covers the queue: the pools offering most, nearest first among equals.
    big = [entry("a", 2), entry("b", 9), entry("c", 1), entry("d", 9)]
    assert pools(choose_nearest_covering(big, 100, max_pools=2)) == ["b", "d"]


def test_choice_is_a_subset_of_the_willing_list_in_its_order_and_within_the_cap() -> None:
    rng = random.Random(7)
    for _ in range(500):
        willing = [entry(f"p{i}", rng.randint(0, 30)) for i in range(rng.randint(0, 12))]
        demand, cap = rng.randint(1, 120), rng.randint(1, 6)
        chosen = choose_nearest_covering(willing, demand, max_pools=cap)
        assert len(chosen) <= cap and (chosen or not willing)
        index = [willing.index(e) for e in chosen]
        assert index == sorted(index)
        covered = sum(e.free_slots for e in chosen) >= demand
        # Covered with a prefix of the list, or else the best the cap allows from all of it.
        best = sum(sorted((e.free_slots for e in willing), reverse=True)[:cap])
        assert covered or sum(e.free_slots for e in chosen) == best
        if covered:  # no pool beyond the covering prefix is named
            prefix = max(index) + 1
            top = sorted((e.free_slots for e in willing[: prefix - 1]), reverse=True)[:cap]
            assert sum(top) < demand


def test_the_manager_flocks_to_the_covering_pools_and_drops_a_pool_that_left_the_willing_list() -> None:
    fm = FlockingManager(max_pools=5, withdraw_after=30.0)
    willing = [entry("a", 2), entry("b", 2), entry("c", 9)]
    decision = fm.decide(load(free=0, idle=3), willing, 0.0)
    assert decision.flock_to == ["a.example.org:9618", "b.example.org:9618"]
    fm.active = decision.flock_to
    # b is full now (its offer is gone): FLOCK_TO no longer names it.
    decision = fm.decide(load(free=0, idle=3), [willing[0], willing[2]], 1.0)
    assert decision.flock_to == ["a.example.org:9618", "c.example.org:9618"]
    assert fm.changes(decision.flock_to)
    fm.active = decision.flock_to
    assert fm.changes(["a.example.org:9618"])  # c left: dropped, not kept until another appears
    assert not fm.changes(["c.example.org:9618", "a.example.org:9618"])  # same pools, new order

"""The Flocking Manager's choice of FLOCK_TO among the willing pools (issue 18, item 5): the
nearest pools that can take the queue, a farther one only when the nearer cannot, and a pool
that left the willing list dropped. Pure: no overlay, no I/O."""

from __future__ import annotations

import random

from common.condor.types import PoolLoad, ScheddLoad
from common.overlay.messages import Peer
from poolD.flocking import FlockingManager, choose_flock_to
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


def test_the_nearest_pools_while_they_can_take_the_queue() -> None:
    willing = [entry("a", 3), entry("b", 4), entry("c", 50), entry("d", 50)]  # nearest first
    assert pools(choose_flock_to(willing, 2, max_pools=2)) == ["a", "b"]  # c and d not named
    assert pools(choose_flock_to(willing, 7, max_pools=2)) == ["a", "b"]
    # a and b cannot take 8 jobs: c takes the place of a, which offers fewest; d stays out.
    assert pools(choose_flock_to(willing, 8, max_pools=2)) == ["b", "c"]
    assert pools(choose_flock_to(willing, 2, max_pools=5)) == ["a", "b", "c", "d"]  # room for all
    assert choose_flock_to(willing, 0, max_pools=5) == []
    assert choose_flock_to([], 9, max_pools=5) == []


def test_a_farther_pool_replaces_a_nearer_one_that_offers_fewer_slots_only_when_the_cap_binds() -> None:
    """Five near pools with a slot each cannot take 20 jobs; the sixth, farther, offers 30: it
    takes the place of the farthest of those that offer least, and FLOCK_TO stays nearest first."""
    willing = [entry(p, 1) for p in "abcde"] + [entry("f", 30), entry("g", 40)]
    assert pools(choose_flock_to(willing, 20, max_pools=5)) == ["a", "b", "c", "d", "f"]
    # Under the cap nothing is replaced: every pool, nearest first.
    assert pools(choose_flock_to(willing, 20, max_pools=7)) == list("abcdefg")
    # When some covers the queue: the pools offering most, the nearer first among equals.
    big = [entry("a", 2), entry("b", 9), entry("c", 1), entry("d", 9)]
    assert pools(choose_flock_to(big, 18, max_pools=2)) == ["b", "d"]


def test_when_no_pools_together_can_take_the_queue_the_nearest() -> None:
    """A queue that the best `max_pools` offers cannot absorb either: FLOCK_TO names the nearest,
    not the largest offers however far, which every badly overloaded pool hearing them would
    name too (issue 18, item 5: the longest wait rose with that rule)."""
    big = [entry("a", 2), entry("b", 9), entry("c", 1), entry("d", 9)]
    assert pools(choose_flock_to(big, 19, max_pools=2)) == ["a", "b"]
    assert pools(choose_flock_to(big, 100, max_pools=2)) == ["a", "b"]
    assert pools(choose_flock_to(big, 100, max_pools=5)) == ["a", "b", "c", "d"]
    fm = FlockingManager(max_pools=2)
    decision = fm.decide(load(free=0, idle=500), big, 0.0)
    assert decision.flock_to == ["a.example.org:9618", "b.example.org:9618"]


def test_choice_properties_on_random_willing_lists() -> None:
    """In the willing list's order, as many pools as the cap allows; exactly the nearest when they
    can take the queue, or when no `cap` of them can; otherwise as many free slots as the queue needs."""
    rng = random.Random(7)
    for _ in range(1000):
        willing = [entry(f"p{i}", rng.randint(0, 30)) for i in range(rng.randint(0, 12))]
        demand, cap = rng.randint(1, 120), rng.randint(1, 6)
        chosen = choose_flock_to(willing, demand, max_pools=cap)
        assert len(chosen) == min(cap, len(willing))
        index = [willing.index(e) for e in chosen]
        assert index == sorted(index)
        if sum(e.free_slots for e in willing[:cap]) >= demand:
            assert chosen == willing[:cap]
        best = sum(sorted((e.free_slots for e in willing), reverse=True)[:cap])
        if best < demand:
            assert chosen == willing[:cap]
        else:
            assert sum(e.free_slots for e in chosen) >= demand


def test_the_manager_flocks_to_the_chosen_pools_and_drops_a_pool_that_left_the_willing_list() -> None:
    fm = FlockingManager(max_pools=2, withdraw_after=30.0)
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

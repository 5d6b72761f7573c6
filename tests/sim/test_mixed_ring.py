"""Rolling upgrades on the simulator (sim.mixed_ring): nodes of the version before 2026-11-27
(3715ee6: its strict decoding, from a frozen copy of its wire models) and of this one in one
ring. Before capabilities, old nodes dropped every hello, join info, leaf-set and row message
of the new ones (a static 60/40 mix of 100 nodes, seeds 1-3: 19-25 old nodes never joined, every
leaf set was wrong, 16-42 % of lookups reached their root:
docs/bench/overlay-h18compat-sim-mixed.jsonl)."""

from __future__ import annotations

import pytest

from sim.mixed_ring import MixedRing, rolling_upgrade

ANNOUNCING_JOIN = "join: invalid"  # a new joiner's first request, at an old bootstrap (then retried)


def _only_announcing_joins_dropped(ring: MixedRing) -> None:
    assert set(ring.counts.legacy_drops) <= {ANNOUNCING_JOIN}, ring.counts.legacy_drops


@pytest.fixture(scope="module")
def mixed() -> MixedRing:
    """64 nodes joining one by one, every third one old (so old and new bootstraps, both ways)."""
    ring = MixedRing(64, seed=5, old={i for i in range(64) if i % 3 == 1})
    ring.net.run_until(64 * 0.5 + 240)
    return ring


def test_a_mixed_ring_converges_and_routes_every_lookup_to_its_root(mixed: MixedRing) -> None:
    assert len(mixed.net.alive()) == 64
    assert mixed.wrong_leaf_sets() == 0
    assert mixed.lookups(500) == (500, 500)
    assert mixed.table_stretch() < 1.1  # proximity: tables hold (nearly) the nearest candidates


def test_in_a_mixed_ring_nobody_is_declared_dead_and_old_nodes_take_what_new_ones_send(
    mixed: MixedRing,
) -> None:
    assert mixed.counts.false_deaths == []
    _only_announcing_joins_dropped(mixed)
    assert {"hello", "join_info", "leaf_set", "leaf_req", "row", "row_req", "pong"} <= set(
        mixed.counts.legacy_delivered
    )


def test_a_rolling_upgrade_and_a_rollback_keep_routing_and_declare_no_live_node_dead() -> None:
    """A ring of old nodes only, each restarted as a new one in turn (down 5 s, 20 s apart, 100
    lookups after each restart), as the README tells admins to upgrade; then three of them
    restarted as old ones again."""
    ring = MixedRing(48, seed=6, old=set(range(48)))
    ring.net.run_until(48 * 0.5 + 240)
    assert ring.wrong_leaf_sets() == 0
    during = rolling_upgrade(ring, lookups=100)["lookups_during"]
    assert during == [48 * 100, 48 * 100]
    assert ring.old == set()
    ring.net.run_until(ring.net.now + 240)
    assert ring.counts.false_deaths == []
    _only_announcing_joins_dropped(ring)
    assert ring.wrong_leaf_sets() == 0
    assert ring.lookups(500) == (500, 500)
    # Rolled back: nodes that knew these as new learn otherwise from their first ping or pong.
    back = rolling_upgrade(ring, lookups=100, nodes=[3, 17, 30], to_old=True)["lookups_during"]
    assert back == [300, 300]
    ring.net.run_until(ring.net.now + 240)
    assert ring.counts.false_deaths == []
    assert ring.wrong_leaf_sets() == 0
    assert ring.lookups(500) == (500, 500)
    _only_announcing_joins_dropped(ring)

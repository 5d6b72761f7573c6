"""A node rejoins through a bootstrap whose routing-table slot towards its id holds a node that
just crashed (sim.mixed_ring, virtual time). Before join requests were acked hop by hop, the
bootstrap forwarded each of the joiner's retries to the dead node, which nobody probed: the
joiner never joined (docs/bench/overlay_crash_midupgrade.py 60 1, node 7; with no old node as
well). Now the silent hop is routed around at once (a hop that acks joins) or probed and
declared dead, so that a later retry goes around it (an older hop). Behind an older bootstrap,
which does neither, the joiner's later retries go to other nodes that answered it
(OverlayNode._join_target)."""

from __future__ import annotations

import pytest

from sim.mixed_ring import MixedRing

NODES = 40
ODD = frozenset(range(1, NODES, 2))


@pytest.mark.parametrize(
    ("old", "dead_old", "joiner_old", "bootstrap_old"),
    [
        (frozenset(), None, False, False),
        (frozenset(), None, True, False),
        (ODD, True, None, False),
        (ODD, None, False, True),
    ],
    ids=["all-current", "joiner-old", "dead-hop-old", "bootstrap-old"],
)
def test_a_node_rejoins_past_a_crashed_table_entry_of_its_bootstrap(
    old: frozenset[int], dead_old: bool | None, joiner_old: bool | None, bootstrap_old: bool
) -> None:
    """In a ring of this version, with the joiner of this version or of the one before
    capabilities (a rollback: acked by the hops all the same); in a mixed ring where the
    crashed hop is of the old version (probed, then routed around by the joiner's next retry);
    and behind an old bootstrap, which forwards every request to the crashed hop without
    probing it (an old node never probes an entry it only forwards joins to): the joiner's
    later retries go to the node nearest its id that answered, whose route avoids it."""
    ring = MixedRing(NODES, seed=2, old=set(old))
    net = ring.net
    net.run_until(NODES * 0.5 + 240)
    joiner, bootstrap, dead = ring.stale_slots(dead_old=dead_old, bootstrap_old=bootstrap_old)[0]
    net.crash(dead)
    net.crash(joiner)
    net.run_until(net.now + 5)
    ring.start(
        joiner, old=joiner in old if joiner_old is None else joiner_old, bootstrap=bootstrap, at=net.now
    )
    net.run_until(net.now + 60)  # twelve join retries
    assert net.nodes[joiner].core.joined
    net.run_until(net.now + 120)
    assert ring.wrong_leaf_sets() == 0
    assert ring.lookups(200) == (200, 200)

"""A node rejoins through a bootstrap whose routing-table slot towards its id holds a node that
just crashed (sim.mixed_ring, virtual time). Before join requests were acked hop by hop, the
bootstrap forwarded each of the joiner's retries to the dead node, which nobody probed: the
joiner never joined (docs/bench/overlay_crash_midupgrade.py 60 1, node 7; with no old node as
well). Now the silent hop is routed around at once (a hop that acks joins) or probed and
declared dead, so that a later retry goes around it (an older hop)."""

from __future__ import annotations

import pytest

from sim.mixed_ring import MixedRing

NODES = 40


def _stale_slot(ring: MixedRing, *, dead_old: bool | None) -> tuple[int, int, int]:
    """(joiner, bootstrap, dead hop): a live bootstrap of this version whose next hop towards the
    joiner's id is a routing-table entry outside its leaf set (old or not, as asked)."""
    nodes = ring.net.nodes
    for bootstrap in range(NODES):
        if bootstrap in ring.old:
            continue
        core = nodes[bootstrap].core
        for joiner in range(NODES):
            key = ring.ids[joiner]
            hop = core.next_hop(key, exclude=(key,))
            if hop is None or joiner == bootstrap or hop.id in core.leaf or not core.table.contains(hop.id):
                continue
            dead = int(hop.addr[1:])
            if dead != joiner and (dead_old is None or (dead in ring.old) == dead_old):
                return joiner, bootstrap, dead
    raise AssertionError("no bootstrap routes through a table entry")


ODD = frozenset(range(1, NODES, 2))


@pytest.mark.parametrize(
    ("old", "dead_old", "joiner_old"),
    [(frozenset(), None, False), (frozenset(), None, True), (ODD, True, None)],
    ids=["all-current", "joiner-old", "dead-hop-old"],
)
def test_a_node_rejoins_past_a_crashed_table_entry_of_its_bootstrap(
    old: frozenset[int], dead_old: bool | None, joiner_old: bool | None
) -> None:
    """In a ring of this version, with the joiner of this version or of the one before
    capabilities (a rollback: acked by the hops all the same), and in a mixed ring where the
    crashed hop is of the old version (probed, then routed around by the joiner's next retry).
    Not covered: a crashed hop behind old forwarders, which route to it as before (an old node
    never probes an entry it only forwards joins to): that lasts until they are upgraded."""
    ring = MixedRing(NODES, seed=2, old=set(old))
    net = ring.net
    net.run_until(NODES * 0.5 + 240)
    joiner, bootstrap, dead = _stale_slot(ring, dead_old=dead_old)
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

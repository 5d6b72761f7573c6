"""Joins behind a bootstrap of the version before join acks whose next hop towards the joiner's
id just crashed (sim.mixed_ring, virtual time): for each seed, a 40-node ring with every odd
node old settles, then up to CASES such (joiner, bootstrap, hop) triples are each tried from a
fresh copy of that ring: the hop and the joiner crash, the joiner restarts 5 s later through the
bootstrap. Prints one JSON line per seed: the seconds each restarted joiner took to join (null:
not within LIMIT s), wrong leaf sets and lookups 120 s later. Usage (from the tree whose core is
measured; sim/mixed_ring.py needs MixedRing.stale_slots):

    PYTHONPATH=<tree> .venv/bin/python docs/bench/overlay_join_old_bootstrap.py SEEDS...
"""

from __future__ import annotations

import json
import sys

from sim.mixed_ring import MixedRing

NODES, CASES, LIMIT = 40, 6, 300.0


def one(seed: int, case: int) -> dict[str, object] | None:
    ring = MixedRing(NODES, seed=seed, old=set(range(1, NODES, 2)))
    net = ring.net
    net.run_until(NODES * 0.5 + 240)
    slots = ring.stale_slots(bootstrap_old=True)
    # one case per joiner, so that the cases differ
    picked = list({joiner: (joiner, b, d) for joiner, b, d in slots}.values())
    if case >= len(picked):
        return None
    joiner, bootstrap, dead = picked[case]
    net.crash(dead)
    net.crash(joiner)
    net.run_until(net.now + 5)
    start = net.now
    ring.start(joiner, old=False, bootstrap=bootstrap, at=start)
    took = None
    while net.now - start < LIMIT:
        net.run_until(net.now + 1.0)
        if net.nodes[joiner].core.joined:
            took = round(net.now - start, 1)
            break
    net.run_until(net.now + 120)
    return {"joiner": joiner, "join_s": took, "wrong_leaf_sets": ring.wrong_leaf_sets(),
            "lookups": ring.lookups(200)}  # fmt: skip


def main() -> None:
    for seed in map(int, sys.argv[1:]):
        cases = [c for c in (one(seed, k) for k in range(CASES)) if c is not None]
        print(json.dumps({"seed": seed, "cases": cases}), flush=True)


if __name__ == "__main__":
    main()

"""A whole ring (re)started at once, through one bootstrap or a list of seeds (virtual time).

NODES nodes start over SPREAD seconds on the transit-stub topology, each through:
- `one-dead`:   node 0 as its one bootstrap (the advice before seeds: the same address in every
                file), node 0 down for the whole run (a central manager being repaired);
- `seeds-dead`: seeds [0, 1, 2] in every file (the seeds' own included), node 0 down;
- `one`:        node 0 as its one bootstrap, node 0 up (it founds the ring);
- `seeds`:      seeds [0, 1, 2], all up.
Prints one JSON line per (case, seed, loss): nodes joined within LIMIT s, join times (median,
max), wrong leaf sets and lookups (of 1,000) at the end. Usage:

    PYTHONPATH=. .venv/bin/python docs/bench/overlay_seeds.py SEEDS...
"""

from __future__ import annotations

import json
import random
import statistics
import sys

from common.overlay.messages import AppMessage, app_message
from common.overlay.node import Delivered, Event, Joined
from sim.network import SimNetwork
from sim.overlay_experiment import leaf_set_is_exact
from sim.topology import Placement, transit_stub

NODES, SPREAD, LIMIT = 150, 15.0, 300.0
CASES = {
    "one-dead": (0, True),
    "seeds-dead": ([0, 1, 2], True),
    "one": (0, False),
    "seeds": ([0, 1, 2], False),
}


@app_message
class Lookup(AppMessage):
    TYPE = "bench.seeds.lookup"
    n: int


def run(case: str, seed: int, loss: float) -> dict[str, object]:
    bootstrap, first_down = CASES[case]
    rng = random.Random(seed)
    joined: dict[int, float] = {}
    delivered: dict[int, int] = {}

    def on_event(index: int, event: Event, now: float) -> None:
        if isinstance(event, Joined):
            joined.setdefault(index, now)
        elif isinstance(event, Delivered) and isinstance(event.payload, Lookup):
            delivered[event.payload.n] = index

    latency = Placement(transit_stub(seed), NODES, seed).latency
    net = SimNetwork(latency, seed=seed, loss=loss, on_event=on_event)
    starts = {}
    for i in range(NODES):
        node_id = rng.getrandbits(128)
        if i == 0 and first_down:
            continue
        starts[i] = rng.uniform(0.0, SPREAD)
        net.add_node(i, node_id, bootstrap=None if bootstrap == i else bootstrap, at=starts[i])
    net.run_until(LIMIT)
    took = sorted(joined[i] - starts[i] for i in joined)
    live = [n for n in net.alive() if n.core.joined]
    ids = sorted(n.node_id for n in live)
    wrong = sum(1 for n in live if not leaf_set_is_exact(n.core, ids, n.core.leaf.half))
    correct = 0
    if live:
        oracle, sources = net.root_oracle(), [n.index for n in live]
        expected = {}
        for k in range(1000):
            key = rng.getrandbits(128)
            expected[k] = oracle.root(key)
            net.route(rng.choice(sources), key, Lookup(n=k))
        net.run_until(net.now + 30)
        correct = sum(1 for k, root in expected.items() if delivered.get(k) == root)
    return {
        "case": case, "seed": seed, "loss": loss, "started": len(starts), "joined": len(joined),
        "join_s_median": round(statistics.median(took), 2) if took else None,
        "join_s_max": round(took[-1], 2) if took else None,
        "wrong_leaf_sets": wrong, "lookups": correct,
    }  # fmt: skip


def main() -> None:
    for seed in [int(a) for a in sys.argv[1:]] or [1]:
        for loss in (0.0, 0.05):
            for case in CASES:
                print(json.dumps(run(case, seed, loss)), flush=True)


if __name__ == "__main__":
    main()

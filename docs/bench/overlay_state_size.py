"""How much state each simulated overlay node holds after the join: the memory side of issue 18's
100,000-node target.

    .venv/bin/python docs/bench/overlay_state_size.py --nodes 3000 [--after 60]

Joins `--nodes` nodes as `poold simulate overlay` does (seed 1, one every 0.05 s), runs `--after`
virtual seconds more, and prints per-node sizes of the core's maps (mean and max) and the peak RSS.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics

from sim.overlay_experiment import ExperimentConfig, OverlayExperiment


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--after", type=float, default=60.0)
    parser.add_argument("--join-interval", type=float, default=0.05)
    a = parser.parse_args()
    config = ExperimentConfig(nodes=a.nodes, join_interval=a.join_interval)
    experiment = OverlayExperiment(config)
    net = experiment.net
    for i in range(a.nodes):
        bootstrap = None if i == 0 else experiment.rng.randrange(i)
        net.add_node(i, experiment.rng.getrandbits(128), bootstrap=bootstrap, at=i * a.join_interval)
    net.run_until(a.nodes * a.join_interval + 30 + a.after)
    cores = [n.core for n in net.nodes.values()]

    def spread(sizes: list[int]) -> dict[str, float]:
        return {"mean": round(statistics.fmean(sizes), 1), "max": max(sizes)}

    print(json.dumps({
        "nodes": a.nodes,
        "sim_seconds": net.now,
        "rtt_entries": spread([len(c.rtt) for c in cores]),
        "last_heard_entries": spread([len(c.last_heard) for c in cores]),
        "table_entries": spread([len(c.table.entries()) for c in cores]),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
    }))  # fmt: skip


if __name__ == "__main__":
    main()

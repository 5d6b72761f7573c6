"""`poold simulate overlay` with some of the core's module constants changed: to see what a
tuning constant buys (evaluation only; the product's values are the module's).

    PYTHONPATH=. .venv/bin/python docs/bench/overlay_with_constants.py NODES JOIN_INTERVAL [NAME=VALUE ...]

e.g. `... 5000 0.05 RING_GROWTH=2.0`. Settle 120 s, steady 120 s (as docs/bench/overlay.sh's
10,000-node runs); prints one JSON line: CPU seconds, messages, stretch, hops, lookups, detection,
join and maintenance messages per node, messages by type, trace digest.
"""

from __future__ import annotations

import json
import sys
import time

import common.overlay.node as node
from sim.overlay_experiment import ExperimentConfig, OverlayExperiment


def main() -> None:
    nodes, interval = int(sys.argv[1]), float(sys.argv[2])
    for setting in sys.argv[3:]:
        name, _, value = setting.partition("=")
        setattr(node, name, type(getattr(node, name))(float(value)))
    config = ExperimentConfig(
        nodes=nodes, join_interval=interval, settle_seconds=120, steady_seconds=120, repair_seconds=180
    )
    cpu = time.process_time()
    r = OverlayExperiment(config).run()
    cpu = time.process_time() - cpu
    messages = sum(r["messages_by_type"].values())
    print(json.dumps({
        "nodes": nodes, "join_interval": interval, "constants": sys.argv[3:], "cpu_s": round(cpu, 1),
        "messages": messages, "rdp_mean": round(r["rdp_mean"], 4), "rdp_p99": round(r["rdp_p99"], 3),
        "hops_mean": r["hops_mean"], "lookup_success": r["lookup_success"],
        "detect_median_s": round(r["detect_median_s"], 1), "detect_p99_s": round(r["detect_p99_s"], 1),
        "join_msgs_per_node": round(r["join_msgs_per_node"]),
        "maintenance_msgs_per_node_per_min": round(r["maintenance_msgs_per_node_per_min"], 1),
        "messages_by_type": r["messages_by_type"], "trace_digest": r["trace_digest"],
    }))  # fmt: skip


if __name__ == "__main__":
    main()

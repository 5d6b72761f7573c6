"""CPU seconds per simulated message of a short overlay run: to compare two trees side by side.

    PYTHONPATH=<tree> .venv/bin/python docs/bench/overlay_cpu.py NODES [CHURN]

Joins NODES nodes 20 a second, then 30 s settle, 30 s steady, 1,000 lookups, (churn and 30 s of
repair), 5 timed crashes; prints one JSON line: CPU seconds of the run alone (no imports, no
topology), wall, messages, microseconds of CPU per message, the trace digest (equal digests:
the same run) and peak RSS. On a shared machine CPU seconds move with the load: start the two
trees' runs together and compare those.
"""

from __future__ import annotations

import json
import resource
import sys
import time

from sim.overlay_experiment import ExperimentConfig, OverlayExperiment


def main() -> None:
    nodes = int(sys.argv[1])
    churn = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    config = ExperimentConfig(
        nodes=nodes, join_interval=0.05, settle_seconds=30, steady_seconds=30, repair_seconds=30,
        lookups=1000, detect_samples=5, churn=churn,
    )  # fmt: skip
    experiment = OverlayExperiment(config)
    cpu, wall = time.process_time(), time.perf_counter()
    result = experiment.run()
    cpu = time.process_time() - cpu
    messages = sum(result["messages_by_type"].values())
    print(json.dumps({
        "nodes": nodes, "churn": churn, "cpu_s": round(cpu, 2),
        "wall_s": round(time.perf_counter() - wall, 1), "messages": messages,
        "us_per_message": round(cpu / messages * 1e6, 2), "trace_digest": result["trace_digest"],
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
    }))  # fmt: skip


if __name__ == "__main__":
    main()

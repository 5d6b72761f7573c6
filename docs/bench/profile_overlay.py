"""Profile `poold simulate overlay` under cProfile: where the simulator's time goes.

    .venv/bin/python docs/bench/profile_overlay.py --nodes 1000 [--join-interval 0.05 ...]

Prints the run's JSON summary (without messages_by_type), then the functions with the most
time of their own and the most cumulative time, and the process's CPU time and peak memory.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import resource
import time

from sim.overlay_experiment import ExperimentConfig, OverlayExperiment


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--churn", type=float, default=0.0)
    parser.add_argument("--loss", type=float, default=0.0)
    parser.add_argument("--lookups", type=int, default=10_000)
    parser.add_argument("--join-interval", type=float, default=0.2)
    parser.add_argument("--settle", type=float, default=300.0)
    parser.add_argument("--steady", type=float, default=600.0)
    parser.add_argument("--repair", type=float, default=300.0)
    parser.add_argument("--detect-samples", type=int, default=100)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--out", default="/tmp/overlay.prof", help="where the raw profile goes")
    a = parser.parse_args()
    config = ExperimentConfig(
        nodes=a.nodes, seed=a.seed, churn=a.churn, loss=a.loss, lookups=a.lookups,
        join_interval=a.join_interval, settle_seconds=a.settle, steady_seconds=a.steady,
        repair_seconds=a.repair, detect_samples=a.detect_samples,
    )  # fmt: skip
    load = os.getloadavg()
    cpu = time.process_time()
    profile = cProfile.Profile()
    profile.enable()
    result = OverlayExperiment(config).run()
    profile.disable()
    result.pop("messages_by_type", None)
    result["cpu_seconds"] = round(time.process_time() - cpu, 1)
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    result["load_average"] = [load, os.getloadavg()]
    print(json.dumps(result))
    profile.dump_stats(a.out)
    stats = pstats.Stats(a.out)
    stats.sort_stats("tottime").print_stats(a.top)
    stats.sort_stats("cumtime").print_stats(a.top)


if __name__ == "__main__":
    main()

"""Print the overlay benchmark results (docs/bench/overlay-*.json) as a markdown table."""

import json
import sys
from pathlib import Path

ROWS = [
    ("nodes", "{:d}"),
    ("churn", "{:.0%}"),
    ("nodes_alive", "{}"),
    ("hops_mean", "{:.2f}"),
    ("hops_p99", "{:.0f}"),
    ("rdp_mean", "{:.2f}"),
    ("rdp_p99", "{:.2f}"),
    ("lookups", "{:d}"),
    ("lookup_success", "{:.4f}"),
    ("lookup_success_before_churn", "{:.4f}"),
    ("join_msgs_per_node", "{:.0f}"),
    ("maintenance_msgs_per_node_per_min", "{:.0f}"),
    ("sim_seconds", "{:.0f}"),
    ("wall_seconds", "{:.0f}"),
]


def main() -> None:
    names = ["overlay-1000", "overlay-1000-churn20", "overlay-10000", "overlay-10000-churn20"]
    here = Path(__file__).parent
    runs = [
        (n, json.loads((here / f"{n}.json").read_text()))
        for n in names
        if (here / f"{n}.json").exists() and (here / f"{n}.json").stat().st_size
    ]
    print("| | " + " | ".join(n for n, _ in runs) + " |")
    print("|---" * (len(runs) + 1) + "|")
    for key, fmt in ROWS:
        cells = [fmt.format(r[key]) if key in r else "" for _, r in runs]
        print(f"| {key} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    sys.exit(main())

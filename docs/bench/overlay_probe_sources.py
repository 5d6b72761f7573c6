"""Where the overlay's probes come from: every Ping a core sends, by the message (or timer) it
was handling, the probe's kind and whether the node had joined.

    PYTHONPATH=$PWD .venv/bin/python docs/bench/overlay_probe_sources.py NODES

Runs the benchmark's phases (join 20 nodes a second, 120 s settle, 120 s steady, 1,000 lookups,
5 timed crashes) with the core's entry points and `_probe` wrapped (a diagnostic only: the
wrapping changes no decision) and prints the messages by type, then the probes' sources.
"""

from __future__ import annotations

import collections
import sys

from common.overlay import node as overlay_node
from sim.overlay_experiment import ExperimentConfig, OverlayExperiment

KINDS = {overlay_node.REVIVE: "revive", overlay_node.MEASURE: "measure", overlay_node.SUSPECT: "suspect"}


def main() -> None:
    nodes = int(sys.argv[1])
    counts: collections.Counter[tuple[str, str, str]] = collections.Counter()
    handling = ["start"]
    cls = overlay_node.OverlayNode
    on_message, on_timer, probe = cls.on_message, cls.on_timer, cls._probe

    def wrapped_on_message(self, msg, now):  # type: ignore[no-untyped-def]
        handling[0] = type(msg).__name__
        return on_message(self, msg, now)

    def wrapped_on_timer(self, now):  # type: ignore[no-untyped-def]
        handling[0] = "timer"
        return on_timer(self, now)

    def wrapped_probe(self, peer, now, **kw):  # type: ignore[no-untyped-def]
        before = self._nonce
        probe(self, peer, now, **kw)
        if self._nonce != before:  # a Ping went out (not merged into an outstanding probe)
            kind = KINDS[kw.get("kind", overlay_node.MEASURE)]
            counts[(handling[0], kind, "joined" if self.joined else "joining")] += 1

    cls.on_message, cls.on_timer, cls._probe = wrapped_on_message, wrapped_on_timer, wrapped_probe  # type: ignore[method-assign]
    config = ExperimentConfig(
        nodes=nodes, join_interval=0.05, settle_seconds=120, steady_seconds=120, repair_seconds=30,
        lookups=1000, detect_samples=5,
    )  # fmt: skip
    result = OverlayExperiment(config).run()
    total = sum(counts.values())
    print("messages", sum(result["messages_by_type"].values()), result["messages_by_type"])
    print("pings", total)
    for (source, kind, state), n in counts.most_common():
        print(f"{100 * n / total:5.1f} % {n:9d}  handling {source}, {kind}, {state}")


if __name__ == "__main__":
    main()

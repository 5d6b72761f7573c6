"""Where the join phase's messages come from: sends by type and by the code path that made them,
and what each measurement probe changed. Evaluation only (it wraps the core's private methods).

    PYTHONPATH=. .venv/bin/python docs/bench/overlay_messages_by_cause.py NODES [JOIN_INTERVAL]

Runs `poold simulate overlay`'s join phase (NODES nodes, one every JOIN_INTERVAL s, default 0.05
as docs/bench/overlay.sh's 10,000-node runs, then 30 s) and prints one JSON object: every send
of the phase by type, the sends by (type, the three calling functions: a probe's are those of the
_probe call that sent its ping; a probe already outstanding sends nothing and is not counted),
and each answered measurement probe by origin and outcome: `took` (its node entered our routing
table), `leaf` (our leaf set changed), `nothing`. Per joined node throughout.
"""

from __future__ import annotations

import collections
import json
import sys
from typing import Any

import common.overlay.node as node
from sim.network import without_cycle_collector
from sim.overlay_experiment import ExperimentConfig, OverlayExperiment

sends: collections.Counter[tuple[str, str]] = collections.Counter()
outcomes: collections.Counter[tuple[str, str]] = collections.Counter()
origin: dict[tuple[int, int], str] = {}
Node = node.OverlayNode
_send, _probe, _on_pong = Node._send, Node._probe, Node._on_pong


def callers(skip: int = 2, depth: int = 3) -> str:
    frame, names = sys._getframe(skip), []
    while frame is not None and len(names) < depth:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    return "<".join(names)


def counted_send(self: Any, addr: str, msg: Any) -> None:
    sends[msg.TYPE, callers()] += 1
    _send(self, addr, msg)


def counted_probe(self: Any, peer: Any, now: float, **kw: Any) -> None:
    if peer.id not in self._probing:  # else no ping goes out
        path = callers()
        sends["ping", path] += 1
        if kw.get("kind", node.MEASURE) == node.MEASURE:
            origin[self.me.id, peer.id] = path
    _probe(self, peer, now, **kw)


def judged_pong(self: Any, msg: Any, now: float) -> None:
    path = origin.pop((self.me.id, msg.sender.id), None)
    if path is None or msg.nonce not in self._pending:
        _on_pong(self, msg, now)
        return
    was_entry, leaf_version = self.table.contains(msg.sender.id), self.leaf.version
    _on_pong(self, msg, now)
    took = not was_entry and self.table.contains(msg.sender.id)
    outcomes[path, "took" if took else "leaf" if self.leaf.version != leaf_version else "nothing"] += 1


def main() -> None:
    nodes = int(sys.argv[1])
    interval = float(sys.argv[2]) if len(sys.argv) > 2 else 0.05
    Node._send, Node._probe = counted_send, counted_probe
    node._HANDLERS[node.Pong] = judged_pong  # (on_message dispatches through this table)
    experiment = OverlayExperiment(ExperimentConfig(nodes=nodes, join_interval=interval))
    net = experiment.net
    with without_cycle_collector():
        experiment.join()
    total = sum(net.stats.sent.values())

    def per_node(counter: collections.Counter[tuple[str, str]]) -> dict[str, float]:
        return {" ".join(k): round(v / nodes, 1) for k, v in counter.most_common() if v >= nodes / 10}

    print(json.dumps({
        "nodes": nodes, "join_interval": interval, "sim_seconds": net.now,
        "messages": total, "messages_per_node": round(total / nodes, 1),
        "by_type_per_node": {k: round(v / nodes, 1) for k, v in sorted(net.stats.sent.items())},
        "sends_per_node": per_node(sends),
        "probes_answered_per_node": round(sum(outcomes.values()) / nodes, 1),
        "probe_outcomes_per_node": per_node(outcomes),
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()

"""Which code path sends each ping, leaf-set request and row request, and how many change anything.

    PYTHONPATH=$PWD .venv/bin/python docs/bench/overlay_msg_causes.py NODES [SEED] > out.json

Runs the benchmark's phases (join 20 nodes a second, 120 s settle, 120 s steady, 1,000 lookups,
5 timed crashes) with the core's entry points and senders wrapped (a diagnostic only: the
wrapping changes no decision) and prints one JSON object: messages by type, then for each kind
of request, by the code path that sent it (its callers up to the handler or timer) and the phase
(join, settle, steady, after), how many were sent, answered, and answered with something new:
- a probe is useful when its pong changed our leaf set or routing table;
- a leaf-set request when the push that answers it changed our leaf set or table, started a
  probe, or (lookahead) is the first or differs from the set we held for that node;
- a row request when its reply changed our table or leaf set or started a probe.
A reply is matched to the latest request to the same peer (and row); later ones count as
answers to none.
"""

from __future__ import annotations

import collections
import json
import sys
from typing import Any

from common.overlay import messages as m
from common.overlay import node as overlay_node
from sim.overlay_experiment import ExperimentConfig, OverlayExperiment

STOP = {"on_message", "on_timer", "route", "start", "measure", "wrapped_on_message", "wrapped_on_timer"}
HIDE = {"_consider", "_consider_all", "_probe", "_send", "wrapped_probe", "wrapped_send", "_request_row"}


def _path() -> str:
    """The callers of the wrapped sender, innermost first, up to the entry point."""
    names = []
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_name not in STOP and len(names) < 6:
        name = frame.f_code.co_name
        if name not in HIDE:
            names.append(name)
        frame = frame.f_back
    return ">".join(names) or "?"


MEASURED: set[tuple[int, int]] = set()  # (node, peer) pairs a pong ever answered
PINGED: set[tuple[int, int]] = set()  # (node, peer) pairs: the node probed the peer


def _why(node: overlay_node.OverlayNode, peer: m.Peer) -> str:
    """For a probe from _consider: which of its cases sent it (the probe is already out)."""
    if sys._getframe(2).f_code.co_name != "_consider":
        return ""
    pid = peer.id
    if pid not in node.leaf and node.leaf.could_hold(pid):
        return " [leaf candidate]"
    r, col = node.table.slot(pid)
    current = node.table.get(r, col)
    if current is None or current.id == pid:
        return " [empty slot]"
    if pid in node.rtt:
        return " [re-measure nearer]"
    return " [challenge holder, measured before]" if (node.me.id, pid) in MEASURED else " [challenge holder]"


def main() -> None:
    nodes = int(sys.argv[1])
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    config = ExperimentConfig(
        nodes=nodes, seed=seed, join_interval=0.05, settle_seconds=120, steady_seconds=120,
        repair_seconds=30, lookups=1000, detect_samples=5,
    )  # fmt: skip
    join_end = nodes * config.join_interval + 30
    bounds = (join_end, join_end + 120, join_end + 240)
    clock = [0.0]

    def phase() -> str:
        t = clock[0]
        return (
            "join" if t < bounds[0] else "settle" if t < bounds[1] else "steady" if t < bounds[2] else "after"
        )

    # (kind, path, phase) -> [sent, answered, useful]
    stats: dict[tuple[str, str, str], list[int]] = collections.defaultdict(lambda: [0, 0, 0])
    probes: dict[tuple[int, int], tuple[str, str, str]] = {}  # (node, nonce) -> key
    leaf_reqs: dict[tuple[int, int], tuple[str, str, str]] = {}  # (node, peer) -> key
    row_reqs: dict[tuple[int, int, int], tuple[str, str, str]] = {}  # (node, peer, row) -> key
    pings_started = [0]

    cls = overlay_node.OverlayNode
    on_message, on_timer, probe, send = cls.on_message, cls.on_timer, cls._probe, cls._send
    on_pong, on_push, on_reply = cls._on_pong, cls._on_leaf_push, cls._on_row_reply

    def wrapped_on_message(self, msg, now):  # type: ignore[no-untyped-def]
        clock[0] = now
        return on_message(self, msg, now)

    def wrapped_on_timer(self, now):  # type: ignore[no-untyped-def]
        clock[0] = now
        return on_timer(self, now)

    def wrapped_probe(self, peer, now, **kw):  # type: ignore[no-untyped-def]
        before = self._nonce
        probe(self, peer, now, **kw)
        if self._nonce != before:
            pings_started[0] += 1
            kind = {0: "revive", 1: "measure", 2: "suspect"}[kw.get("kind", overlay_node.MEASURE)]
            # "reverse": the probed node probed us before (so it could have measured us then)
            reverse = " (reverse)" if (peer.id, self.me.id) in PINGED else ""
            PINGED.add((self.me.id, peer.id))
            key = ("ping:" + kind, _path() + _why(self, peer) + reverse, phase())
            stats[key][0] += 1
            probes[(self.me.id, self._probing[peer.id])] = key

    def wrapped_send(self, addr, msg):  # type: ignore[no-untyped-def]
        send(self, addr, msg)
        if type(msg) is m.LeafSetRequest:
            key = ("leaf_req", _path(), phase())
            stats[key][0] += 1
            for p in self._known():
                if p.addr == addr:
                    leaf_reqs[(self.me.id, p.id)] = key
                    break
        elif type(msg) is m.RowRequest:
            key = ("row_req", _path(), phase())
            stats[key][0] += 1
            for p in self._known():
                if p.addr == addr:
                    row_reqs[(self.me.id, p.id, msg.row)] = key
                    break

    def versions(self) -> tuple[int, int, int]:  # type: ignore[no-untyped-def]
        return (self.table.version, self._leaf_version, pings_started[0])

    def wrapped_on_pong(self, msg, now):  # type: ignore[no-untyped-def]
        key = probes.pop((self.me.id, msg.nonce), None)
        before = (self.table.version, self._leaf_version)
        on_pong(self, msg, now)
        if key is not None:
            stats[key][1] += 1
            stats[key][2] += (self.table.version, self._leaf_version) != before
            MEASURED.add((self.me.id, msg.sender.id))

    def wrapped_on_push(self, msg, now):  # type: ignore[no-untyped-def]
        key = leaf_reqs.pop((self.me.id, msg.sender.id), None)
        held = self._entry_leaves.get(msg.sender.id)
        before = versions(self)
        on_push(self, msg, now)
        if key is not None:
            stats[key][1] += 1
            same_as_held = held is not None and [p.id for p in held[1]] == [p.id for p in msg.leaf_set]
            stats[key][2] += versions(self) != before or not same_as_held

    def wrapped_on_reply(self, msg, now):  # type: ignore[no-untyped-def]
        key = row_reqs.pop((self.me.id, msg.sender.id, msg.row), None)
        before = versions(self)
        on_reply(self, msg, now)
        if key is not None:
            stats[key][1] += 1
            stats[key][2] += versions(self) != before

    cls.on_message, cls.on_timer, cls._probe, cls._send = (  # type: ignore[method-assign]
        wrapped_on_message, wrapped_on_timer, wrapped_probe, wrapped_send,
    )  # fmt: skip
    # The handler table holds the unwrapped functions: point it at the wrapped ones.
    overlay_node._HANDLERS[m.Pong] = wrapped_on_pong
    overlay_node._HANDLERS[m.LeafSetPush] = wrapped_on_push
    overlay_node._HANDLERS[m.RowReply] = wrapped_on_reply
    result = OverlayExperiment(config).run()
    out: dict[str, Any] = {
        "nodes": nodes, "seed": seed, "messages": sum(result["messages_by_type"].values()),
        "messages_by_type": result["messages_by_type"],
        "maintenance_by_type": result.get("maintenance_by_type"),
        "rdp_mean": result.get("rdp_mean"), "hops_mean": result.get("hops_mean"),
        "causes": [
            {"kind": k, "path": p, "phase": ph, "sent": s, "answered": a, "useful": u}
            for (k, p, ph), (s, a, u) in sorted(stats.items(), key=lambda kv: -kv[1][0])
        ],
    }  # fmt: skip
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

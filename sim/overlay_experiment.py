"""The overlay benchmark behind `poold simulate overlay`: join, steady state, lookups, churn.

Phases, all on virtual time:
1. join: node i joins at i * join_interval through a random earlier node;
2. settle, then a steady window that measures maintenance traffic per node and minute;
3. lookups from random live nodes to random keys: hops, relative delay penalty (overlay path
   latency over the direct latency between source and root) and success (delivered at the live
   node numerically closest to the key, computed from ground truth, not from any node's state);
4. with churn F: a fraction F of the nodes crash, maintenance runs for `repair_seconds`, and the
   lookups are measured again.

join_msgs_per_node is the join phase's traffic minus the maintenance traffic the nodes alive
during it would have sent anyway (at the steady-state rate), divided by N.
"""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from common.overlay.messages import AppMessage, app_message
from common.overlay.node import Delivered, Event, OverlayParams
from sim.network import SimNetwork, route_latency_tracker
from sim.topology import LatencyMatrix, Placement, load_matrix, transit_stub


@app_message
class LookupProbe(AppMessage):
    """The payload of a benchmark lookup."""

    TYPE = "sim.lookup"
    n: int


@dataclass(frozen=True)
class ExperimentConfig:
    """The parameters of `poold simulate overlay`; the module docstring describes the phases."""

    nodes: int
    seed: int = 1
    topology: str = "transit-stub"
    churn: float = 0.0
    loss: float = 0.0
    lookups: int = 10_000
    join_interval: float = 0.2
    settle_seconds: float = 300.0
    steady_seconds: float = 600.0
    repair_seconds: float = 300.0
    params: OverlayParams = field(default_factory=OverlayParams)


def load_topology(spec: str, seed: int) -> LatencyMatrix:
    """A seeded transit-stub topology, or a latency matrix read from a file (ms)."""
    return transit_stub(seed) if spec == "transit-stub" else load_matrix(spec)


def _p99(values: list[float]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


class OverlayExperiment:
    """One run of the overlay benchmark on a seeded placement of nodes."""

    def __init__(self, config: ExperimentConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        topology = load_topology(config.topology, config.seed)
        self.placement = Placement(topology, config.nodes, config.seed)
        self.delivered: dict[int, tuple[int, int]] = {}
        self.net = SimNetwork(
            self.placement.latency,
            seed=config.seed,
            params=config.params,
            loss=config.loss,
            on_event=self._on_event,
        )
        self.path_latency = route_latency_tracker(
            self.net, lambda p: p.n if isinstance(p, LookupProbe) else None
        )
        self._lookup_base = 0

    def _on_event(self, index: int, event: Event, now: float) -> None:
        if isinstance(event, Delivered) and isinstance(event.payload, LookupProbe):
            self.delivered[event.payload.n] = (index, event.hops)

    def _sent(self) -> int:
        return sum(self.net.stats.sent.values())

    def _lookups(self) -> dict[str, float]:
        cfg, net = self.config, self.net
        oracle = net.root_oracle()
        alive = [n.index for n in net.alive()]
        expected: dict[int, tuple[int, int]] = {}
        for k in range(self._lookup_base, self._lookup_base + cfg.lookups):
            key = self.rng.getrandbits(128)
            src = self.rng.choice(alive)
            expected[k] = (src, oracle.root(key))
            net.route(src, key, LookupProbe(n=k))
        self._lookup_base += cfg.lookups
        net.run_until(net.now + 60)
        hops, rdp, ok = [], [], 0
        for k, (src, root) in expected.items():
            got = self.delivered.get(k)
            if got is None or got[0] != root:
                continue
            ok += 1
            hops.append(got[1])
            direct = self.placement.latency(src, root)
            if src != root and direct > 0:
                rdp.append(self.path_latency.get(k, 0.0) / direct)
        return {
            "hops_mean": statistics.fmean(hops) if hops else 0.0,
            "hops_p99": _p99([float(h) for h in hops]),
            "rdp_mean": statistics.fmean(rdp) if rdp else 0.0,
            "rdp_p99": _p99(rdp),
            "lookups": cfg.lookups,
            "lookup_success": ok / cfg.lookups,
        }

    def run(self) -> dict[str, Any]:
        """Run the phases and return the measurements `poold simulate overlay` prints as JSON."""
        cfg, net = self.config, self.net
        started = time.perf_counter()
        for i in range(cfg.nodes):
            bootstrap = None if i == 0 else self.rng.randrange(i)
            net.add_node(i, self.rng.getrandbits(128), bootstrap=bootstrap, at=i * cfg.join_interval)
        join_end = cfg.nodes * cfg.join_interval + 30
        net.run_until(join_end)
        join_msgs = self._sent()
        join_node_seconds = sum(join_end - i * cfg.join_interval for i in range(cfg.nodes))
        net.run_until(net.now + cfg.settle_seconds)
        before = self._sent()
        net.run_until(net.now + cfg.steady_seconds)
        rate = (self._sent() - before) / len(net.alive()) / (cfg.steady_seconds / 60)
        result: dict[str, Any] = {"nodes": cfg.nodes, "seed": cfg.seed, "topology": cfg.topology,
                                  "loss": cfg.loss, "churn": cfg.churn}  # fmt: skip
        steady = self._lookups()
        if cfg.churn > 0:
            alive = [n.index for n in net.alive()]
            for index in self.rng.sample(alive, int(len(alive) * cfg.churn)):
                net.crash(index)
            net.run_until(net.now + cfg.repair_seconds)
            result |= self._lookups()
            result["lookup_success_before_churn"] = steady["lookup_success"]
            result["nodes_alive"] = len(net.alive())
        else:
            result |= steady
        result["join_msgs_per_node"] = max(0.0, join_msgs - rate / 60 * join_node_seconds) / cfg.nodes
        result["maintenance_msgs_per_node_per_min"] = rate
        result["messages_by_type"] = dict(sorted(net.stats.sent.items()))
        result["diameter_seconds"] = self.placement.diameter
        result["sim_seconds"] = net.now
        result["wall_seconds"] = time.perf_counter() - started
        return result

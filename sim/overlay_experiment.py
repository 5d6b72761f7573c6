"""The overlay benchmark behind `poold simulate overlay`: join, steady state, lookups, churn.

Phases, all on virtual time:
1. join: node i joins at i * join_interval through a random earlier node;
2. settle, then a steady window that measures maintenance traffic per node and minute;
3. lookups from random live nodes to random keys: hops, relative delay penalty (overlay path
   latency over the direct latency between source and root) and success (delivered at the live
   node numerically closest to the key, computed from ground truth, not from any node's state);
4. with churn F: a fraction F of the nodes crash, maintenance runs for `repair_seconds`, and the
   lookups are measured again;
5. detection: rounds of isolated crashes (victims far enough apart on the ring that no leaf set
   holds two of them), each timed from the crash until every leaf set that held the victim has
   dropped it and is again exactly what ground truth says (detect_median_s, detect_p99_s).

join_msgs_per_node is the join phase's traffic minus the maintenance traffic the nodes alive
during it would have sent anyway (at the steady-state rate), divided by N. bytes_per_node_per_min
is the steady window's traffic as sealed UDP datagrams (`sim.network.ByteMeter`).
"""

from __future__ import annotations

import bisect
import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from common.overlay.messages import AppMessage, app_message
from common.overlay.node import Delivered, Event, LeafSetChanged, OverlayNode, OverlayParams
from sim.network import ByteMeter, SimNetwork, route_latency_tracker, without_cycle_collector
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
    detect_samples: int = 100  # isolated crashes timed in the detection phase
    detect_timeout: float = 600.0  # a crash not repaired by then counts as this long
    params: OverlayParams = field(default_factory=OverlayParams)


def load_topology(spec: str, seed: int) -> LatencyMatrix:
    """A seeded transit-stub topology, or a latency matrix read from a file (ms)."""
    return transit_stub(seed) if spec == "transit-stub" else load_matrix(spec)


class LeafSetRepairClock:
    """Times crashes until every leaf set that held the victim is repaired: the victim dropped
    and the set exactly the l/2 nearest live nodes on each side (ground truth, not any node's
    view). Fed every LeafSetChanged event; `live` is the sorted ids of the live joined nodes."""

    def __init__(self, net: SimNetwork, half: int) -> None:
        self.net = net
        self.half = half
        self.live: list[int] = []
        self.times: list[float] = []
        self._pending: dict[int, tuple[float, set[int]]] = {}  # victim index -> (crash time, holders)
        self._waiting: dict[int, set[int]] = {}  # holder index -> victims it has not repaired

    def crash(self, victim: int, now: float) -> None:
        """Crash a node now and start its clock."""
        net = self.net
        vid = net.nodes[victim].node_id
        net.crash(victim)
        self.live.pop(bisect.bisect_left(self.live, vid))
        holders = {n.index for n in net.alive() if vid in n.core.leaf}
        for v in self._waiting.pop(victim, set()):  # a holder of an earlier crash is gone
            self._pending[v][1].discard(victim)
            self._check_done(v, now)
        self._pending[victim] = (now, holders)
        for h in holders:
            self._waiting.setdefault(h, set()).add(victim)
        self._check_done(victim, now)

    def on_leaf_set(self, index: int, now: float) -> None:
        """A node's leaf set changed: does it close any crash's clock?"""
        victims = self._waiting.get(index)
        if not victims:
            return
        node = self.net.nodes[index].core
        if not self.correct(index):
            return
        for v in list(victims):
            if self.net.nodes[v].node_id not in node.leaf:
                victims.discard(v)
                self._pending[v][1].discard(index)
                self._check_done(v, now)

    def _check_done(self, victim: int, now: float) -> None:
        crashed_at, holders = self._pending[victim]
        if not holders:
            del self._pending[victim]
            self.times.append(now - crashed_at)

    @property
    def open(self) -> int:
        """Crashes whose leaf sets are not all repaired yet."""
        return len(self._pending)

    def give_up(self, timeout: float) -> None:
        """Count the crashes still open as `timeout` long."""
        self.times += [timeout] * len(self._pending)
        self._pending.clear()
        self._waiting.clear()

    def correct(self, index: int) -> bool:
        """Whether a node's leaf set is exactly the nearest live nodes on each side."""
        return leaf_set_is_exact(self.net.nodes[index].core, self.live, self.half)


def leaf_set_is_exact(node: OverlayNode, live: list[int], half: int) -> bool:
    """Whether a node's leaf set is exactly the `half` nearest of `live` (the sorted ids of the
    live nodes, its own among them) on each side: ground truth, not any node's view."""
    me = node.me.id
    want = min(half, len(live) - 1)  # on a small ring each side holds every other node
    i = bisect.bisect_left(live, me)
    larger = [live[(i + k) % len(live)] for k in range(1, want + 1)]
    smaller = [live[(i - k) % len(live)] for k in range(1, want + 1)]
    return [p.id for p in node.leaf.larger] == larger and [p.id for p in node.leaf.smaller] == smaller


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
        self.repair_clock: LeafSetRepairClock | None = None

    def _on_event(self, index: int, event: Event, now: float) -> None:
        if isinstance(event, Delivered) and isinstance(event.payload, LookupProbe):
            self.delivered[event.payload.n] = (index, event.hops)
        elif isinstance(event, LeafSetChanged) and self.repair_clock is not None:
            self.repair_clock.on_leaf_set(index, now)

    def _detection(self) -> dict[str, float | None]:
        """Rounds of isolated crashes (`detect_samples` of them, at most a quarter of the ring),
        each timed until every affected leaf set is repaired.
        Victims of one round sit at least 2l + 2 positions apart on the ring, so that no leaf set
        holds two of them (nor the replacement of one); each crashes at a random instant within
        one keepalive interval, so that crashes meet the maintenance timers at random phases."""
        cfg, net = self.config, self.net
        clock = self.repair_clock = LeafSetRepairClock(net, cfg.params.leaf_set_size // 2)
        clock.live = sorted(n.node_id for n in net.alive())
        gap = 2 * cfg.params.leaf_set_size + 2
        budget = min(cfg.detect_samples, len(clock.live) // 4)  # the ring keeps 3/4 of its nodes
        started = 0
        while started < budget:
            ring = sorted(net.alive(), key=lambda n: n.node_id)
            per_round = min(budget - started, len(ring) // gap)
            if per_round < 1:
                break
            offset = self.rng.randrange(len(ring))
            slots = sorted(self.rng.sample(range(len(ring) // gap), per_round))
            victims = [
                ring[(offset + s * gap + self.rng.randrange(gap // 2)) % len(ring)].index for s in slots
            ]
            t0 = net.now
            for v in victims:
                at = t0 + self.rng.random() * cfg.params.keepalive_interval
                net.call(at, lambda v=v: clock.crash(v, net.now))
            started += len(victims)
            net.run_until(t0 + cfg.params.keepalive_interval)
            while clock.open and net.now < t0 + cfg.detect_timeout:
                net.run_until(net.now + 1.0)
            clock.give_up(cfg.detect_timeout)
        self.repair_clock = None
        times = clock.times
        return {
            "detect_median_s": statistics.median(times) if times else None,
            "detect_p99_s": _p99(times) if times else None,
            "detect_samples": len(times),
        }

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

    def join(self) -> float:
        """Phase 1: node i joins at i * join_interval through a random earlier node; runs until
        30 s after the last join, and returns that time."""
        cfg, net = self.config, self.net
        for i in range(cfg.nodes):
            bootstrap = None if i == 0 else self.rng.randrange(i)
            net.add_node(i, self.rng.getrandbits(128), bootstrap=bootstrap, at=i * cfg.join_interval)
        join_end = cfg.nodes * cfg.join_interval + 30
        net.run_until(join_end)
        return join_end

    def run(self) -> dict[str, Any]:
        """Run the phases and return the measurements `poold simulate overlay` prints as JSON."""
        with without_cycle_collector():
            return self._run()

    def _run(self) -> dict[str, Any]:
        cfg, net = self.config, self.net
        started = time.perf_counter()
        join_end = self.join()
        join_msgs = self._sent()
        join_node_seconds = sum(join_end - i * cfg.join_interval for i in range(cfg.nodes))
        net.run_until(net.now + cfg.settle_seconds)
        before = self._sent()
        meter = net.meter = ByteMeter()
        net.run_until(net.now + cfg.steady_seconds)
        net.meter = None
        per_node_min = len(net.alive()) * (cfg.steady_seconds / 60)
        rate = (self._sent() - before) / per_node_min
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
        result |= self._detection()
        result["join_msgs_per_node"] = max(0.0, join_msgs - rate / 60 * join_node_seconds) / cfg.nodes
        result["maintenance_msgs_per_node_per_min"] = rate
        result["bytes_per_node_per_min"] = meter.total() / per_node_min
        result["maintenance_by_type"] = {
            k: round(n / per_node_min, 2) for k, n in sorted(meter.count.items())
        }
        result["bytes_by_type"] = {k: round(v, 1) for k, v in meter.by_type().items()}
        result["messages_by_type"] = dict(sorted(net.stats.sent.items()))
        result["trace_digest"] = net.trace_digest
        result["diameter_seconds"] = self.placement.diameter
        result["sim_seconds"] = net.now
        result["wall_seconds"] = time.perf_counter() - started
        return result

"""faultD on the overlay simulator: one pool's machines, virtual time, seeded faults.

The very `RoleMachine` the daemon runs sits on each simulated overlay node. HTCondor is modelled
by what faultD asks of it: which collector each machine points at and which machines run a
collector and negotiator. A `FaultScenario` crashes and restarts machines, drops messages and
partitions the pool; `FaultSim.check` samples the safety invariants all along, and
`FaultSim.converged` says whether the pool ended with exactly one manager that everyone follows.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field

from common.overlay.ids import closeness, node_id_from_name
from common.overlay.messages import Peer
from common.overlay.node import (
    BroadcastReceived,
    Delivered,
    Event,
    Joined,
    LeafSetChanged,
    OverlayParams,
    Received,
)
from faultD.messages import StateFile
from faultD.role import PointTo, Role, RoleMachine, RoleOutput, RoleParams, StartManager, StopManager
from sim.network import SimNetwork

# A pool's machines share a LAN: the overlay can afford short timeouts there.
POOL_OVERLAY = OverlayParams(
    leaf_set_size=16,
    keepalive_interval=2.0,
    leaf_timeout=3.0,
    probe_timeout=1.0,
    table_probe_interval=20.0,
    row_maintenance_interval=30.0,
    leaf_exchange_interval=20.0,
    hop_timeout=0.5,
    join_retry=2.0,
    revive_interval=5.0,
)


def collector_of(index: int) -> str:
    """The collector address of simulated machine `index` (its sim name, HTCondor's port)."""
    return f"n{index}:9618"


@dataclass
class Machine:
    """One simulated host: its faultD role machine and what HTCondor was told to do there."""

    index: int
    role: RoleMachine | None = None
    points_to: str | None = None
    runs_manager: bool = False
    timer_at: float | None = None


@dataclass
class Violation:
    """A safety invariant found broken at virtual time `at`, said in words."""

    at: float
    what: str


@dataclass
class SimReport:
    """What a FaultSim run found: violations, takeovers, failover times, replica staleness, traffic."""

    seed: int
    violations: list[Violation] = field(default_factory=list)
    takeovers: int = 0
    failover_times: list[float] = field(default_factory=list)
    max_replica_staleness: float = 0.0
    messages: int = 0


class FaultSim:
    """One pool's machines, each running faultD's RoleMachine, on the overlay simulator."""

    def __init__(
        self,
        size: int,
        *,
        seed: int,
        loss: float = 0.0,
        params: RoleParams | None = None,
        overlay: OverlayParams = POOL_OVERLAY,
    ) -> None:
        self.size = size
        self.seed = seed
        self.params = params or RoleParams()
        rng = random.Random(f"lan-{seed}")
        self._lat = {(a, b): rng.uniform(0.0002, 0.002) for a in range(size) for b in range(a + 1, size)}
        self.net = SimNetwork(self._latency, seed=seed, params=overlay, loss=loss, on_event=self._on_event)
        self.ids = [node_id_from_name(f"ex{i}.pool{seed}") for i in range(size)]
        self.machines = {i: Machine(i) for i in range(size)}
        self.report = SimReport(seed=seed)
        self.epoch_holders: dict[int, set[int]] = defaultdict(set)
        self.manager_since: dict[int, float] = {}  # manager index -> since when
        self.crashed_manager_at: float | None = None
        self._state_counter = 0

    def _latency(self, a: int, b: int) -> float:
        return 0.0 if a == b else self._lat[(min(a, b), max(a, b))]

    # ------------------------------------------------------------------ scenario control

    def start_all(
        self,
        *,
        original: int = 0,
        founder: int = 0,
        absent: frozenset[int] = frozenset(),
        spacing: float = 0.05,
    ) -> None:
        """Every machine (but `absent` ones) starts faultD and joins through `founder`;
        `original` is the configured central manager."""
        self.original = original
        for i in range(self.size):
            if i not in absent:
                self._boot(i, at=i * spacing, bootstrap=None if i == founder else founder)

    def _boot(self, index: int, *, at: float, bootstrap: int | None) -> None:
        if index in self.net.nodes:
            self.net.restart(index, bootstrap=bootstrap, at=at)
        else:
            self.net.add_node(index, self.ids[index], bootstrap=bootstrap, at=at)

    def crash(self, index: int) -> None:
        """Crash a machine and its HTCondor daemons; a crashed manager starts the failover clock."""
        m = self.machines[index]
        if m.role is not None and m.role.role is Role.MANAGER:
            self.crashed_manager_at = self.net.now
        self.net.crash(index)
        m.role = None
        m.runs_manager = False  # its HTCondor daemons die with it
        m.timer_at = None

    def restart(self, index: int) -> None:
        """Boot a crashed machine again, joining through the first other live machine."""
        alive = [n.index for n in self.net.alive() if n.index != index]
        self._boot(index, at=self.net.now, bootstrap=alive[0] if alive else None)

    def at(self, t: float, fn: object) -> None:
        """Run `fn` (a scenario step) at virtual time `t`."""
        self.net.call(t, fn)  # type: ignore[arg-type]

    def run_until(self, t_end: float, *, sample_every: float = 0.25) -> None:
        """Advance virtual time to `t_end`, checking the invariants every `sample_every` seconds."""
        t = self.net.now
        while t < t_end:
            t = min(t_end, t + sample_every)
            self.net.run_until(t)
            self.check()

    # ------------------------------------------------------------------ drivers

    def _on_event(self, index: int, event: Event, now: float) -> None:
        m = self.machines[index]
        if isinstance(event, Joined):
            node = self.net.nodes[index]
            me = Peer(id=node.node_id, addr=self.net.addr(index))
            m.role = RoleMachine(
                me,
                collector_of(index),
                self.params,
                random.Random(f"role-{self.seed}-{index}-{now}"),
                original=index == self.original,
                manager_hint=self.ids[self.original],
            )
            self._apply(index, m.role.start(now))
            self._apply(index, m.role.on_leaf_set(tuple(node.core.leaf.members()), now))
            return
        if m.role is None:
            return
        if isinstance(event, LeafSetChanged):
            self._apply(index, m.role.on_leaf_set(event.members, now))
        elif isinstance(event, Delivered | Received | BroadcastReceived):
            self._apply(index, m.role.on_message(event.payload, now))

    def _apply(self, index: int, out: RoleOutput) -> None:
        m = self.machines[index]
        role = m.role
        now = self.net.now
        for action in out.condor:
            if isinstance(action, PointTo):
                m.points_to = action.collector
            elif isinstance(action, StartManager):
                m.runs_manager = True
                m.points_to = collector_of(index)
                self.epoch_holders[action.epoch].add(index)
                self.manager_since[index] = now
                self.report.takeovers += 1
                if self.crashed_manager_at is not None:
                    self.report.failover_times.append(now - self.crashed_manager_at)
                    self.crashed_manager_at = None
                self._change_state(index)  # its accountant diverges from the replica from now on
            elif isinstance(action, StopManager):
                m.runs_manager = False
                self.manager_since.pop(index, None)
        for msg in out.broadcasts:
            self.net.broadcast(index, msg)
        for key, msg in out.routes:
            self.net.route(index, key, msg)
        for addr, msg in out.directs:
            self.net.send_direct(index, addr, msg)
        if out.wakeup is not None and (m.timer_at is None or out.wakeup < m.timer_at or m.timer_at <= now):
            m.timer_at = out.wakeup
            self.net.call(out.wakeup, lambda: self._fire(index, role))

    def _fire(self, index: int, role: RoleMachine | None) -> None:
        m = self.machines[index]
        if m.role is None or m.role is not role or m.timer_at is None or self.net.now < m.timer_at:
            return
        m.timer_at = None
        self._apply(index, m.role.on_timer(self.net.now))

    def _change_state(self, index: int) -> None:
        """The manager's negotiator wrote to its Accountant log: the Replication Module sees it."""
        m = self.machines[index]
        if m.role is None or m.role.role is not Role.MANAGER:
            return
        self._state_counter += 1
        files = [StateFile(name="accountant", data=f"{index}:{self._state_counter}".encode())]
        self._apply(index, m.role.on_local_state(files, self.net.now))

    def churn_state(self, every: float, until: float) -> None:
        """The current manager's state changes every `every` seconds."""
        t = every
        while t < until:
            self.net.call(t, self._change_current_state)
            t += every

    def _change_current_state(self) -> None:
        for i in self.managers():
            self._change_state(i)

    # ------------------------------------------------------------------ invariants

    def live(self) -> list[int]:
        """Machines that are up, joined and running faultD."""
        return [n.index for n in self.net.alive() if self.machines[n.index].role is not None]

    def managers(self) -> list[int]:
        """Live machines whose role machine is manager (more than one is split brain)."""
        return [i for i in self.live() if (r := self.machines[i].role) is not None and r.role is Role.MANAGER]

    def check(self) -> None:
        """Record broken invariants: an epoch claimed twice, or a stable manager's replica holder
        more than one replication interval behind."""
        now = self.net.now
        for epoch, holders in self.epoch_holders.items():
            if len(holders) > 1:
                self._violate(now, f"epoch {epoch} claimed by {sorted(holders)}")
                holders.clear()  # report once
        # Replicas: once a manager has been stable a while, its K nearest live neighbours hold its
        # state, never older than one replication interval.
        for i in self.managers():
            role = self.machines[i].role
            assert role is not None
            since = self.manager_since.get(i, now)
            state = role.local_state
            if state is None or now - since < 2 * self.params.replication_interval:
                continue
            for holder in self._nearest_live(i, self.params.replicas):
                h = self.machines[holder].role
                if h is None:
                    continue
                if h.replica is None or (h.replica.epoch, h.replica.version) < (state.epoch, state.version):
                    age = now - state.taken_at
                    self.report.max_replica_staleness = max(self.report.max_replica_staleness, age)
                    if age > self.params.replication_interval:
                        self._violate(now, f"replica at n{holder} is {age:.1f}s behind manager n{i}")

    def _nearest_live(self, index: int, k: int) -> list[int]:
        me = self.ids[index]
        others = [j for j in self.live() if j != index and self.net.nodes[j].core.joined]
        return sorted(others, key=lambda j: closeness(me, self.ids[j]))[:k]

    def converged(self) -> str | None:
        """None when the pool has exactly one manager, running the daemons, followed by everyone."""
        managers = self.managers()
        if len(managers) != 1:
            return f"{len(managers)} managers: {managers}"
        mgr = managers[0]
        running = [i for i in self.live() if self.machines[i].runs_manager]
        if running != [mgr]:
            return f"collector/negotiator running on {running}, manager is n{mgr}"
        lost = [i for i in self.live() if self.machines[i].points_to != collector_of(mgr)]
        if lost:
            return f"machines {lost} do not point at n{mgr}"
        return None

    def _violate(self, at: float, what: str) -> None:
        self.report.violations.append(Violation(at, what))

    def finish(self) -> SimReport:
        """The run's report, with the messages sent counted."""
        self.report.messages = sum(self.net.stats.sent.values())
        return self.report

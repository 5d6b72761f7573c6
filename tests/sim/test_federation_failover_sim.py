"""Federation HA on virtual time, the whole chain (issue 16): pool B's machines run faultD's very
role machine (sim.faultd) and, on each, a poold behind the active/standby gate; pool A flocks to
B. Kill B's manager: faultD elects a replacement, which restores the replicated state (poold's
state file among it); the replacement's gate makes its poold active, it resumes B's grants and
tells A, whose FLOCK_TO names the new collector within seconds. B's original returns and takes
its role back, and A follows again. At every sample at most one poold of B is active. With
cross-pool trust (the second test), the token requests and approvals run too, a request to a
collector no manager of B runs failing: A's queue drains between the failover and the handback,
and A's next burst must get its schedds' token from B's original collector."""

from __future__ import annotations

import random
from collections.abc import Callable

from common.condor.types import PoolLoad
from common.overlay.messages import Peer
from common.overlay.node import OverlayNode, OverlayParams
from common.wire import Message
from faultD.messages import PoolState, StateFile
from faultD.role import RoleOutput, StartManager
from poolD.config import DiscoverySection, FlockingSection
from poolD.core import (
    CoreOutput,
    CoreSettings,
    FlockFromApplied,
    FlockToApplied,
    PoolCore,
    Send,
    SetFlockFrom,
    SetFlockTo,
)
from poolD.flock_trust import ApproveToken, InstallToken, RequestToken
from poolD.manager_role import Activate, Deactivate, ManagerGate, Raise, reading_from_status
from poolD.policy import Policy
from poolD.state import decode_state, encode_state
from sim.faultd import FaultSim, collector_of
from tests.poolD.test_core import load

MACHINES = 4  # pool B's machines; machine 0 is its original central manager
A_ADDR, A_ID = "pa", 0x1 << 124
KILL, RETURN, END = 100.0, 160.0, 220.0
STEP = 0.25
REPOINT_WITHIN = 10.0  # issue 16's target: repointed <= 10 s


def b_addr(i: int) -> str:
    return f"pb{i}"


def b_id(i: int) -> int:
    return (0x5 + i) << 124


def node(me: Peer, others: list[Peer]) -> OverlayNode:
    n = OverlayNode(me, OverlayParams(), random.Random(me.id))
    n.start(0.0)
    for other in others:
        n._consider(other, 0.0, firsthand=True)
    n._flush()
    return n


def settings(pool: str, collector: str, trust: bool = False, **flocking: float) -> CoreSettings:
    return CoreSettings(
        pool=pool,
        collector=collector,
        discovery=DiscoverySection(interval=10.0, valid_for=600.0),
        flocking=FlockingSection(interval=60.0, authorize_timeout=5.0, **flocking),
        trust_domain=f"{pool}.example" if trust else None,
    )


class PoolB(FaultSim):
    """faultD on B's machines, remembering the state each takeover restored."""

    def __init__(self) -> None:
        super().__init__(MACHINES, seed=7)
        self.restored: dict[int, PoolState | None] = {}

    def _apply(self, index: int, out: RoleOutput) -> None:
        for action in out.condor:
            if isinstance(action, StartManager):
                self.restored[index] = action.state  # faultD's Condor Module restores it here
        super()._apply(index, out)


class Federation:
    """Pool A's poold, and a gated poold on each of B's machines, over direct delivery."""

    def __init__(self, trust: bool = False, **b_flocking: float) -> None:
        self.trust = trust
        self.b_flocking = b_flocking  # B's [flocking] settings beyond settings()'s
        self.b = PoolB()
        self.b.start_all(original=0)
        a_peer = Peer(id=A_ID, addr=A_ADDR)
        b_peers = [Peer(id=b_id(i), addr=b_addr(i)) for i in range(MACHINES)]
        self.a = PoolCore(
            settings("a", "a.example.org:9618", trust, withdraw_after=20.0),
            node(a_peer, b_peers),
            Policy.allow_all(),
            random.Random(1),
        )
        self.requests: dict[str, str] = {}  # request id -> the collector it was queued at
        self.a_tokens: list[tuple[float, str]] = []  # (when, B's collector) of each schedd token A installed
        self.a_flock_to: list[str] = []
        self.gates = [ManagerGate(collector_of(i), silence_limit=3.0) for i in range(MACHINES)]
        self.cores: list[PoolCore | None] = [None] * MACHINES
        self.saved: list[bytes | None] = [None] * MACHINES
        self.a_peer, self.b_peers = a_peer, b_peers
        self.most_active = 0
        self.resumed: list[tuple[int, set[str]]] = []  # (machine, pools holding grants it resumed)

    # ------------------------------------------------------------------ poold I/O

    def deliver(self, addr: str, message: Message, now: float) -> None:
        if addr == A_ADDR:
            self.execute(None, self.a.on_message(message, now), now)
            return
        i = int(addr.removeprefix("pb"))
        core = self.cores[i]
        if core is not None and i in self.b.live():
            self.execute(i, core.on_message(message, now), now)

    def execute(self, i: int | None, out: CoreOutput, now: float) -> None:
        core = self.a if i is None else self.cores[i]
        assert core is not None
        for action in out.actions:
            if isinstance(action, Send):
                self.deliver(action.addr, action.message, now)
            elif isinstance(action, SetFlockTo):
                if i is None:
                    self.a_flock_to = list(action.collectors)
                self.execute(i, core.on_flock_to_applied(FlockToApplied(action, True, {}), now), now)
            elif isinstance(action, SetFlockFrom):
                self.execute(i, core.on_flock_from_applied(FlockFromApplied(action, None), now), now)
            elif isinstance(action, RequestToken):
                self.execute(i, core.on_token_requested(action, *self.queue(action), now), now)
            elif isinstance(action, ApproveToken):
                self.execute(i, core.on_token_approved(action, None, now), now)
            elif isinstance(action, InstallToken):
                if i is None and action.role == "schedd":
                    self.a_tokens.append((now, self.requests[action.request_id]))
                self.execute(i, core.on_token_installed(action, None, now), now)

    def queue(self, action: RequestToken) -> tuple[str | None, str | None]:
        """condor_token_request at a collector: queued (its id) if a manager of the pool runs it."""
        if action.peer == "b":
            running = {collector_of(i) for i, c in enumerate(self.cores) if c is not None}
            if action.collector not in running:
                return None, f"{action.collector}: no collector there"
        rid = f"{len(self.requests) + 1:07d}"
        self.requests[rid] = action.collector
        return rid, None

    # ------------------------------------------------------------------ each machine's gate

    def read_roles(self, now: float) -> None:
        live = set(self.b.live())
        for i in range(MACHINES):
            machine = self.b.machines[i]
            if i not in live or machine.role is None:
                self.cores[i] = None  # the machine (and its poold) is down
                self.gates[i] = ManagerGate(collector_of(i), silence_limit=3.0)
                continue
            status = machine.role.status(now) | {"condor": {"managing": machine.runs_manager}}
            for action in self.gates[i].on_reading(reading_from_status(status), now):
                if isinstance(action, Activate):
                    self.activate(i, action.epoch, now)
                elif isinstance(action, Deactivate):
                    self.cores[i] = None
                elif isinstance(action, Raise) and self.cores[i] is not None:
                    self.cores[i].epoch = action.epoch  # type: ignore[union-attr]
        active = [i for i in range(MACHINES) if self.gates[i].active and i in live]
        self.most_active = max(self.most_active, len(active))

    def activate(self, i: int, epoch: int, now: float) -> None:
        me = Peer(id=b_id(i), addr=b_addr(i))
        core = PoolCore(
            settings("b", collector_of(i), self.trust, **self.b_flocking),
            node(me, [self.a_peer]),
            Policy.allow_all(),
            random.Random(i),
        )
        core.epoch = epoch
        self.cores[i] = core
        restored = self.b.restored.get(i)
        files = {f.name: f.data for f in restored.files} if restored is not None else {}
        if "poold" in files:
            self.execute(i, core.restore_state(decode_state(files["poold"], "replica"), now, 0.0), now)
            self.resumed.append((i, set(core.grants)))
        self.execute(i, core.start(now), now)

    def replicate(self, now: float) -> None:
        """The active poold's state file, read by faultD on its machine (the Replication Module)."""
        for i, core in enumerate(self.cores):
            role = self.b.machines[i].role
            if core is None or role is None or not self.gates[i].active:
                continue
            data = encode_state(core.export_state(now, 0.0))
            if data != self.saved[i]:
                self.saved[i] = data
                self.b._apply(i, role.on_local_state([StateFile(name="poold", data=data)], now))

    # ------------------------------------------------------------------ the run

    def run(
        self,
        a_load: Callable[[float], PoolLoad] = lambda t: load(free=0, idle=5),
        ret: float = RETURN,
        end: float = END,
    ) -> dict[str, float | None]:
        """Until `end`: B's manager killed at KILL, back at `ret`; A's reading at each step is `a_load(t)`."""
        times: dict[str, float | None] = {"repointed": None, "taken_back": None}
        self.execute(None, self.a.start(0.0), 0.0)
        t = 0.0
        while t < end:
            t += STEP
            if t == KILL:
                self.b.crash(0)  # kill -9 of B's manager: faultd, HTCondor, poold
            if t == ret:
                self.b.restart(0)
            self.b.run_until(t)
            self.read_roles(t)
            self.execute(None, self.a.on_load(a_load(t), t), t)
            self.execute(None, self.a.on_timer(t), t)
            for i, core in enumerate(self.cores):
                if core is not None:
                    self.execute(i, core.on_load(load(free=3, idle=0), t), t)
                    self.execute(i, core.on_timer(t), t)
            self.replicate(t)
            if (
                t > KILL
                and times["repointed"] is None
                and self.a_flock_to
                and self.a_flock_to != [collector_of(0)]
            ):
                times["repointed"] = t - KILL
            if t > ret and times["taken_back"] is None and self.a_flock_to == [collector_of(0)]:
                times["taken_back"] = t - ret
        return times


def test_bs_manager_failover_moves_as_flock_to_and_back() -> None:
    fed = Federation()
    times = fed.run()
    assert fed.b.finish().violations == []
    assert fed.most_active == 1  # never two active poolds for B
    repointed = times["repointed"]
    assert repointed is not None and repointed <= REPOINT_WITHIN
    assert times["taken_back"] is not None  # the original took its role back; A followed
    assert fed.a_flock_to == [collector_of(0)]
    assert fed.a.counters["collector_moves"] == 2
    # the replacement resumed A's grant from the replica, the original from the handover
    assert [grants for _, grants in fed.resumed] == [{"a"}, {"a"}]
    assert fed.resumed[0][0] != 0 and fed.resumed[1][0] == 0


def test_the_flocking_pools_replacement_keeps_its_flock_to_and_withdraws_it_once_drained() -> None:
    """Issue 16's A failover, with B as the pool that flocks (to A, which offers): kill B's
    manager while its FLOCK_TO is set, as soon as the replicas can hold it (poold writes its
    state file and faultD reads it once a second here, as in the real harness: the kill comes 2 s
    after FLOCK_TO was set). The replacement's poold resumes with that FLOCK_TO, keeps it while
    its jobs wait, and withdraws it once its queue drained."""
    fed = Federation(withdraw_after=20.0)
    a_collector = "a.example.org:9618"
    fed.execute(None, fed.a.start(0.0), 0.0)
    kill_at: float | None = None
    drain_at: float | None = None
    resumed: list[tuple[int, float, list[str]]] = []  # (machine, when, FLOCK_TO it resumed with)
    withdrawn_at: float | None = None
    t = 0.0
    while t < 400.0 and withdrawn_at is None:
        t += STEP
        if kill_at is None and fed.cores[0] is not None and fed.cores[0].flocking.active:
            kill_at = t + 2.0
        if t == kill_at:
            fed.b.crash(0)
        fed.b.run_until(t)
        before = list(fed.cores)
        fed.read_roles(t)
        for i, core in enumerate(fed.cores):
            if kill_at is not None and t > kill_at and core is not None and before[i] is None:
                resumed.append((i, t, list(core.flocking.active)))
        if resumed and drain_at is None and t >= resumed[0][1] + 30.0:
            drain_at = t
        fed.execute(None, fed.a.on_load(load(free=3, idle=0), t), t)
        fed.execute(None, fed.a.on_timer(t), t)
        for i, core in enumerate(fed.cores):
            if core is not None:
                idle = 0 if drain_at is not None else 5
                fed.execute(i, core.on_load(load(free=3 if idle == 0 else 0, idle=idle), t), t)
                fed.execute(i, core.on_timer(t), t)
        if t % 1.0 == 0:  # poold's write and faultD's read of the state file, once a second
            fed.replicate(t)
        if drain_at is not None and resumed and (core := fed.cores[resumed[0][0]]) is not None:
            if not core.flocking.active:
                withdrawn_at = t
    assert kill_at is not None, "B never flocked to A"
    assert fed.b.finish().violations == []
    assert fed.most_active == 1
    (machine, at, flock_to), *_ = resumed
    assert machine != 0 and at - kill_at <= 10.0
    assert flock_to == [a_collector], f"the replacement resumed with FLOCK_TO {flock_to}"
    assert withdrawn_at is not None, "the replacement never withdrew FLOCK_TO"
    assert drain_at is not None and withdrawn_at >= drain_at + 20.0  # withdraw_after, not at once


def test_with_trust_as_queue_drains_and_refills_around_the_handback_a_gets_its_token_from_bs_original() -> (
    None
):
    """bench/federation-failover run 2 (docs/results.md): A flocked to B across B's failover
    (its schedds' token from B's replacement collector), A's queue drained (FLOCK_TO withdrawn,
    the token removed), B's original took its role back, A's queue filled again well within
    reauthorize_after: A must ask B's original to authorize its schedds and its collector for
    their token. Before, A's FLOCK_TO named B's original collector with no token there."""
    drained, refilled, back = 130.0, 320.0, 260.0

    def a_load(t: float) -> PoolLoad:
        return load(free=3, idle=0) if drained <= t < refilled else load(free=0, idle=5)

    fed = Federation(trust=True)
    times = fed.run(a_load, ret=back, end=420.0)
    assert fed.b.finish().violations == [] and fed.most_active == 1
    assert times["repointed"] is not None and times["repointed"] <= REPOINT_WITHIN
    assert fed.a_flock_to == [collector_of(0)]
    tokens = fed.a_tokens
    assert tokens[0][0] < KILL and tokens[0][1] == collector_of(0)  # before the kill: B's original's
    assert any(KILL < t < back and c != collector_of(0) for t, c in tokens)  # the replacement's
    assert any(t > refilled and c == collector_of(0) for t, c in tokens), (
        f"A's schedds got no token from B's original collector after the handback: {fed.a_tokens}"
    )
    assert ("b", "schedd") in fed.a.trust.held  # type: ignore[union-attr]

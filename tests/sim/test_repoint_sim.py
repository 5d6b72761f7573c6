"""Repointing on virtual time (issue 16, Deliver 3): pool A flocks to pool B; B's manager dies and
the machine that takes B's manager role over resumes B's poold from the replicated state file;
A's FLOCK_TO names B's new collector within seconds, not at A's next flocking round. Hostile
variants: the first notices are lost, B's old manager comes back saying its old collector."""

from __future__ import annotations

import random

from common.overlay.messages import Peer
from common.overlay.node import OverlayNode, OverlayParams
from common.wire import Message
from poolD.config import DiscoverySection, FlockingSection
from poolD.core import CoreSettings, PoolCore
from poolD.messages import CollectorMoved
from poolD.policy import Policy
from poolD.state import decode_state, encode_state
from sim.poold import SimulatedPoolDs
from tests.poolD.test_core import load

A, B1, B2 = 0, 1, 2  # pool a; pool b's original manager; the machine that takes b's role over
ADDRS = ["na", "nb1", "nb2"]
IDS = [0x1 << 124, 0x5 << 124, 0x9 << 124]
COLLECTORS = ["a.example.org:9618", "b1.example.org:9618", "b2.example.org:9618"]
POOLS = ["a", "b", "b"]
INTERVAL = 60.0
KILL = 200.5  # B's manager dies while A's jobs wait (A's rounds run at 60, 120, 180, 240 ...)
FAILOVER = 3.0  # faultD's takeover (docs/results.md: about 3 s)
REPOINT_WITHIN = 10.0  # issue 16's target for the real system (repointed <= 10 s median)


def overlay(me: int) -> OverlayNode:
    node = OverlayNode(Peer(id=IDS[me], addr=ADDRS[me]), OverlayParams(), random.Random(me))
    node.start(0.0)
    for other in range(3):
        if other != me:
            node._consider(Peer(id=IDS[other], addr=ADDRS[other]), 0.0, firsthand=True)
    node._flush()
    return node


class Federation(SimulatedPoolDs):
    """Three poolDs on virtual time; messages to a dead machine (or one in `lose`) are dropped."""

    def __init__(self) -> None:
        cores = []
        for p in range(3):
            settings = CoreSettings(
                pool=POOLS[p],
                collector=COLLECTORS[p],
                discovery=DiscoverySection(interval=INTERVAL, valid_for=600.0),
                flocking=FlockingSection(interval=INTERVAL, authorize_timeout=5.0),
            )
            cores.append(PoolCore(settings, overlay(p), Policy.allow_all(), random.Random(p)))
        super().__init__(cores, ADDRS, COLLECTORS, self._carry, lambda p, peer, now: None)
        self.live = {A, B1}  # B2's poold stands by until its machine takes b's manager role
        self.lost = 0
        self.replacement_free = 3  # free slots in b once B2 manages it (0: B2 makes no offers)

    def _carry(self, sender: int, addr: str, message: Message, now: float) -> None:
        self.deliver(self.index_of_addr[addr], message, now)

    def deliver(self, p: int, message: Message, now: float) -> None:
        if p not in self.live:
            self.lost += 1
            return
        super().deliver(p, message, now)

    def step(self, now: float) -> None:
        """Every live pool reads its load and fires its timer (once a virtual second)."""
        for p in sorted(self.live):
            free = 3 if p == B1 else self.replacement_free
            self.read(p, load(free=0, idle=5) if p == A else load(free=free, idle=0), now)
        for p in sorted(self.live):
            self.fire(p, now)

    def fail_over(self, now: float, replicated_at: float) -> None:
        """B's manager is dead; B2 takes its role (faultD epoch 1) and resumes B's poold from the
        state file as faultD replicated it at `replicated_at`."""
        self.live.discard(B1)
        state = self.snapshots[replicated_at]
        replacement = self.cores[B2]
        replacement.epoch = 1
        self.live.add(B2)
        self.execute(B2, replacement.restore_state(state, now, 0.0), now)
        self.execute(B2, replacement.start(now), now)

    def run(self, until: float, *, kill: float | None = None) -> float | None:
        """Step to `until`; with `kill`, fail B over then; returns when A's FLOCK_TO first named
        B2's collector (None: never)."""
        self.snapshots = {}
        self.start(0.0)
        self.live_since = 0.0
        repointed = None
        t = 0.0
        while t <= until:
            if t % 10 == 0 and B1 in self.live:  # faultD replicates B's state every 10 s
                self.snapshots[t] = decode_state(encode_state(self.cores[B1].export_state(t, 0.0)), "sim")
            if kill is not None and B1 in self.live and t >= kill:
                self.live.discard(B1)
            if kill is not None and B2 not in self.live and t >= kill + FAILOVER:
                self.fail_over(t, max(self.snapshots))
            self.step(t)
            if repointed is None and self.targets[A] == [B2]:
                repointed = t
            t += 0.5
        return repointed

    def start(self, now: float) -> None:
        for p in sorted(self.live):
            self.execute(p, self.cores[p].start(now), now)


def test_a_flocks_to_b_before_anything_fails() -> None:
    fed = Federation()
    assert fed.run(150.0) is None
    assert fed.targets[A] == [B1]


def test_when_bs_manager_role_moves_as_flock_to_follows_within_seconds() -> None:
    fed = Federation()
    repointed = fed.run(KILL + 60.0, kill=KILL)
    assert fed.targets[A] == [B2]
    assert repointed is not None and repointed - KILL <= FAILOVER + 1.0 < REPOINT_WITHIN
    assert repointed < 240.0  # A's next flocking round: not what moved it
    assert fed.cores[A].counters["collector_moves"] == 1
    assert "a" in fed.cores[B2].grants  # B2 resumed A's grant from the replicated state


def test_lost_notices_are_made_up_for_by_the_ones_that_follow() -> None:
    fed = Federation()
    fed.replacement_free = 0  # b is full after the failover: only the notices tell A
    lost_first = {"n": 0}
    original = fed.deliver

    def lossy(p: int, message: Message, now: float) -> None:
        if isinstance(message, CollectorMoved) and lost_first["n"] < 2:
            lost_first["n"] += 1  # the first round of notices (to A, and to B's dead manager)
            return
        original(p, message, now)

    fed.deliver = lossy  # type: ignore[method-assign]
    repointed = fed.run(KILL + 60.0, kill=KILL)
    assert lost_first["n"] == 2
    assert repointed is not None  # the notice told again 2 s later did it
    assert FAILOVER + 2.0 <= repointed - KILL <= FAILOVER + 2.5 < REPOINT_WITHIN


def test_bs_old_manager_coming_back_with_its_old_collector_does_not_pull_a_back() -> None:
    fed = Federation()
    fed.run(KILL + 30.0, kill=KILL)
    assert fed.targets[A] == [B2]
    b1 = fed.cores[B1]  # back from a partition, still epoch 0, offering its old collector
    fed.live.add(B1)
    t = KILL + 31.0
    while t < KILL + 200.0:
        fed.step(t)
        t += 0.5
    assert fed.targets[A] == [B2]
    assert fed.cores[A].counters["collector_moves_stale"] > 0
    assert b1.epoch == 0

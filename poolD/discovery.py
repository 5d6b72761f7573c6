"""Proximity-aware remote pool discovery (seed §3.2): announcing our free slots along the routing
table's rows, and taking in, checking and forwarding the offers of others.

Pure logic: it reads the overlay node's state (rows, RTTs, identity) but sends nothing itself;
it returns (address, payload) pairs for the driver to send directly. The same code runs in the
daemon and in `poold simulate`.
"""

from __future__ import annotations

import functools
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from common.condor.knobs import check_host_port
from common.condor.types import PoolLoad
from common.hostport import parse_address
from common.overlay.messages import Peer
from common.overlay.node import OverlayNode
from common.wire import Message
from poolD.messages import Announcement
from poolD.policy import Direction, Policy, Subject
from poolD.willing import WillingList

log = structlog.get_logger("poold.discovery")


@dataclass(frozen=True)
class DiscoverySettings:
    """What discovery needs: our pool and collector, and how far and how long our offers go."""

    pool: str
    collector: str  # our central manager's collector, host:port
    ttl: int = 1
    valid_for: float = 120.0  # how long our offers stand
    max_valid_for: float = 3600.0  # longer offers from others are refused as absurd


Send = tuple[str, Message]


@functools.lru_cache(maxsize=1 << 16)
def _host_of(addr: str) -> str:
    try:
        return parse_address(addr)[0]
    except ValueError:
        return addr  # a simulator address ("n5"): the name is all there is


@functools.lru_cache(maxsize=1 << 16)
def collector_problem(collector: str) -> str | None:
    """Why an offered collector may not go into FLOCK_TO (None: it may); cached like _host_of."""
    try:
        check_host_port(collector)
    except ValueError as e:
        return f"collector: {e}"
    return None


def peer_host(peer: Peer) -> str:
    """The host part of a peer's address, for policy rules; cached, since every announcement
    consults it for every routing-table peer (the 1000-pool simulation: millions of times)."""
    return _host_of(peer.addr)


class Discovery:
    """Our offers out, other pools' offers in (checked, recorded, forwarded); see the module docstring."""

    def __init__(
        self, settings: DiscoverySettings, overlay: OverlayNode, policy: Policy, willing: WillingList
    ) -> None:
        self.settings = settings
        self.overlay = overlay
        self.policy = policy
        self.willing = willing
        self.seq = 0
        self.epoch = 0  # faultD's epoch of our manager role, in our offers (issue 16)
        self.pool_of: dict[int, str] = {}  # overlay id -> pool name, learned from offers
        self.dropped: Counter[str] = Counter()
        self.accepted = 0
        self.decisions: list[str] = []  # recent policy decisions, newest last, for status
        self._seen: OrderedDict[tuple[int, int, int], None] = OrderedDict()
        self._pool_of_version = 0  # bumped when pool_of changes: row targets depend on it
        self._targets: dict[int, tuple[tuple[int, int, Policy], list[str]]] = {}

    def _note(self, text: str) -> None:
        self.decisions.append(text)
        del self.decisions[:-50]

    def announce(self, load: PoolLoad, now: float) -> list[Send]:
        """Offers for every routing-table row, starting from row 0, if we have free slots."""
        if load.free_slots <= 0:
            return []
        self.seq += 1
        first = Announcement(
            pool=self.settings.pool,
            collector=self.settings.collector,
            origin=self.overlay.me,
            seq=self.seq,
            free_slots=load.free_slots,
            total_slots=load.total_slots,
            queue_length=load.idle_jobs,
            utilization=load.utilization,
            valid_for=self.settings.valid_for,
            ttl=self.settings.ttl,
            row=0,
            epoch=self.epoch,
        )
        sends: list[Send] = []
        for row in range(self.overlay.table.used_rows()):
            targets = self._row_targets(row, now)
            if targets:
                ann = first if row == 0 else first.model_copy(update={"row": row})
                sends += [(addr, ann) for addr in targets]
        return sends

    def announce_targets(self, now: float) -> list[str]:
        """Every address of our routing table the policy lets us announce to (each once)."""
        targets: dict[str, None] = {}
        for row in range(self.overlay.table.used_rows()):
            targets |= dict.fromkeys(self._row_targets(row, now))
        return list(targets)

    def _row_targets(self, row: int, now: float) -> list[str]:
        """The addresses in a routing-table row that the policy lets us announce to.

        Remembered per row until the row, a peer's known pool name or the policy object changes;
        decided afresh while anyone is blacklisted, since those entries expire with time. The
        daemon announces every interval and the simulator ~30 times per pool and time unit, to
        the same peers, so deciding once is what makes the 1000-pool experiment affordable."""
        policy = self.policy
        if policy.blacklist:
            return self._decide_row(row, now)
        key = (self.overlay.table.version, self._pool_of_version, policy)
        cached = self._targets.get(row)
        if cached is not None and cached[0] == key:
            return cached[1]
        targets = self._decide_row(row, now)
        self._targets[row] = (key, targets)
        return targets

    def _decide_row(self, row: int, now: float) -> list[str]:
        targets = []
        for peer in self.overlay.table.row(row):
            subject = Subject(self.pool_of.get(peer.id), peer_host(peer))
            decision = self.policy.decide(subject, Direction.ANNOUNCE, now)
            log.debug(
                "announce decision",
                peer=peer.addr,
                pool=subject.pool,
                allowed=decision.allowed,
                rule=decision.rule,
            )
            if decision.allowed:
                targets.append(peer.addr)
            else:
                self._note(f"not announcing to {subject.pool or peer.addr}: {decision.rule}")
        return targets

    def on_announcement(
        self, ann: Announcement, now: float, take_claim: Callable[[], bool] | None = None
    ) -> list[Send]:
        """Check an offer, record it in the willing list, and forward it while its TTL lasts
        (at most our own [discovery] ttl: the sender does not decide how far it travels).
        `take_claim` is asked only once the offer passed every check and the policy: whether
        its word of the pool's collector is taken (the core follows a move then); an offer
        whose word is not is neither recorded nor forwarded. So an offer the policy refuses
        never moves the pool's collector, as a refused CollectorMoved does not."""
        key = (ann.origin.id, ann.seq, ann.row)
        if key in self._seen:
            self.dropped["duplicate"] += 1
            return []
        self._seen[key] = None
        if len(self._seen) > 10_000:
            self._seen.popitem(last=False)
        problem = self._absurd(ann)
        if problem is not None:
            self.dropped["absurd"] += 1
            log.warning("announcement dropped", pool=ann.pool, origin=ann.origin.addr, reason=problem)
            return []
        if self.pool_of.get(ann.origin.id) != ann.pool:
            self.pool_of[ann.origin.id] = ann.pool
            self._pool_of_version += 1
        decision = self.policy.decide(Subject(ann.pool, peer_host(ann.origin)), Direction.ACCEPT, now)
        log.debug("accept decision", pool=ann.pool, allowed=decision.allowed, rule=decision.rule)
        if decision.allowed and take_claim is not None and not take_claim():
            self.dropped["collector_claim"] += 1  # an older word, or a move refused (counted)
            return []
        forwards: list[Send] = []
        ttl = min(ann.ttl, self.settings.ttl)  # our [discovery] ttl: how far the federation's offers go
        if ttl < ann.ttl:
            self.dropped["ttl_capped"] += 1
        if ttl - 1 > 0:
            forward = ann.model_copy(update={"ttl": ttl - 1})
            forwards = [(addr, forward) for addr in self._row_targets(ann.row, now)]
        if not decision.allowed:
            self.dropped["policy"] += 1
            self.willing.remove(ann.pool)
            self._note(f"refused offer of {ann.pool}: {decision.rule}")
            return forwards
        if ann.pool not in self.willing.entries:
            self._note(f"accepting offers of {ann.pool}: {decision.rule}")
        self.willing.offer(ann, now)
        self.accepted += 1
        return forwards

    def _absurd(self, ann: Announcement) -> str | None:
        if ann.origin.id == self.overlay.me.id or ann.pool == self.settings.pool:
            return "our own offer"
        if ann.free_slots > ann.total_slots:
            return f"free_slots {ann.free_slots} > total_slots {ann.total_slots}"
        if ann.valid_for > self.settings.max_valid_for:
            return f"valid_for {ann.valid_for:.0f} s exceeds {self.settings.max_valid_for:.0f} s"
        if ann.row >= self.overlay.table.rows:  # forwarding it would index past our table
            return f"row {ann.row} beyond the routing table's {self.overlay.table.rows}"
        return collector_problem(ann.collector)  # it would go into our schedds' FLOCK_TO

"""faultD's role machine (seed §4.2, Fig. 4): Listener and Manager, takeover and return.

Pure: it is fed messages, timer firings, leaf-set changes and snapshots of the local
central-manager state, each with `now`, and returns what to send and what to change in HTCondor
(`RoleOutput`). The trio daemon (faultD.service) and the simulator (sim.faultd) drive the same
object.

Rules, beyond the seed's figure:
- Fencing. Every alive carries `(epoch, manager id)`. A node remembers the highest such token it
  has seen and ignores alives below it. A takeover uses the highest epoch its node has seen plus
  one, so a replaced manager that comes back (or a partition that heals) cannot pull listeners
  back to itself.
- Two managers at once (two candidates took over in the same instant, or a partition healed):
  each hears the other's alive; the one with the lower token steps down. Deterministic by id.
- A listener that still hears the manager ignores `manager_missing`, whichever manager it names:
  the sender's trouble is its own link, and a second manager would be worse than one listener
  waiting. One started less than the silence limit ago ignores it too (its alive may be coming).
- The original manager (`original = True`) takes its role back: when it hears a replacement's
  alive it sends `preempt_replacement`; the replacement answers with `handover` (its state),
  stops its collector and negotiator, and listens; the original restores that state and becomes
  manager with a higher epoch. With nobody's alive heard for `missed_alives` intervals after start,
  the original simply becomes manager.
- Trust (issue 14): a replica push is kept only from the manager this node follows, for the
  current epoch (the fencing token), naming that manager as its author, and with a version at
  most one above the `state_version` that manager's last alive announced: a ring member that is
  not the manager cannot plant a replica (which a takeover would restore), and the manager cannot
  make its versions jump out of reach of its successors. A handover is taken only from the
  manager this node preempted, and a preempt only from the configured original manager
  (`manager_hint`; with none configured, every preempt is refused). An alive from another
  manager is refused while the one this node follows is still heard, unless it comes from the
  original manager with an epoch at most one above the best seen; a managing original does not
  yield to a replacement's alive but preempts it (a forger cannot take a live pool with one
  datagram). Two replacements (a healed partition) still resolve by token. No alive or handover
  lifts a node that has seen an epoch into the last 2^60 but EPOCH_JUMP_LIMIT at a time; the
  manager's announced interval is taken within INTERVAL_SPREAD of ours; a replica beyond
  STATE_BYTES_LIMIT or near the counters' limit is refused. Who sent what is proven by the
  driver before a message reaches this machine (common.overlay.claims: the `sender` of every
  message is the certified signer).
- Network partition: see docs/faultd.md. In short, the side without the manager elects its own
  (like condor_had, split brain is accepted while the partition lasts, because each side can
  then still run jobs); when it heals, the lower token steps down and everybody repoints.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from enum import StrEnum

from common.events import Note, note
from common.overlay.ids import closeness, id_hex
from common.overlay.messages import Peer
from common.wire import Message
from faultD.messages import (
    MAX_EPOCH,
    STATE_BYTES_LIMIT,
    Alive,
    Handover,
    ManagerMissing,
    PoolState,
    PreemptReplacement,
    ReplicaAck,
    ReplicaPush,
    StateFile,
    token,
)

JUMP_CEILING = MAX_EPOCH >> 1
EPOCH_JUMP_LIMIT = 16
"""Epochs from JUMP_CEILING (2^60) on are taken only EPOCH_JUMP_LIMIT at a time above the highest
a node has seen (an alive, a handover), unless it has seen none (just started). Below it any
epoch is taken as before: an epoch grows by one per takeover, but nodes rebooted together (a
building cut off) elect from 1 and meet the pool's own epoch when the link heals, and a
replacement's may be far above an original that restarted meanwhile. Above it, no pool gets by
takeovers: a ring member signing an epoch of up to MAX_EPOCH - 1 had lifted the pool there with
two datagrams, and every successor, at MAX_EPOCH, was refused by all (security review). Now a
member can lift the pool to 2^60 - 1 at most, which leaves 2^60 takeovers."""
INTERVAL_SPREAD = 10.0
"""A manager's announced alive interval is taken within this factor of our own `alive_interval`:
listeners time its silence by it, and a tiny one (5e-324 passes `gt=0`) had them route
manager_missing in a busy loop, a huge one delay a failover by hours."""


class Role(StrEnum):
    """What this node is to the pool: a listener following a manager, or the manager."""

    LISTENER = "listener"
    MANAGER = "manager"


@dataclass(frozen=True)
class RoleParams:
    """The role machine's timing and K (replica holders); the daemon fills it from `[fault]`."""

    alive_interval: float = 1.0
    missed_alives: int = 3
    replicas: int = 3  # K
    replication_interval: float = 10.0
    preempt_retry: float = 2.0


# ---------------------------------------------------------------------------- HTCondor actions


@dataclass(frozen=True)
class PointTo:
    """Make the local daemons report to this collector (and its negotiator)."""

    collector: str


@dataclass(frozen=True)
class StartManager:
    """Run a collector and a negotiator here, restoring the replicated state first."""

    state: PoolState | None
    epoch: int


@dataclass(frozen=True)
class StopManager:
    """Stop this host's collector and negotiator (another node manages the pool now)."""


CondorAction = PointTo | StartManager | StopManager


@dataclass
class RoleOutput:
    """What every input returns: overlay sends, HTCondor changes, decisions to log, next wake-up."""

    broadcasts: list[Message] = field(default_factory=list)
    routes: list[tuple[int, Message]] = field(default_factory=list)
    directs: list[tuple[str, Message]] = field(default_factory=list)
    condor: list[CondorAction] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)  # decisions worth a log line (common.events)
    wakeup: float | None = None


class RoleMachine:
    """One machine's failover role as a pure state machine; see the module docstring."""

    def __init__(
        self,
        me: Peer,
        collector: str,
        params: RoleParams,
        rng: random.Random,
        *,
        original: bool,
        manager_hint: int | None = None,
    ) -> None:
        self.me = me
        self.collector = collector  # where a collector on this host would listen
        self.params = params
        self.rng = rng
        self.original = original
        self.manager_hint = manager_hint  # the original manager's id, if configured
        self.role = Role.LISTENER
        self.manager: Peer | None = None
        self.manager_collector: str | None = None
        self.best: tuple[int, int] = (0, 0)  # highest fencing token seen
        self.epoch = 0  # this node's epoch while it manages
        self.seq = 0
        self.incarnation = 0
        self.last_seq = -1
        self.last_incarnation = -1
        self.last_alive: float | None = None
        self.last_alive_msg: Alive | None = None
        self.alive_interval = params.alive_interval
        self.started = 0.0
        self.missing_at: float | None = None  # when manager_missing is next due
        self.missing_sent = 0
        self.next_alive = 0.0
        self.next_replication = 0.0
        self.preempt_at: float | None = None
        self.leaf_set: tuple[Peer, ...] = ()
        self.local_state: PoolState | None = None  # what this node, as manager, replicates
        self.replica: PoolState | None = None  # the latest state pushed to us by a manager
        self.replica_at: float | None = None
        self.acked: dict[int, int] = {}  # replica holder -> version it confirmed
        self.handover: tuple[int, str, Handover] | None = None  # (original id, addr, what we sent)
        self.challenged: int | None = None  # the replacement this original manager preempted
        self.challenged_addr: str | None = None  # where its preempt goes again until it hands over
        self.fenced = 0
        self.takeovers = 0
        self.refused: dict[str, int] = {}  # messages refused by the trust rules, by kind
        self._out = RoleOutput()

    # ------------------------------------------------------------------ inputs

    def start(self, now: float) -> RoleOutput:
        """Begin as a listener; `missed_alives` intervals without an alive count as a missing manager."""
        self.started = now
        self.missing_at = now + self._silence_limit()
        return self._flush(now)

    def on_timer(self, now: float) -> RoleOutput:
        """What is due: alive and replica pushes (manager), silence and preempt retries (listener)."""
        if self.role is Role.MANAGER:
            if now >= self.next_alive:
                self._send_alive(now)
            if now >= self.next_replication:
                self._replicate(now, force=True)
            if self.challenged_addr is not None and self.preempt_at is not None and now >= self.preempt_at:
                self._send_challenge(self.challenged_addr, now)  # its handover was lost (or not sent yet)
        else:
            if self.missing_at is not None and now >= self.missing_at:
                self._on_silence(now)
            if self.preempt_at is not None and now >= self.preempt_at and self.manager is not None:
                self._preempt(now)
        return self._flush(now)

    def on_message(self, msg: Message, now: float) -> RoleOutput:
        """Handle one faultD message from the ring or the bulk channel (others are ignored)."""
        handler = {
            Alive: self._on_alive,
            ManagerMissing: self._on_missing,
            PreemptReplacement: self._on_preempt,
            Handover: self._on_handover,
            ReplicaPush: self._on_replica,
            ReplicaAck: self._on_replica_ack,
        }.get(type(msg))
        if handler is not None:
            handler(msg, now)  # type: ignore[operator]
        return self._flush(now)

    def on_leaf_set(self, members: tuple[Peer, ...], now: float) -> RoleOutput:
        """The ring neighbours changed; a manager pushes its state to new replica holders at once."""
        self.leaf_set = members
        if self.role is Role.MANAGER:
            self._replicate(now, force=False)  # new nearest neighbours get the state at once
        return self._flush(now)

    def on_local_state(self, files: list[StateFile], now: float) -> RoleOutput:
        """The Replication Module read this host's central-manager state; push it if it changed."""
        checksum = PoolState.digest(files)
        if self.local_state is None or self.local_state.checksum != checksum:
            version = (self.local_state.version if self.local_state else 0) + 1
            if self.replica is not None:
                version = max(version, self.replica.version + 1)
            self.local_state = PoolState(
                manager=self.me.id,
                epoch=self.epoch,
                version=version,
                taken_at=now,
                files=files,
                checksum=checksum,
            )
            if self.role is Role.MANAGER:
                self._replicate(now, force=False)
        return self._flush(now)

    # ------------------------------------------------------------------ status

    def replica_holders(self) -> list[Peer]:
        """The K ring neighbours nearest this node's id: where the manager keeps its replicas."""
        ranked = sorted(self.leaf_set, key=lambda p: closeness(self.me.id, p.id))
        return ranked[: self.params.replicas]

    def status(self, now: float) -> dict[str, object]:
        """What `faultd status` shows of the role: manager, epoch, last alive, replicas."""
        return {
            "role": self.role.value,
            "node_id": id_hex(self.me.id),
            "original_manager": self.original,
            "manager": None if self.manager is None else id_hex(self.manager.id),
            "manager_address": None if self.manager is None else self.manager.addr,
            "manager_collector": self.manager_collector,
            "epoch": self.best[0],
            "seq": self.seq if self.role is Role.MANAGER else self.last_seq,
            "last_alive_s_ago": None if self.last_alive is None else round(now - self.last_alive, 3),
            "replica": None
            if self.replica is None
            else {
                "manager": id_hex(self.replica.manager),
                "version": self.replica.version,
                "epoch": self.replica.epoch,
                "files": [f.name for f in self.replica.files],
                # what each file holds, by SHA-256: e.g. whether poold's newest state file (poold
                # status "state_file") reached this holder, so a failover would resume from it
                "sha256": {f.name: hashlib.sha256(f.data).hexdigest() for f in self.replica.files},
                "age_s": None if self.replica_at is None else round(now - self.replica_at, 3),
            },
            "replica_holders": [p.addr for p in self.replica_holders()] if self.role is Role.MANAGER else [],
            "fenced_alives": self.fenced,
            "takeovers": self.takeovers,
            "refused": dict(self.refused),
        }

    # ------------------------------------------------------------------ listener

    def _silence_limit(self) -> float:
        return self.alive_interval * self.params.missed_alives

    def _on_alive(self, msg: Alive, now: float) -> None:
        tok = token(msg.epoch, msg.manager.id)
        if msg.manager.id == self.me.id:
            return  # our own broadcast
        if tok < self.best:
            self.fenced += 1
            return
        problem = self._alive_problem(msg, now)
        if problem is not None:
            self._refuse("alive", problem, msg.manager.addr, epoch=msg.epoch)
            if self.role is Role.MANAGER and self.original:
                self._challenge(msg, now)
            return
        if self.role is Role.MANAGER:
            # A manager's best token is its own, so a lower one was fenced above: this one wins.
            self._note(
                "step_down",
                f"alive from {msg.manager.addr} with epoch {msg.epoch}: stepping down",
                epoch=msg.epoch,
                manager=msg.manager.addr,
                own_epoch=self.epoch,
            )
            self._step_down()
        same = (
            self.manager is not None
            and self.manager.id == msg.manager.id
            and tok == self.best
            and msg.incarnation == self.last_incarnation
        )
        if same and msg.seq <= self.last_seq:
            return  # duplicate or reordered
        self.best = tok
        self.last_seq = msg.seq
        self.last_incarnation = msg.incarnation
        self.last_alive_msg = msg
        self.last_alive = now
        own = self.params.alive_interval
        self.alive_interval = min(max(msg.interval, own / INTERVAL_SPREAD), own * INTERVAL_SPREAD)
        self.missing_at = now + self._silence_limit()
        self.missing_sent = 0
        if not same or self.manager_collector != msg.collector:
            self._note(
                "new_manager",
                f"new manager {msg.manager.addr} (epoch {msg.epoch}), collector {msg.collector}",
                epoch=msg.epoch,
                manager=msg.manager.addr,
                collector=msg.collector,
            )
            self.manager = msg.manager
            self.manager_collector = msg.collector
            self._out.condor.append(PointTo(msg.collector))
            if self.original and msg.manager.id != self.me.id:
                self._preempt(now)

    def _heard_recently(self, now: float) -> bool:
        return self.last_alive is not None and now - self.last_alive < self._silence_limit()

    def _alive_problem(self, msg: Alive, now: float) -> str | None:
        """Why a higher-token alive must not move this node to its sender, or None.

        A ring member can sign an alive naming itself; only the manager's silence (or the
        configured original manager) may give it the pool. An epoch grows by one per takeover."""
        if msg.epoch >= MAX_EPOCH:
            return f"from {msg.manager.addr}: epoch {msg.epoch} is beyond any number of takeovers"
        if (jump := self._epoch_jump(msg.epoch)) is not None:
            return f"from {msg.manager.addr}: {jump}"
        from_original = self.manager_hint is not None and msg.manager.id == self.manager_hint
        if self.role is Role.MANAGER:
            if self.original:
                return f"from {msg.manager.addr}: the original manager preempts, it does not yield"
            return None  # two replacements (a healed partition): the lower token steps down
        if self.manager is None or msg.manager.id == self.manager.id or not self._heard_recently(now):
            return None
        if not from_original:
            return f"from {msg.manager.addr} while manager {self.manager.addr} is still heard"
        if msg.epoch > self.best[0] + 1:
            return f"epoch {msg.epoch} jumps beyond {self.best[0]} + 1"
        return None

    def _epoch_jump(self, epoch: int) -> str | None:
        """Why `epoch` must not be taken (JUMP_CEILING, EPOCH_JUMP_LIMIT), or None."""
        if epoch < JUMP_CEILING or epoch <= self.best[0] + EPOCH_JUMP_LIMIT or self.best == (0, 0):
            return None
        return f"epoch {epoch} jumps from {self.best[0]} into the last 2^60, where no pool gets by takeovers"

    def _challenge(self, msg: Alive, now: float) -> None:
        """The original manager, managing, hears a replacement (a healed partition, or a forger):
        it asks for the role as it would after a restart, and keeps managing meanwhile."""
        if self.preempt_at is not None and now < self.preempt_at:
            return
        self.challenged = msg.manager.id
        self._send_challenge(msg.manager.addr, now)

    def _send_challenge(self, addr: str, now: float) -> None:
        """Preempt the challenged replacement, again every preempt_retry until its handover comes:
        a replacement that stepped down sends no more alives, so a lost handover (a bulk body
        refused, a datagram lost) would otherwise leave us below its epoch and its listeners
        fenced off from us for good; asked again, it sends its handover again."""
        self._out.directs.append((addr, PreemptReplacement(original=self.me, collector=self.collector)))
        self.challenged_addr = addr
        self.preempt_at = now + self.params.preempt_retry

    def _on_silence(self, now: float) -> None:
        if self.manager is None and self.original:
            self._become_manager(
                now,
                state=self.replica,
                reason="no manager heard since start: the original manager takes its role",
            )
            return
        key = self.manager.id if self.manager is not None else self.manager_hint
        if key is None:
            self.missing_at = now + self._silence_limit()
            return
        self.missing_sent += 1
        self._note(
            "manager_silent",
            f"manager {id_hex(key)[:8]} silent: manager_missing #{self.missing_sent}",
            manager=id_hex(key),
            missing=self.missing_sent,
            silent_s=None if self.last_alive is None else round(now - self.last_alive, 3),
        )
        self._out.routes.append((key, ManagerMissing(manager=key, epoch=self.best[0], sender=self.me)))
        self.missing_at = now + self._silence_limit()

    def _on_missing(self, msg: ManagerMissing, now: float) -> None:
        if self.role is Role.MANAGER:
            # The seed ignores it (the next alive will reach the sender); we also answer the sender
            # directly, in case our broadcast tree does not reach it (e.g. it joined just now).
            self._out.directs.append((msg.sender.addr, self._alive()))
            return
        if self.manager is None and now - self.started < self._silence_limit():
            return  # just started: the manager's alive may be on its way (it answers the sender too)
        # Whatever manager the message names: while we hear ours, nobody else's silence makes
        # us one (security review: a ring member naming any other id took the pool).
        still_heard = self.manager is not None and self._heard_recently(now)
        if msg.epoch < self.best[0] or still_heard:
            # The sender is behind (a newer manager exists) or has link trouble of its own (we still
            # hear the manager): one node's view must not elect a second manager. Tell it what we know.
            if self.last_alive_msg is not None:
                self._out.directs.append((msg.sender.addr, self.last_alive_msg))
            return
        reason = f"manager_missing from {msg.sender.addr}: taking over as the closest live node"
        self._become_manager(now, state=self.replica, reason=reason)

    def _preempt(self, now: float) -> None:
        assert self.manager is not None
        self._out.directs.append(
            (self.manager.addr, PreemptReplacement(original=self.me, collector=self.collector))
        )
        self.preempt_at = now + self.params.preempt_retry

    def _refuse(self, kind: str, why: str, sender: str, **fields: object) -> None:
        """Count a message the trust rules refuse, and note it (event `<kind>_refused`)."""
        self.refused[kind] = self.refused.get(kind, 0) + 1
        self._note(f"{kind}_refused", f"{kind} refused: {why}", sender=sender, why=why, **fields)

    def _on_handover(self, msg: Handover, now: float) -> None:
        if not self.original:
            return
        jump = self._epoch_jump(msg.epoch)
        if msg.epoch >= MAX_EPOCH or jump is not None:
            why = f"from {msg.sender.addr}: {jump or f'epoch {msg.epoch} beyond any takeovers'}"
            self._refuse("handover", why, msg.sender.addr, epoch=msg.epoch)
            if self.challenged == msg.sender.id:  # no honest replacement answers so: ask no more
                self.challenged = self.challenged_addr = self.preempt_at = None
            return
        if self.role is Role.MANAGER:
            if self.challenged == msg.sender.id:
                # The replacement we challenged gave up; our epoch rises above its so that its
                # listeners follow us. We keep our own state: it is the one the pool ran on here.
                self.challenged = self.challenged_addr = self.preempt_at = None
                self._note(
                    "replacement_stepped_down",
                    f"handover from {msg.sender.addr}: the replacement stepped down",
                    sender=msg.sender.addr,
                    epoch=msg.epoch,
                )
                self._raise_epoch(now, max(msg.epoch, self.best[0] + 1))
            return
        if self.manager is None or msg.sender.id != self.manager.id:
            self._refuse("handover", f"from {msg.sender.addr}, not the manager we preempted", msg.sender.addr)
            return
        state = msg.state if msg.state is not None and msg.state.intact() else self.replica
        reason = f"handover from {msg.sender.addr}: resuming as manager"
        self._become_manager(now, state=state, epoch=max(msg.epoch, self.best[0] + 1), reason=reason)

    def _replica_problem(self, msg: ReplicaPush) -> str | None:
        """Why a push must not be kept (see the module docstring), or None."""
        state, manager = msg.state, self.manager
        if self.role is not Role.LISTENER or manager is None or msg.sender.id != manager.id:
            return f"from {msg.sender.addr}, which is not the manager we follow"
        if state.manager != msg.sender.id or token(state.epoch, state.manager) != self.best:
            return f"for epoch {state.epoch} of {id_hex(state.manager)[:8]}, not the current manager's"
        announced = self.last_alive_msg
        if announced is None or announced.manager.id != manager.id:
            return "no alive of this manager heard yet"
        if state.version > announced.state_version + 1:
            return f"version {state.version} beyond the announced {announced.state_version}"
        if state.version >= MAX_EPOCH:  # a successor's own next version must still encode
            return f"version {state.version} is beyond any number of changes"
        if (size := sum(len(f.data) for f in state.files)) > STATE_BYTES_LIMIT:
            return f"{size} bytes of state, more than {STATE_BYTES_LIMIT}"
        if not state.intact():
            return f"from {msg.sender.addr} fails its checksum"
        return None

    def _on_replica(self, msg: ReplicaPush, now: float) -> None:
        problem = self._replica_problem(msg)
        if problem is not None:
            self._refuse("replica", problem, msg.sender.addr, version=msg.state.version)
            return
        state = msg.state
        current = self.replica
        if current is None or (state.epoch, state.version) >= (current.epoch, current.version):
            self.replica = state
            self.replica_at = now
        self._out.directs.append((msg.sender.addr, ReplicaAck(sender=self.me, version=state.version)))

    # ------------------------------------------------------------------ manager

    def _become_manager(
        self, now: float, *, state: PoolState | None, reason: str, epoch: int | None = None
    ) -> None:
        previous = self.manager
        self.epoch = epoch if epoch is not None else self.best[0] + 1
        self._note(
            "takeover",
            f"{reason} (epoch {self.epoch})",
            epoch=self.epoch,
            manager=self.me.addr,
            collector=self.collector,
            previous=None if previous is None else previous.addr,
            silent_s=None if self.last_alive is None else round(now - self.last_alive, 3),
            state_version=None if state is None else state.version,
        )
        self.best = token(self.epoch, self.me.id)
        self.role = Role.MANAGER
        self.takeovers += 1
        self.incarnation = self.rng.getrandbits(63)
        self.seq = 0
        self.handover = None
        self.manager = self.me
        self.manager_collector = self.collector
        self.preempt_at = None
        self.missing_at = None
        self.acked.clear()
        if state is not None:
            self.local_state = state
        self._out.condor.append(StartManager(state=state, epoch=self.epoch))  # points here too
        self.next_replication = now
        self._send_alive(now)
        self._replicate(now, force=True)

    def _raise_epoch(self, now: float, epoch: int) -> None:
        """Stay manager (daemons untouched) under a new, higher fencing token."""
        self.epoch = epoch
        self.best = token(epoch, self.me.id)
        self.incarnation = self.rng.getrandbits(63)
        self.seq = 0
        self.acked.clear()
        self._send_alive(now)
        self._replicate(now, force=True)

    def _step_down(self) -> None:
        self.role = Role.LISTENER
        self._out.condor.append(StopManager())
        self.local_state = None

    def _alive(self) -> Alive:
        return Alive(
            manager=self.me,
            collector=self.collector,
            epoch=self.epoch,
            seq=self.seq,
            incarnation=self.incarnation,
            interval=self.params.alive_interval,
            state_version=self.local_state.version if self.local_state else 0,
        )

    def _send_alive(self, now: float) -> None:
        """Down the overlay's broadcast tree, and straight to the leaf set: a node that joined
        a moment ago may be missing from the tree, but the manager's leaf set learns of it first."""
        self.seq += 1
        alive = self._alive()
        self._out.broadcasts.append(alive)
        for peer in self.leaf_set:
            self._out.directs.append((peer.addr, alive))
        self.next_alive = now + self.params.alive_interval
        self._replicate(now, force=False)  # retries pushes not yet acknowledged

    def _replicate(self, now: float, *, force: bool) -> None:
        state = self.local_state
        if force:
            self.next_replication = now + self.params.replication_interval
        if state is None:
            return
        if state.epoch != self.epoch or state.manager != self.me.id:
            state = state.model_copy(update={"epoch": self.epoch, "manager": self.me.id})
            self.local_state = state
        for peer in self.replica_holders():
            if force or self.acked.get(peer.id, -1) < state.version:
                self._out.directs.append((peer.addr, ReplicaPush(sender=self.me, state=state)))

    def _on_replica_ack(self, msg: ReplicaAck, now: float) -> None:
        self.acked[msg.sender.id] = max(self.acked.get(msg.sender.id, -1), msg.version)

    def _on_preempt(self, msg: PreemptReplacement, now: float) -> None:
        if self.manager_hint is None:
            why = f"from {msg.original.addr}: no original manager (manager_name) configured"
            self._refuse("preempt", why, msg.original.addr)
            return
        if msg.original.id != self.manager_hint:
            why = f"from {msg.original.addr}, which is not the original manager"
            self._refuse("preempt", why, msg.original.addr)
            return
        if self.role is not Role.MANAGER:
            if self.handover is not None and self.handover[0] == msg.original.id:
                self._out.directs.append((msg.original.addr, self.handover[2]))  # ours was lost
            return
        self._note(
            "handover",
            f"original manager {msg.original.addr} is back: handing over",
            to=msg.original.addr,
            epoch=self.epoch + 1,
        )
        # We name the original's epoch, and fence ourselves below it, so that if we must take over
        # again later we cannot pick the epoch the original is about to use.
        handover = Handover(sender=self.me, epoch=self.epoch + 1, state=self.local_state)
        self.handover = (msg.original.id, msg.original.addr, handover)
        self._out.directs.append((msg.original.addr, handover))
        self._step_down()
        self.best = token(self.epoch + 1, msg.original.id)
        # Until the original's alive arrives we point at it already: it is about to manage.
        self.manager = msg.original
        self.manager_collector = msg.collector
        self.last_alive = now
        self.missing_at = now + self._silence_limit()
        self._out.condor.append(PointTo(msg.collector))

    # ------------------------------------------------------------------ plumbing

    def _note(self, event: str, text: str, **fields: object) -> None:
        self._out.notes.append(note(event, text, **fields))

    def _flush(self, now: float) -> RoleOutput:
        out, self._out = self._out, RoleOutput()
        times = []
        if self.role is Role.MANAGER:
            times += [self.next_alive, self.next_replication]
            if self.challenged_addr is not None and self.preempt_at is not None:
                times.append(self.preempt_at)
        else:
            times += [t for t in (self.missing_at, self.preempt_at) if t is not None]
        out.wakeup = min(times) if times else None
        return out

"""Repointing (issue 16): what other pools say of their collectors, and telling them of ours.

A pool's manager role can move to another machine (faultD's takeover, or the original taking
it back), and with it the collector our FLOCK_TO names. The pool says so in its offers and in a
CollectorMoved, each ordered by (epoch, seq). `CollectorMoves` keeps what each pool last said
(`CollectorClaim`), decides whether a word that names another collector is a move to follow
(newer, not a forged epoch jump, a good collector, not flapping), remembers which FLOCK_TO
collector moved where until FLOCK_TO follows, and when our own move is to be told again.

Pure logic the core owns, like poolD.discovery and poolD.flock_trust: it returns its verdicts
and counts into the core's counters; PoolCore sends, sets FLOCK_TO and asks the moved pool to
authorize our schedds again (PoolCore._collector_claim, _repoint, _reestablish).
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass

from common.events import Note, note
from common.overlay.messages import Peer
from poolD.discovery import collector_problem, peer_host
from poolD.messages import CollectorMoved
from poolD.policy import Direction, Policy, Subject
from poolD.state import MAX_POOLS

# A pool's collector may move at most MAX_MOVES times in MOVE_WINDOW seconds (a takeover and a
# takeback fit; a node that flaps does not redirect our FLOCK_TO more); our own move is told
# again after these delays (datagrams get lost).
MAX_MOVES = 3
MOVE_WINDOW = 300.0
MOVE_NOTICE_DELAYS = (0.0, 2.0, 6.0)
# A pool's epoch grows by one per takeover; a word whose epoch jumps further than this past what
# the pool said before is refused (a forged huge epoch would pin its collector for good).
MAX_EPOCH_JUMP = 1000
# What a pool said of its collector outranks an older (epoch, seq) only while it is said again:
# a word that no newer one confirmed for this long no longer does. A live manager confirms it
# with every offer; a lie (a forged epoch, the first word we heard, or a jump within
# MAX_EPOCH_JUMP) that is not repeated stops pinning the pool's collector, and a real failover
# of that pool repoints us again (a word signed more than the replay window ago never arrives).
EPOCH_TRUSTED_FOR = 600.0


@dataclass
class CollectorClaim:
    """What a pool last said of its collector (an offer or a CollectorMoved), ordered by (epoch,
    seq); `trust_domain` is the pool's, from its FlockReply (to ask the moved collector for our
    schedds' token); `heard_at`: when a word at this (epoch, seq) or newer last came
    (EPOCH_TRUSTED_FOR)."""

    collector: str
    origin: Peer
    epoch: int
    seq: int
    trust_domain: str | None = None
    heard_at: float = 0.0


@dataclass(frozen=True)
class Taken:
    """The verdict on what a pool said of its collector: `accepted` (False: the message is not
    to be taken at all), and the collector it moved from when it names a new one."""

    accepted: bool
    moved_from: str | None = None


class CollectorMoves:
    """Other pools' collectors as they last said them, their moves, and our own move's notices."""

    def __init__(self, pool: str, counters: Counter[str]) -> None:
        self.pool = pool  # ours: what we say of our own collector is not a claim to keep
        self.counters = counters  # the core's: the counts show in `poold status` with the rest
        self.claims: dict[str, CollectorClaim] = {}  # pool -> what it said of its collector
        self.history: dict[str, deque[float]] = {}  # pool -> when its collector moved, newest last
        self.moved: dict[str, str] = {}  # old collector -> new, while FLOCK_TO still names the old
        self.notices: list[float] = []  # when to tell others our collector moved

    def take(
        self, pool: str, collector: str, origin: Peer, epoch: int, seq: int, now: float, notes: list[Note]
    ) -> Taken:
        """Take what a pool says of its collector (the driver checked that the signer's
        certificate is the pool's and covers the collector's host). The same collector, or a
        first word: recorded. Another collector: a move, taken only when `(epoch, seq)` is newer
        than what the pool said before and the pool has not moved MAX_MOVES times in
        MOVE_WINDOW; the caller then follows it (`moved_from`). What no newer word confirmed for
        EPOCH_TRUSTED_FOR outranks nothing: any word is taken as newer then."""
        if pool == self.pool:
            return Taken(True)  # our own offer: discovery drops it
        claim = self.claims.get(pool)
        if claim is None:
            if len(self.claims) >= MAX_POOLS:
                oldest = next(iter(self.claims))
                del self.claims[oldest]
                self.history.pop(oldest, None)
            self.claims[pool] = CollectorClaim(collector, origin, epoch, seq, heard_at=now)
            return Taken(True)
        expired = now - claim.heard_at > EPOCH_TRUSTED_FOR
        if epoch > claim.epoch + MAX_EPOCH_JUMP and not expired:
            self.counters["collector_epoch_jumps"] += 1
            return Taken(False)
        newer = (epoch, seq) > (claim.epoch, claim.seq)
        if expired and not newer:
            self.counters["collector_claims_expired"] += 1
            newer = True
        if collector == claim.collector:
            if newer:
                claim.origin, claim.epoch, claim.seq, claim.heard_at = origin, epoch, seq, now
            return Taken(True)
        if not newer:
            self.counters["collector_moves_stale"] += 1
            return Taken(False)
        if collector_problem(collector) is not None:
            self.counters["collector_moves_refused"] += 1
            return Taken(False)
        moves = self.history.setdefault(pool, deque(maxlen=MAX_MOVES))
        if len(moves) == MAX_MOVES and now - moves[0] < MOVE_WINDOW:
            self.counters["collector_moves_limited"] += 1
            text = f"{pool} moved its collector {MAX_MOVES} times in {MOVE_WINDOW:.0f} s: {collector} refused"
            notes.append(note("collector_move_limited", text, pool=pool, collector=collector))
            return Taken(False)
        moves.append(now)
        old = claim.collector
        claim.collector, claim.origin, claim.epoch, claim.seq = collector, origin, epoch, seq
        claim.heard_at = now
        self.counters["collector_moves"] += 1
        text = f"{pool} moved its collector from {old} to {collector} (epoch {epoch})"
        notes.append(note("collector_moved", text, pool=pool, old=old, new=collector, epoch=epoch))
        for stale in [c for c in self.moved if c == collector]:
            del self.moved[stale]  # moved back before FLOCK_TO followed
        return Taken(True, old)

    def admits(self, msg: CollectorMoved, offered: bool, policy: Policy, now: float) -> bool:
        """Whether a CollectorMoved is to be taken at all: a pool we never heard of (no claim,
        no offer: `offered`) is ignored (nothing is kept for it), as is one the policy refuses."""
        if msg.pool not in self.claims and not offered:
            self.counters["collector_moves_unknown"] += 1
            return False
        decision = policy.decide(Subject(msg.pool, peer_host(msg.origin)), Direction.ACCEPT, now)
        if not decision.allowed:
            self.counters["collector_moves_refused"] += 1
            return False
        return True

    def follow(self, old: str, new: str) -> None:
        """FLOCK_TO names (or is about to name) `old`, which moved to `new`: `repoint` replaces it."""
        self.moved[old] = new

    def repoint(self, active: list[str], busy: bool) -> tuple[list[str], str] | None:
        """FLOCK_TO (`active`) with each moved collector replaced by its new one, and why; None
        when none moved, or while a FLOCK_TO change is on its way (`busy`: one at a time). Moves
        of collectors FLOCK_TO no longer names are forgotten."""
        if busy or not any(c in self.moved for c in active):
            if not busy:
                for gone in [c for c in self.moved if c not in active]:
                    del self.moved[gone]
            return None
        target: list[str] = []
        for c in active:
            new = self.moved.get(c, c)
            if new not in target:
                target.append(new)
        moved = ", ".join(f"{c} -> {self.moved[c]}" for c in active if c in self.moved)
        self.moved = {}
        return target, f"collector moved: {moved}"

    def schedule_notices(self, now: float) -> None:
        """Our collector moved: tell of it now and twice more (MOVE_NOTICE_DELAYS)."""
        self.notices = [now + d for d in MOVE_NOTICE_DELAYS]

    def notice_due(self, now: float) -> bool:
        """Whether a notice of our move is due now (it is then counted as sent)."""
        if not self.notices or self.notices[0] > now:
            return False
        while self.notices and self.notices[0] <= now:
            self.notices.pop(0)
        return True

    def next_notice(self) -> float | None:
        """When the next notice of our move is due (None: none is)."""
        return self.notices[0] if self.notices else None

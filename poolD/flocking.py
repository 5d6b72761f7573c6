"""The Flocking Manager's decision (seed §3.2, §4.1): when local jobs wait, point the schedds'
FLOCK_TO at the nearest willing pools that can take them; when the pool has been quiet (free
slots, no idle jobs) for `withdraw_after`, take it back. Pure: the daemon applies the decision
through the gateway."""

from __future__ import annotations

from dataclasses import dataclass

from common.condor.types import PoolLoad
from poolD.willing import WillingEntry


@dataclass(frozen=True)
class FlockDecision:
    """One round's answer for FLOCK_TO, and the reason that goes into the decision log."""

    flock_to: list[str] | None  # collectors in order; None: leave FLOCK_TO as it is; []: withdraw
    reason: str


def format_flock_to(collectors: list[str]) -> str:
    """A FLOCK_TO value naming these collectors, in order."""
    return ", ".join(collectors)


def parse_flock_to(value: str | None) -> list[str]:
    """The collectors in a FLOCK_TO value as read back (comma or space separated; [] if unset)."""
    if not value:
        return []
    return [part for part in value.replace(",", " ").split() if part]


def choose_flock_to(willing: list[WillingEntry], demand: int, max_pools: int) -> list[WillingEntry]:
    """The pools FLOCK_TO names: the nearest `max_pools`, except that when these cannot take
    `demand` jobs but some farther ones can, farther pools that offer more free slots take the
    place of the nearer ones that offer fewest, and only as far out as needed.

    `willing` is nearest first (`WillingList.ordered`: by sublist, then measured round trip). The
    pools that must be named are those of the smallest k whose nearest k pools offer `demand` free
    slots among their best `max_pools` (most free slots; the nearer of equals); the places left go
    to the nearest of the others (another pool may take the slots a pool offered first). A
    farther pool is named in place of a nearer one only when the nearer cannot absorb the queue
    and the farther can (seed §3.2.1: "a pool always contacts nearby pools first"). When no
    `max_pools` willing pools together can take the queue, the nearest `max_pools`: naming the
    largest offers however far would send every badly overloaded pool that hears them to the
    same few, where the one that waits longest loses the near slots it has to itself (issue 18,
    item 5: 1000 pools, seed 2, longest wait 483 -> 518 with that rule). Returned nearest first."""
    if demand <= 0:
        return []
    best: list[int] = []  # indices into `willing`: the best `max_pools` of the prefix seen so far
    for k in range(len(willing)):
        best.append(k)
        if len(best) > max_pools:
            best.remove(min(best, key=lambda i: (willing[i].free_slots, -i)))
        if sum(willing[i].free_slots for i in best) >= demand:
            break
    else:
        return willing[:max_pools]  # nothing covers the queue: the nearest, as without a queue to cover
    named = set(best)
    spare = [i for i in range(len(willing)) if i not in named][: max_pools - len(named)]
    return [willing[i] for i in sorted(named.union(spare))]


class FlockingManager:
    """Decides each round whether FLOCK_TO should change; `active` is the FLOCK_TO the schedds took."""

    def __init__(self, *, max_pools: int = 5, withdraw_after: float = 300.0) -> None:
        self.max_pools = max_pools
        self.withdraw_after = withdraw_after
        self.quiet_since: float | None = None
        self.active: list[str] = []

    def changes(self, target: list[str]) -> bool:
        """Whether applying `target` is worth a schedd reconfig: it withdraws, adds a pool, or
        drops one (a pool that left the willing list, full now or its offer expired, or one that
        a farther pool offering more replaced). A new order among the same pools leaves FLOCK_TO as it is."""
        if not target:
            return bool(self.active)
        return set(target) != set(self.active)

    def decide(self, load: PoolLoad, willing: list[WillingEntry], now: float) -> FlockDecision:
        """Flock to the nearest willing pools that can take the idle jobs beyond our free slots
        (`choose_flock_to`) while idle jobs outnumber free slots; withdraw once quiet
        (free slots, no idle jobs) for `withdraw_after`; else None: leave it."""
        idle, free = load.idle_jobs, load.free_slots
        if idle > free:
            self.quiet_since = None
            if not willing:
                return FlockDecision(None, f"{idle} idle jobs > {free} free slots, but no willing pool")
            chosen = choose_flock_to(willing, idle - free, self.max_pools)
            target = [e.collector for e in chosen]
            return FlockDecision(
                target, f"{idle} idle jobs > {free} free slots: flock to {len(target)} pool(s)"
            )
        if free > 0 and idle == 0:
            if self.quiet_since is None:
                self.quiet_since = now
            if self.active and now - self.quiet_since >= self.withdraw_after:
                return FlockDecision(
                    [], f"no idle jobs and {free} free slots for {now - self.quiet_since:.0f} s"
                )
            return FlockDecision(None, "quiet")
        self.quiet_since = None
        return FlockDecision(None, f"{idle} idle jobs, {free} free slots: keep")

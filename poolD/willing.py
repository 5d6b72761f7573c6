"""The willing_list (seed §3.2.1): pools that offered us free slots, nearest first.

It is an array of sublists: the i-th holds pools whose offer reached us through row i of a routing
table, and thanks to proximity neighbour selection each sublist is exponentially farther than the
one before. Within a sublist pools are ordered by measured round-trip time, in buckets of
`resolution` seconds; within a bucket more free slots come first, then a random order, so that
many pools that learn of the same free pool do not all pile onto it. Each pool's random draw is
kept while its entry lives (redrawing it with every offer would reshuffle FLOCK_TO, and every
change of FLOCK_TO reconfigures the schedds). Entries expire when their offer does.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from common.overlay.messages import Peer
from poolD.messages import Announcement


@dataclass(slots=True)
class WillingEntry:
    """One pool's live offer; `row` is the lowest row it came through, `tiebreak` its kept draw."""

    pool: str
    collector: str
    origin: Peer
    row: int
    free_slots: int
    total_slots: int
    queue_length: int
    utilization: float
    expires_at: float
    tiebreak: float


class WillingList:
    """The pools that offered us free slots, by name; `ordered` gives them nearest first."""

    def __init__(self, rng: random.Random, *, resolution: float = 0.005) -> None:
        self.rng = rng
        self.resolution = resolution
        self.entries: dict[str, WillingEntry] = {}

    def offer(self, ann: Announcement, now: float) -> WillingEntry:
        """Record (or refresh) a pool's offer; the newest offer of a pool replaces the older."""
        previous = self.entries.get(ann.pool)
        if previous is not None and previous.expires_at > now:
            row, tiebreak = min(previous.row, ann.row), previous.tiebreak
        else:
            row, tiebreak = ann.row, self.rng.random()
        entry = WillingEntry(
            pool=ann.pool,
            collector=ann.collector,
            origin=ann.origin,
            row=row,
            free_slots=ann.free_slots,
            total_slots=ann.total_slots,
            queue_length=ann.queue_length,
            utilization=ann.utilization,
            expires_at=now + ann.valid_for,
            tiebreak=tiebreak,
        )
        self.entries[ann.pool] = entry
        return entry

    def remove(self, pool: str) -> None:
        """Forget a pool's offer (the policy refused it, or it was blacklisted)."""
        self.entries.pop(pool, None)

    def expire(self, now: float) -> list[str]:
        """Drop the entries whose offer has run out; returns their pools."""
        gone = [p for p, e in self.entries.items() if e.expires_at <= now]
        for pool in gone:
            del self.entries[pool]
        return gone

    def ordered(
        self, now: float, rtt: Callable[[int], float | None], *, within: float | None = None
    ) -> list[WillingEntry]:
        """Live entries, sublist by sublist, nearest first (unmeasured ones last in their sublist).
        With `within` (seconds), only pools measured no farther than that round trip: a far pool
        is left out even when it is the only one willing, an unmeasured one until it is measured."""
        self.expire(now)
        ranked = []
        for e in self.entries.values():
            measured = rtt(e.origin.id)
            if within is not None and (measured is None or measured > within):
                continue
            bucket = math.inf if measured is None else math.floor(measured / self.resolution)
            ranked.append(((e.row, bucket, -e.free_slots, e.tiebreak), e))
        ranked.sort(key=lambda pair: pair[0])
        return [e for _, e in ranked]

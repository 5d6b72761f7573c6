"""SimNetwork's bucketed event queue runs events in exactly the order one heap would: by time,
ties in insertion order, including events scheduled in the past, in the current bucket, while
running, and after run_until stopped short of a bucket it had already opened."""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable

from sim.network import BUCKET_SECONDS, SimNetwork


class _OneHeap:
    """The reference: every event in one heap of (time, insertion number, action)."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = 0

    def call(self, at: float, fn: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (at, self._seq, fn))

    def run_until(self, t_end: float) -> None:
        while self._heap and self._heap[0][0] <= t_end:
            self.now, _, fn = heapq.heappop(self._heap)
            fn()
        self.now = max(self.now, t_end)


def _script(net: SimNetwork | _OneHeap) -> list[int]:
    """Events that schedule events (near, far, in the past), run in uneven steps; returns the
    order in which they ran."""
    rng = random.Random(3)
    ran: list[int] = []
    counter = [0]

    def schedule(at: float) -> None:
        counter[0] += 1
        n = counter[0]

        def step() -> None:
            ran.append(n)
            for _ in range(rng.randrange(3)):
                delay = rng.choice([0.0, BUCKET_SECONDS / 3, BUCKET_SECONDS, 0.25, 7.0, -0.5])
                schedule(net.now + delay)

        net.call(at, step)

    for _ in range(300):
        schedule(rng.choice([rng.uniform(0, 20), round(rng.uniform(0, 20), 2), 5.0]))
    t = 0.0
    while t < 120:
        t += rng.choice([0.003, 0.5, 2.0, 9.0])  # stops inside buckets, at their edges, between
        net.run_until(t)
        if rng.random() < 0.2:
            schedule(net.now + rng.choice([0.0, 0.001, 3.0, -1.0]))  # from outside the loop
    return ran


def test_bucketed_queue_runs_events_in_single_heap_order() -> None:
    ran = _script(SimNetwork(lambda i, j: 0.0, seed=1))
    assert len(ran) > 500
    assert ran == _script(_OneHeap())

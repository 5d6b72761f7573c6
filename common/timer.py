"""The single timer a pure protocol core asks for, on trio.

Cores (the overlay node, faultD's role machine) return the time they next want to be woken; the
driver keeps one deadline, moves it whenever a newer answer arrives, and calls back when it
passes. Shared by every driver so that they all wake their cores the same way.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

import trio


class Wakeup:
    """The driver's one deadline for its core; `run` fires it, `set` moves it."""

    def __init__(self) -> None:
        self.deadline = math.inf
        self._scope: trio.CancelScope | None = None

    def set(self, deadline: float) -> None:
        """Move the deadline, earlier or later, even while `run` is waiting."""
        self.deadline = deadline
        if self._scope is not None:
            self._scope.deadline = deadline

    async def run(self, fire: Callable[[float], Awaitable[None]]) -> None:
        """Forever: wait for the deadline, then `fire(now)` (which usually sets the next one)."""
        while True:
            with trio.CancelScope(deadline=self.deadline) as scope:
                self._scope = scope
                await trio.sleep_forever()
            self._scope = None
            now = trio.current_time()
            if now >= self.deadline:
                self.deadline = math.inf
                await fire(now)

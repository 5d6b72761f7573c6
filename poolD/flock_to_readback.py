"""After an activation, FLOCK_TO as the schedds have it (issue 16): a pure part of the core.

The replica lags the active poold by about 2 s (its state file is written within a second of a
change, and faultd reads it every `state_interval`), so a failover right after a FLOCK_TO
change resumes without it; a core that does not know the schedds' FLOCK_TO would never withdraw
it. So an activated core asks for FLOCK_TO as every schedd has it (`ReadFlockTo`). The schedds
report to our collector a few seconds after the takeover: asked every `READ_BACK_EVERY` until
they do, `READ_BACK_TRIES` times at most. Their value is taken only if they all agree, it
differs from what the core has, and the core changed nothing while it was being read (else the
core's next round decides).
"""

from __future__ import annotations

from dataclasses import dataclass

READ_BACK_EVERY = 2.0  # seconds between asks while no schedd reports to our collector
READ_BACK_TRIES = 30  # the schedds report to a new collector within seconds: a minute at most

# What the core has: FLOCK_TO as it believes it set, and the change under way (None: none)
Snapshot = tuple[tuple[str, ...], object]


@dataclass(frozen=True)
class ReadFlockTo:
    """Read FLOCK_TO as each schedd of the pool has it and feed it to `on_flock_to_read` (None:
    no schedd reports to the collector yet, or one could not be asked)."""


class FlockToReadBack:
    """When to ask for the schedds' FLOCK_TO after an activation, and whether to take it."""

    def __init__(self) -> None:
        self.tries_left = 0
        self.next_at: float | None = None  # when to ask again (None: not waiting to)
        self._asked_with: Snapshot | None = None  # the core's snapshot when the read was asked

    def start(self) -> None:
        """An activation: ask now (the caller does, through `asked`)."""
        self.tries_left = READ_BACK_TRIES
        self.next_at = None

    def due(self, now: float) -> bool:
        """Whether a read should be asked for now."""
        if self._asked_with is not None or self.tries_left <= 0:
            return False
        return self.next_at is None or now >= self.next_at

    def asked(self, snapshot: Snapshot) -> None:
        """A read was asked for, the core being as `snapshot` says: its answer is compared
        with the core as it is then."""
        self.tries_left -= 1
        self.next_at = None
        self._asked_with = snapshot

    def on_read(
        self, seen: dict[str, list[str]] | None, snapshot: Snapshot, now: float
    ) -> tuple[str, ...] | None:
        """The FLOCK_TO to take from the schedds, if any. A read nobody asked for (another
        activation's, or one fed twice) changes nothing."""
        before, self._asked_with = self._asked_with, None
        if before is None:
            return None
        if seen is None:
            self.next_at = now + READ_BACK_EVERY if self.tries_left > 0 else None
            return None
        self.tries_left, self.next_at = 0, None
        values = {tuple(v) for v in seen.values()}
        if len(values) != 1 or snapshot != before:
            return None
        (value,) = values
        return None if value == snapshot[0] else value

    def wakeup(self) -> float | None:
        """When the core's timer should ask again (None: no read is waiting to be asked)."""
        return self.next_at if self.tries_left > 0 and self._asked_with is None else None

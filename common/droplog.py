"""Logging of dropped messages that a flood cannot turn into a flood of log lines.

Every drop is counted exactly by its owner (`MessageCodec.drops`, `Sealer.drops`, ...) and shown
in `status`; this module only decides what reaches the log. Within each `interval`, the first drop
of a (protocol, peer, reason) is logged at once with its detail, as one WARNING line; further drops
of that key are only counted, and summarised in one line per key when the interval is over
("N more from PEER for REASON"). At most `max_first_lines` keys get a line of their own per
interval, so that a flood from spoofed source addresses (a new peer per datagram) costs a handful
of lines: the others are folded into one summary per reason. Memory is bounded by `max_keys`.

A summary is written by the first drop after its interval ends (or by `flush`, which `status`
calls), so a burst followed by silence is summarised at the next drop or status query.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import structlog

_OTHERS = "(other peers)"


class DropLog:
    """Rate-limited WARNING lines about dropped messages, per protocol, peer and reason."""

    def __init__(
        self,
        logger_name: str = "drops",
        *,
        interval: float = 60.0,
        max_first_lines: int = 10,
        max_keys: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log = structlog.get_logger(logger_name)
        self.interval = interval
        self.max_first_lines = max_first_lines
        self.max_keys = max_keys
        self.clock = clock
        self._window_start: float | None = None
        self._first_lines = 0
        self._suppressed: Counter[tuple[str, str, str]] = Counter()  # drops not logged, per key
        self._seen: set[tuple[str, str, str]] = set()  # keys that had their line this interval

    def drop(self, protocol: str, peer: object, reason: str, detail: str) -> None:
        """One dropped message: logged now, or counted towards this interval's summary."""
        now = self.clock()
        if self._window_start is None or now - self._window_start >= self.interval:
            self.flush()
            self._window_start = now
        key = (protocol, str(peer), reason)
        if key in self._seen:
            self._suppressed[key] += 1
            return
        if self._first_lines < self.max_first_lines and len(self._seen) < self.max_keys:
            self._first_lines += 1
            self._seen.add(key)
            self.log.warning("message dropped", protocol=protocol, peer=key[1], reason=reason, detail=detail)
            return
        self._suppressed[(protocol, _OTHERS, reason)] += 1

    def flush(self) -> None:
        """Write the summaries of the interval so far and start a new one."""
        for (protocol, peer, reason), count in sorted(self._suppressed.items()):
            self.log.warning(
                "messages dropped",
                protocol=protocol,
                peer=peer,
                reason=reason,
                count=count,
                detail=f"{count} more dropped in the last {self.interval:g} s (rate-limited log)",
            )
        self._suppressed.clear()
        self._seen.clear()
        self._first_lines = 0
        self._window_start = None

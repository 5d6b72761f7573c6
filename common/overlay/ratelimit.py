"""Per-peer rate limits: a token bucket per source, in bounded memory.

A flood from one source must not buy unbounded CPU (every datagram that passes the ring key's MAC
costs an Ed25519 verification) or memory. Each source gets `burst` tokens, refilled at `rate` per
second; a message without a token is dropped and counted. At most `max_peers` buckets are kept;
the least recently used is forgotten first (it starts full again, which costs at most one burst).
Pure: callers pass `now`.
"""

from __future__ import annotations

from collections import OrderedDict


class PeerRateLimiter:
    """Token buckets keyed by peer (a source address); see the module docstring."""

    def __init__(self, rate: float, burst: float, *, max_peers: int = 4096) -> None:
        if rate <= 0 or burst < 1 or max_peers < 1:
            raise ValueError("rate must be positive, burst and max_peers at least 1")
        self.rate = rate
        self.burst = burst
        self.max_peers = max_peers
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # peer -> (tokens, at)

    def allow(self, peer: str, now: float) -> bool:
        """Take one token of `peer`'s bucket; False if it has none left."""
        tokens, at = self._buckets.pop(peer, (self.burst, now))
        tokens = min(self.burst, tokens + max(0.0, now - at) * self.rate)
        allowed = tokens >= 1.0
        self._buckets[peer] = (tokens - 1.0 if allowed else tokens, now)
        if len(self._buckets) > self.max_peers:
            self._buckets.popitem(last=False)
        return allowed

    def __len__(self) -> int:
        return len(self._buckets)

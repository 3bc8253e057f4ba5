"""Token buckets per client address, to slow down registration floods: state in memory, no
I/O, and the caller passes the clock."""

from __future__ import annotations

from dataclasses import dataclass

_MAX_KEYS = 10_000


@dataclass
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    """`rate` requests a second per key on average, bursts of up to `burst`."""

    def __init__(self, rate: float, burst: int) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be positive and burst at least 1")
        self.rate = rate
        self.burst = burst
        self._buckets: dict[str, _Bucket] = {}

    def wait(self, key: str, now: float) -> float:
        """0 when a request from key may go now (and counts it); else seconds until one may."""
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= _MAX_KEYS:
                self._forget_full(now)
            bucket = self._buckets[key] = _Bucket(float(self.burst), now)
        bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.updated) * self.rate)
        bucket.updated = now
        if bucket.tokens >= 1:
            bucket.tokens -= 1
            return 0.0
        return (1 - bucket.tokens) / self.rate

    def _forget_full(self, now: float) -> None:
        """A bucket that has refilled holds no information: drop it, bounding memory."""
        full = [key for key, b in self._buckets.items()
                if b.tokens + (now - b.updated) * self.rate >= self.burst]
        for key in full:
            del self._buckets[key]

"""Token buckets by key: per-principal request budgets and per-address failed
authentications (docs/deployment.md, "Load shedding").

Each key has an ``aiolimiter.AsyncLimiter``: a leaky bucket that holds ``burst``
and drains at ``per_second``, which is a token bucket seen from the other side. A
request that finds it full is refused at once, never queued: a server that waits for
capacity only moves the overload into its memory. The delay it is told to wait is the
time one token takes to come back (``1 / per_second``), an upper bound of the real wait.
"""

from __future__ import annotations

from collections.abc import Mapping

from aiolimiter import AsyncLimiter

# Keys remembered at once; past it, buckets that have drained completely are forgotten
# (a new bucket starts full, so forgetting an idle one changes nothing).
MAX_KEYS = 100_000


class TokenBuckets:
    def __init__(
        self,
        per_second: float,
        burst: int,
        overrides: Mapping[str, tuple[float, int]] | None = None,
        max_keys: int = MAX_KEYS,
    ) -> None:
        """``per_second`` 0 means unlimited (for every key without an override)."""
        self._default = (per_second, burst)
        self._overrides = dict(overrides or {})
        self._buckets: dict[str, AsyncLimiter | None] = {}
        self._max_keys = max_keys

    def _bucket(self, key: str) -> AsyncLimiter | None:
        try:
            return self._buckets[key]
        except KeyError:
            pass
        if len(self._buckets) >= self._max_keys:
            self._forget_idle()
        per_second, burst = self._overrides.get(key, self._default)
        bucket = AsyncLimiter(burst, burst / per_second) if per_second > 0 else None
        self._buckets[key] = bucket
        return bucket

    def _forget_idle(self) -> None:
        self._buckets = {
            key: bucket
            for key, bucket in self._buckets.items()
            if bucket is not None and not bucket.has_capacity(bucket.max_rate)
        }
        if len(self._buckets) >= self._max_keys:  # every one busy: memory wins
            self._buckets.clear()

    def empty(self, key: str) -> float | None:
        """Seconds until ``key`` has a token again, or None if it has one now."""
        bucket = self._bucket(key)
        if bucket is None or bucket.has_capacity():
            return None
        return bucket.time_period / bucket.max_rate

    async def take(self, key: str) -> float | None:
        """Takes a token from ``key``'s bucket: None if there was one, else the seconds
        until there is (nothing taken). Never waits."""
        delay = self.empty(key)
        if delay is not None:
            return delay
        bucket = self._buckets.get(key)
        if bucket is not None:
            await bucket.acquire()  # has capacity: returns at once
        return None

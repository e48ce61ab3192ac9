"""Token buckets by key: per-principal request budgets and per-address failed
authentications (docs/deployment.md, "Load shedding").

Each key has an ``aiolimiter.AsyncLimiter``: a leaky bucket that holds ``burst``
and drains at ``per_second``, which is a token bucket seen from the other side. A
request that finds it full is refused at once, never queued: a server that waits for
capacity only moves the overload into its memory. The delay it is told to wait is the
time the tokens asked for take to come back (``tokens / per_second``), an upper bound
of the real wait. A request that costs several tokens (a batch) takes them all or none.
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

    def empty(self, key: str, tokens: int = 1) -> float | None:
        """Seconds until ``key`` has ``tokens`` tokens again (at most: the time they take
        to come back into an empty bucket), or None if it has them now. More tokens
        than the bucket holds count as a full bucket."""
        bucket = self._bucket(key)
        if bucket is None:
            return None
        tokens = min(tokens, int(bucket.max_rate))
        if bucket.has_capacity(tokens):
            return None
        return tokens * bucket.time_period / bucket.max_rate

    async def take(self, key: str, tokens: int = 1) -> float | None:
        """Takes ``tokens`` tokens from ``key``'s bucket, all or none: None if it had
        them, else the seconds until it will (nothing taken). Never waits. More than
        the bucket holds (a batch larger than the burst) takes a full bucket, so such a
        request is admitted once the bucket has refilled rather than never."""
        delay = self.empty(key, tokens)
        if delay is not None:
            return delay
        bucket = self._buckets.get(key)
        if bucket is not None:
            await bucket.acquire(min(tokens, bucket.max_rate))  # has capacity: at once
        return None

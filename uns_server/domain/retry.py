"""Retry schedule: exponential backoff with equal jitter.

After the n-th failed attempt of a cycle the next one is due after ``d/2 + rand() * d/2``
seconds, where ``d = min(cap, base * 2**(n-1))``. Half the delay is fixed so a retry never
fires immediately; the other half spreads a burst of failures apart. A provider's
Retry-After is a floor: the schedule never fires earlier than it asked.

Channel adapters say *whether* a failure is retryable (and any Retry-After); this module
only says *when*. The random source is injected so the schedule is testable.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

BASE_SECONDS_DEFAULT = 1.0
CAP_SECONDS_DEFAULT = 300.0


def backoff_seconds(
    cycle_attempt: int,
    *,
    base_seconds: float = BASE_SECONDS_DEFAULT,
    cap_seconds: float = CAP_SECONDS_DEFAULT,
    rand: Callable[[], float],
    retry_after_seconds: float | None = None,
) -> float:
    """Seconds to wait after failed attempt number ``cycle_attempt`` (1-based).

    ``rand`` returns a float in [0, 1] (``random.random``). Raises ``ValueError`` for an
    attempt below 1, a non-positive base, a cap below the base, or ``rand`` out of range.
    """
    if cycle_attempt < 1:
        raise ValueError(f"cycle_attempt must be at least 1, got {cycle_attempt}")
    if not 0 < base_seconds <= cap_seconds:
        raise ValueError(f"need 0 < base_seconds <= cap_seconds, got {base_seconds}, {cap_seconds}")
    r = rand()
    if not 0.0 <= r <= 1.0:
        raise ValueError(f"rand() must return a value in [0, 1], got {r}")
    # Exponent clamped: 2**64 * base exceeds any sensible cap and never overflows a float.
    ceiling = min(cap_seconds, base_seconds * 2.0 ** min(cycle_attempt - 1, 64))
    delay = ceiling / 2 + r * ceiling / 2
    if retry_after_seconds is not None:
        delay = max(delay, retry_after_seconds)
    return delay


def next_attempt_at(
    now: datetime,
    cycle_attempt: int,
    *,
    base_seconds: float = BASE_SECONDS_DEFAULT,
    cap_seconds: float = CAP_SECONDS_DEFAULT,
    rand: Callable[[], float],
    retry_after_seconds: float | None = None,
) -> datetime:
    """When the attempt after failed attempt ``cycle_attempt`` is due (see module doc)."""
    return now + timedelta(
        seconds=backoff_seconds(
            cycle_attempt,
            base_seconds=base_seconds,
            cap_seconds=cap_seconds,
            rand=rand,
            retry_after_seconds=retry_after_seconds,
        )
    )


def deferral_seconds(
    retry_after_seconds: float | None,
    deferral: int,
    *,
    busy_seconds: float | None = None,
    rand: Callable[[], float],
) -> float:
    """How long a deferred attempt waits (``lifecycle.decide_settlement``): the
    provider's Retry-After when it gave one; a channel this process did not call (its
    bulkhead full) ``busy_seconds``; a throttle without a hint the backoff of the
    deferral's number in its cycle (1-based)."""
    if retry_after_seconds is not None:
        return retry_after_seconds
    if busy_seconds is not None:
        return busy_seconds
    return backoff_seconds(deferral, rand=rand)

"""The message-update lifecycle: an update owed to a sent message (Slack chat.update,
PagerDuty acknowledge/resolve) once its obligation settled.

    PENDING (unleased) --claim: due, lease free--> PENDING (leased, attempts + 1)
    PENDING (leased) --settle: the provider took it--> DONE
    PENDING (leased) --settle: transient, attempts left--> PENDING (unleased, backoff)
    PENDING (leased) --settle: permanent, or MAX_ATTEMPTS used--> FAILED (given up)
    PENDING (leased) --lease expires unsettled--> claimable again

Only PENDING rows move; DONE and FAILED are final. Every settlement is fenced by the
lease token its claim issued (``store.message_updates``): a worker whose lease expired
and whose row another worker claimed since changes nothing. The rules are here, pure;
the worker (``workers.message_updates``) applies them and the store writes them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from uns_server.domain.retry import next_attempt_at

# Attempts (claims) before an update that keeps failing transiently is given up.
MAX_ATTEMPTS = 10


class UpdateStatus(StrEnum):
    PENDING = "PENDING"
    DONE = "DONE"
    FAILED = "FAILED"


CLAIMABLE = UpdateStatus.PENDING


def claimable(
    status: UpdateStatus, next_attempt: datetime, lease_until: datetime | None, now: datetime
) -> bool:
    """May a worker claim this update now? (The store's claim query says the same.)"""
    return (
        status is CLAIMABLE and next_attempt <= now and (lease_until is None or lease_until <= now)
    )


@dataclass(frozen=True)
class Done:
    """The provider took the update."""


@dataclass(frozen=True)
class RetryAt:
    """A transient failure with attempts left: claimable again at ``at``."""

    at: datetime
    error: str | None


@dataclass(frozen=True)
class GiveUp:
    """A permanent failure, or the last attempt failed: FAILED for good."""

    error: str | None


Settle = Done | RetryAt | GiveUp


def decide_settle(
    *,
    success: bool,
    retryable: bool,
    error: str | None,
    retry_after_seconds: float | None,
    attempts: int,
    now: datetime,
    rand: Callable[[], float],
) -> Settle:
    """What the answer to attempt number ``attempts`` (this one included) makes of the
    update."""
    if success:
        return Done()
    if retryable and attempts < MAX_ATTEMPTS:
        at = next_attempt_at(
            now, attempts, rand=rand, retry_after_seconds=retry_after_seconds or 0.0
        )
        return RetryAt(at, error)
    return GiveUp(error)

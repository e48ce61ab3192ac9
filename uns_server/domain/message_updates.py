"""The message update: an update owed to a sent message (Slack chat.update, PagerDuty
acknowledge/resolve, a webhook's ``uns.notification.settled``) once its obligation
settled, as a job of kind ``message_update`` on the work table (``domain.jobs``):

    available --claim--> running (attempt + 1, leased)
    running --settle: the provider took it--> completed
    running --settle: transient, attempts left--> retryable (backoff)
    running --settle: permanent, or MAX_ATTEMPTS used--> discarded (given up)
    running --lease expires unsettled--> retryable, or discarded (the rescuer)

Every settle is fenced by the lease token its claim issued (``store.port.Jobs``): a
worker whose lease expired and whose row was rescued or claimed since changes
nothing. The rules are here, pure; the worker (``workers.message_updates``) applies
them and the store writes them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from uns_server.domain.jobs import JobKind, JobState, NewJob, SettleJob
from uns_server.domain.records import Job
from uns_server.domain.retry import next_attempt_at

# Attempts (claims) before an update that keeps failing transiently is given up.
MAX_ATTEMPTS = 10


@dataclass(frozen=True, slots=True)
class MessageUpdate:
    """One update to send: the sent message (``reference``, what the provider handed
    back) of ``channel``, and what to show (``outcome``: state, actor, via, at...). The
    typed arguments of a ``message_update`` job."""

    notification_id: str
    channel: str
    reference: Mapping[str, Any]
    outcome: Mapping[str, Any]

    def args(self) -> dict[str, Any]:
        return {
            "channel": self.channel,
            "reference": dict(self.reference),
            "outcome": dict(self.outcome),
        }

    def job(self) -> NewJob:
        """The job that sends it, due at once."""
        return NewJob(JobKind.MESSAGE_UPDATE, self.args(), MAX_ATTEMPTS, self.notification_id)

    @classmethod
    def of(cls, job: Job) -> MessageUpdate:
        """The update a claimed ``message_update`` job carries."""
        args = job.args
        return cls(job.notification_id or "", args["channel"], args["reference"], args["outcome"])


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
    max_attempts: int = MAX_ATTEMPTS,
) -> Settle:
    """What the answer to attempt number ``attempts`` (this one included) makes of the
    update."""
    if success:
        return Done()
    if retryable and attempts < max_attempts:
        at = next_attempt_at(
            now, attempts, rand=rand, retry_after_seconds=retry_after_seconds or 0.0
        )
        return RetryAt(at, error)
    return GiveUp(error)


def settle_job(job: Job, decision: Settle) -> SettleJob:
    """The job's settle for ``decision``, fenced by the token its claim issued."""
    assert job.lease_token is not None, "a claimed job holds a lease"
    match decision:
        case Done():
            return SettleJob(job.id, job.lease_token, JobState.COMPLETED)
        case RetryAt(at, error):
            return SettleJob(job.id, job.lease_token, JobState.RETRYABLE, at, error)
        case GiveUp(error):
            return SettleJob(job.id, job.lease_token, JobState.DISCARDED, error=error)

"""The work row (SPEC §7 "One work engine"): every timed piece of work is one row of
``uns_jobs``, modelled on River's ``river_job``. Its life, and who moves it (the same
block is drawn in docs/ARCHITECTURE.md, beside the obligation's):

```mermaid
stateDiagram-v2
    [*] --> available: insert_many (in the commit that makes the work)
    available --> running: claim, once due (attempt + 1, a new lease token and expiry)
    retryable --> running: claim, once due again
    running --> completed: settle by the lease holder (fenced by its token)
    running --> retryable: settle, a transient failure, attempts left (backoff)
    running --> retryable: rescue, the lease expired, attempts left (due at once, its token kept)
    running --> discarded: settle, a permanent failure or the attempts spent
    running --> discarded: rescue, the lease expired on the last attempt
    running --> cancelled: settle, the work became moot
    completed --> [*]: retention, finalized before its cutoff
    discarded --> [*]: retention
    cancelled --> [*]: retention
```

Only ``claim`` starts work and only the lease holder's ``settle`` (or the rescuer,
once the lease has expired) ends it: a settle names the row's lease token and finds
it ``running``, so a worker whose lease expired and whose row was rescued (which keeps
the token of the attempt that never settled) or claimed again changes nothing. The
three final states never move again. The store writes these moves
(``store.port.Jobs``, ``store.jobs``); each kind's rules decide which one a result
makes (``domain.message_updates.decide_settle`` for ``message_update``,
``domain.ack_deadlines`` for ``ack_deadline``, ``domain.follow_up_jobs`` for
``follow_up``, ``domain.snooze`` for ``snooze_end``, ``domain.heartbeats`` for
``heartbeat_deadline``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from uns_server.domain.records import Job


class JobState(StrEnum):
    AVAILABLE = "available"
    RUNNING = "running"
    RETRYABLE = "retryable"
    COMPLETED = "completed"
    DISCARDED = "discarded"
    CANCELLED = "cancelled"


class JobKind(StrEnum):
    MESSAGE_UPDATE = "message_update"
    ACK_DEADLINE = "ack_deadline"
    FOLLOW_UP = "follow_up"  # an ack's next reminder or escalation step
    SNOOZE_END = "snooze_end"  # a snoozed ack asked again
    WINDOW_END = "window_end"  # a maintenance window's end releases what it held
    PERSON_RULE = "person_rule"  # a person's staged rule (domain.person_rule_jobs)
    HEARTBEAT_DEADLINE = "heartbeat_deadline"  # a heartbeat's page when it goes silent
    DELIVERY = "delivery"  # a due leader's next delivery attempt (store.deliveries)


# Timers: kinds whose whole work is a decision and a write (no provider call), claimed,
# fired and completed in one transaction by one worker (``workers.timers``); their
# lease never outlives it.
TIMER_KINDS = frozenset(
    {JobKind.ACK_DEADLINE, JobKind.SNOOZE_END, JobKind.HEARTBEAT_DEADLINE, JobKind.WINDOW_END}
)


# A delivery job never runs out of attempts of its own: the obligation's policy counts
# them (``lifecycle.decide_claim`` on the notification's counters), so the rescuer
# makes an expired delivery due again rather than discarding it.
DELIVERY_MAX_ATTEMPTS = 2**31 - 1


# What a claim takes (once due), and the states that never move again.
CLAIMABLE = frozenset({JobState.AVAILABLE, JobState.RETRYABLE})
FINALIZED = frozenset({JobState.COMPLETED, JobState.DISCARDED, JobState.CANCELLED})
LIVE = frozenset(JobState) - FINALIZED


@dataclass(frozen=True, slots=True)
class NewJob:
    """A row to insert: available, due at ``scheduled_at`` (None: at once)."""

    kind: JobKind
    args: Mapping[str, Any]
    """Small typed arguments as JSON (each kind parses its own)."""
    max_attempts: int
    notification_id: str | None = None
    scheduled_at: datetime | None = None
    priority: int = 0
    """Claimed before lower ones once due (River's ``priority``, higher first here, as
    a notification's ``priority``)."""


@dataclass(frozen=True, slots=True)
class SettleJob:
    """The lease holder's end of one attempt: ``state`` (completed, retryable,
    discarded or cancelled), applied only while the row is running under
    ``lease_token``. ``scheduled_at``: when a retryable row is due again."""

    id: int
    lease_token: str
    state: JobState
    scheduled_at: datetime | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        if self.state in (JobState.AVAILABLE, JobState.RUNNING):
            raise ValueError(f"a settle cannot make a job {self.state}")
        if (self.state is JobState.RETRYABLE) != (self.scheduled_at is not None):
            raise ValueError("a retryable job, and only one, says when it is due again")


def completed(job: Job) -> SettleJob:
    """A claimed job done, fenced by the token its claim issued."""
    assert job.lease_token is not None, "a claimed job holds a lease"
    return SettleJob(job.id, job.lease_token, JobState.COMPLETED)


def rescued(attempt: int, max_attempts: int) -> JobState:
    """Where the rescuer puts a running row whose lease expired unsettled: the lost
    attempt counts (its effect is unknown), so with none left it is discarded. (The
    store's rescue statement says the same.)"""
    return JobState.RETRYABLE if attempt < max_attempts else JobState.DISCARDED

"""The ack deadline as a timer of the work table (kind ``ack_deadline``, SPEC §7 "One
work engine"). Pure.

    delivered with require_ack --(same commit)--> job available, due at the deadline
    job due, ack still PENDING and its deadline passed --> TIMED_OUT; job completed
    job due, anything else (answered, withdrawn, moved) --> job completed, nothing done

The job carries no arguments: the notification row holds the deadline and the ack, and
is re-read (locked) when the job falls due, so a timer made stale by an answer, a
withdrawal or a later deadline does nothing (whoever moves a deadline inserts its own
timer). Claim, timeout and settle commit together (``workers.timers``,
``AckService.fire_deadlines``): a row of this kind is never left running, so its attempts
only count transactions that rolled back.
"""

from __future__ import annotations

from datetime import datetime

from uns_server.domain.enums import ACK_OWED
from uns_server.domain.jobs import JobKind, NewJob
from uns_server.domain.records import Notification

KIND = JobKind.ACK_DEADLINE
# Each attempt is one transaction that claims, times out and settles; a rolled-back
# one leaves the row as it was. The bound is the engine's shape, not a retry policy.
MAX_ATTEMPTS = 3


def timer(notification_id: str, deadline: datetime) -> NewJob:
    """The job that times the ack of ``notification_id`` out at ``deadline``."""
    return NewJob(KIND, {}, MAX_ATTEMPTS, notification_id=notification_id, scheduled_at=deadline)


def times_out(row: Notification | None, now: datetime) -> bool:
    """Does a due timer time this ack out? Only while it is still PENDING and its
    deadline has passed; otherwise the timer is stale and completes with nothing done."""
    return (
        row is not None
        and row.ack_status in ACK_OWED
        and row.deadline is not None
        and row.deadline <= now
    )

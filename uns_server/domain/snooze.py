"""Snooze (SPEC §7 "Quiet on purpose"): a pending acknowledgement paused. Pure.

    ack PENDING or SNOOZED --SnoozeNotification(d)--> SNOOZED until now + d
        the deadline and the follow-up timeline move by the pause (the time from the
        current pause's end, or now, to the new end); in the same commit a
        ``snooze_end`` job due at the end and an ``ack_deadline`` job at the moved
        deadline (the old timer finds the deadline later and does nothing)
    snooze_end job due, still SNOOZED and its end passed --> PENDING (SNOOZE_ENDED),
        a ``follow_up`` job due at once: the person is asked again (the snooze's
        reminder, ``schedule.snooze_reminder``), then the reminders and escalation
        steps resume where they paused (their times shifted by every pause so far)
    snooze_end job due, anything else (answered, withdrawn, snoozed again) --> nothing

Whoever may answer may snooze (the same refusals as an answer: nothing owed, the
deadline passed, already settled). While snoozed the answer stays owed: Acknowledge,
a link or a button settles it; a follow-up job or ack timer that falls due meanwhile
finds the ack not PENDING (or its deadline later) and does nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from uns_server.domain import ack_deadlines
from uns_server.domain.acks import AckTarget, decide_ack
from uns_server.domain.enums import AckStatus
from uns_server.domain.errors import AckNotPending, InvalidRequest
from uns_server.domain.jobs import JobKind, NewJob
from uns_server.domain.records import Notification
from uns_server.domain.schedule import next_allowed

KIND = JobKind.SNOOZE_END
# Claimed, decided and settled in one transaction (as ``ack_deadline``): a rolled-back
# round leaves the row as it was; the bound is the engine's shape.
MAX_ATTEMPTS = 3
SHORTEST = timedelta(seconds=1)
LONGEST = timedelta(hours=24)


def check_duration(duration: timedelta) -> None:
    if not SHORTEST <= duration <= LONGEST:
        raise InvalidRequest.of_field("duration", "must be from 1 second to 24 hours")


@dataclass(frozen=True, slots=True)
class Snooze:
    """A decided snooze: the ack SNOOZED until ``until``, its deadline moved to
    ``deadline``, the pauses so far ``paused_seconds`` (the follow-up timeline's shift)."""

    until: datetime
    deadline: datetime
    paused_seconds: int

    def timers(self, notification_id: str) -> list[NewJob]:
        """The jobs its commit inserts: the end, and the moved deadline's timer."""
        end = NewJob(KIND, {}, MAX_ATTEMPTS, notification_id, self.until)
        return [end, ack_deadlines.timer(notification_id, self.deadline)]


def decide_snooze(
    target: AckTarget,
    *,
    snoozed_until: datetime | None,
    paused_seconds: int,
    actor: str,
    duration: timedelta,
    now: datetime,
) -> Snooze:
    """The snooze of ``target`` by ``actor`` for ``duration``; raises what an answer
    would be refused with (or INVALID_REQUEST for the duration)."""
    check_duration(duration)
    if target.ack_status is None:  # no ack opened yet (a delivery in flight): nothing to pause
        raise AckNotPending(
            "the notification has no pending acknowledgement to snooze",
            metadata={"notification_id": target.id, "ack_state": "NONE", "state": target.status},
        )
    decide_ack(target, AckStatus.SNOOZED, actor, now)  # raises unless the answer is owed
    assert target.deadline is not None, "an owed ack has a deadline"
    paused_from = now
    if target.ack_status == AckStatus.SNOOZED and snoozed_until is not None:
        paused_from = max(now, snoozed_until)  # snoozed again: from the current end
    until = now + duration
    pause = until - paused_from
    return Snooze(until, target.deadline + pause, paused_seconds + round(pause.total_seconds()))


def reminder_due(row: Notification, ended_at: datetime) -> datetime:
    """When the reminder of a snooze that ended at ``ended_at`` is sent: at once, or
    when the policy's quiet hours end (as any reminder of the policy)."""
    doc = row.notification
    intent = doc.intent.value if doc.intent else None
    return next_allowed(ended_at, doc.effective.spec.timing.quiet, intent)


def resumes(ack_status: AckStatus | None, snoozed_until: datetime | None, now: datetime) -> bool:
    """Does a due ``snooze_end`` job end this snooze? Only while still SNOOZED and its
    end has passed; otherwise the job is stale and does nothing."""
    return ack_status == AckStatus.SNOOZED and snoozed_until is not None and snoozed_until <= now

"""An ack's reminders and escalation steps as work rows (kind ``follow_up``, SPEC §7
"One work engine"). Pure.

    ack opened (delivered, follows up) --(same commit)--> job due at once
    job claimed, nothing due yet (schedule.Wait) --> completed; a new job due then
    job claimed, a step due --> running: the step is sent under the job's lease
        the call failed transiently, tries left --> retryable, due at the backoff
        the step decided (one event) --> completed; the next step's job inserted
    job claimed, the ack ended --> completed (a step waiting to retry is closed STOPPED)
    withdrawal --> a running job cancelled (its settle finds the fence lost), the
        others due at once (a waiting step is closed)

    a snooze ends --(same commit)--> a job due at once carrying the snooze's number:
        its reminder is the step (``schedule.snooze_reminder``), then as above; stale
        once a later snooze ended

The notification row keeps what the obligation is owed (counts, the step's progress,
the next follow-up time shown to readers); the job is the only lease. Its arguments
are none but a snooze reminder's number: the row is re-read, locked, when the job
falls due, so a stale job (the ack answered, a later step already decided) does
nothing.
"""

from __future__ import annotations

from datetime import datetime

from uns_server.domain.jobs import JobKind, JobState, NewJob, SettleJob
from uns_server.domain.records import Job

KIND = JobKind.FOLLOW_UP
# The step's own rules bound its calls (``schedule.decide_step_attempt``); the work
# row's bound only stops a step whose every lease is lost, which discards it.
MAX_ATTEMPTS = 1000
# The one argument a job may carry: the number of the snooze whose end it reminds of.
SNOOZE_REMINDER_ARG = "snooze_reminder"


def timer(notification_id: str, at: datetime | None) -> NewJob:
    """The job that looks at the follow-ups of ``notification_id`` at ``at`` (None: now)."""
    return NewJob(KIND, {}, MAX_ATTEMPTS, notification_id=notification_id, scheduled_at=at)


def snooze_reminder(notification_id: str, number: int, at: datetime) -> NewJob:
    """The job that sends the reminder of the ``number``-th snooze's end (SPEC §7), due
    ``at``; once that step is decided it goes on as ``timer`` (the policy's next step)."""
    args = {SNOOZE_REMINDER_ARG: number}
    return NewJob(KIND, args, MAX_ATTEMPTS, notification_id=notification_id, scheduled_at=at)


def snooze_reminder_of(job: Job) -> int | None:
    """The snooze whose reminder ``job`` owes (None: a plain look at the follow-ups)."""
    number = job.args.get(SNOOZE_REMINDER_ARG) if job.args else None
    return int(number) if number is not None else None


def recovered(job: Job, calls_settled: int) -> bool:
    """Was an earlier claim of this step's job lost unsettled (its lease expired)? Each
    claim is an attempt, and each settled call of the step is counted in its progress:
    a claim more than the calls settled sent something nobody recorded."""
    return job.attempt - 1 > calls_settled


def done(job: Job) -> SettleJob:
    """A claimed job with no step to send now (nothing due, or the ack ended)."""
    assert job.lease_token is not None, "a claimed job holds a lease"
    return settle_done(job.id, job.lease_token)


def settle_done(job_id: int, lease_token: str) -> SettleJob:
    """The step decided (or its notification gone): the job completes."""
    return SettleJob(job_id, lease_token, JobState.COMPLETED)


def settle_retry(job_id: int, lease_token: str, at: datetime) -> SettleJob:
    """The step's call retries at ``at``: an attempt of the job spent."""
    return SettleJob(job_id, lease_token, JobState.RETRYABLE, scheduled_at=at)

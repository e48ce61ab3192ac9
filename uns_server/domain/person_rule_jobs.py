"""A person's staged rule as a work row (kind ``person_rule``, SPEC §7 "One work
engine"; the rules themselves are ``domain.staged_rules``). Pure.

    delivery attempt first asks the person --(same commit)--> a job per later rule,
        due at that moment + after; its entry in ``outcome.staged`` (PENDING)
    job claimed, the answer still owed --> running: its contact is sent the message
        under the job's lease (CHANNEL_ATTEMPT_STARTED committed first)
        sent --> completed, the entry SENT, the reference kept (closed at the end)
        a transient failure, tries left --> retryable at the backoff
        refused for good, or the tries spent --> discarded, the entry FAILED
        lease lost (rescued meanwhile) --> LEASE_LOST, nothing recorded
    job claimed, the delivery still PENDING --> completed; a new job due when the
        delivery's attempt is (its references are the settlement's until then)
    job claimed, the person's quiet hours --> completed; a new job due when they end
    job claimed, the answer no longer owed (answered, timed out, withdrawn, dead
        lettered, replayed into a new cycle) --> completed, nothing sent (stale)

The row is re-read, locked, when the job falls due: the job carries only what
names the rule (person, channel, delay, cycle), never the address.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from uns_server.domain.enums import AckStatus, Status
from uns_server.domain.jobs import JobKind, JobState, NewJob, SettleJob
from uns_server.domain.records import Job, Notification

KIND = JobKind.PERSON_RULE
MAX_ATTEMPTS = 5
# While the delivery is still PENDING with nothing due yet (an attempt in flight, or
# a claim that has not come), look again no sooner than this.
LOOK_AGAIN = timedelta(seconds=5)

PENDING, SENT, FAILED = "PENDING", "SENT", "FAILED"


@dataclass(frozen=True)
class PersonRule:
    """The job's arguments: whose rule, which contact channel, its delay, and the
    delivery cycle and moment that started it."""

    recipient_id: str
    channel: str
    after: timedelta
    cycle: int
    due: datetime

    def args(self) -> dict[str, Any]:
        return {
            "recipient_id": self.recipient_id,
            "channel": self.channel,
            "after_seconds": int(self.after.total_seconds()),
            "cycle": self.cycle,
            "due_time": self.due.isoformat(),
        }

    @classmethod
    def of(cls, job: Job) -> PersonRule:
        a = job.args
        return cls(
            str(a["recipient_id"]),
            str(a["channel"]),
            timedelta(seconds=int(a["after_seconds"])),
            int(a["cycle"]),
            datetime.fromisoformat(str(a["due_time"])),
        )

    def job(self, notification_id: str, at: datetime | None = None) -> NewJob:
        """The row, due at ``at`` (default: the rule's due time)."""
        return NewJob(
            KIND,
            self.args(),
            MAX_ATTEMPTS,
            notification_id=notification_id,
            scheduled_at=at or self.due,
        )

    def entry(self) -> dict[str, Any]:
        """Its ``outcome.staged`` entry, PENDING."""
        return {**self.args(), "state": PENDING}

    def same(self, entry: Mapping[str, Any]) -> bool:
        return (
            entry.get("recipient_id") == self.recipient_id
            and entry.get("channel") == self.channel
            and entry.get("after_seconds") == int(self.after.total_seconds())
        )


@dataclass(frozen=True)
class Fire:
    """Send it now."""


@dataclass(frozen=True)
class Later:
    """Not yet: look again at ``at``."""

    at: datetime


@dataclass(frozen=True)
class Stale:
    """The answer is no longer owed (or the row is gone): nothing to send."""


Decision = Fire | Later | Stale


def decide(rule: PersonRule, n: Notification | None, now: datetime) -> Decision:
    """What a due job does with its notification as it stands (locked)."""
    if n is None or n.cycle != rule.cycle:
        return Stale()
    if n.status == Status.PENDING:
        # The delivery has not completed: its settlement owns the references until
        # then, so the rule waits for it.
        at = max(now + LOOK_AGAIN, n.next_attempt or now, n.lease_until or now)
        return Later(at)
    if n.status == Status.DELIVERED and n.ack_status == AckStatus.PENDING:
        return Fire()
    if n.status == Status.DELIVERED and n.ack_status == AckStatus.SNOOZED and n.snoozed_until:
        return Later(max(n.snoozed_until, now + LOOK_AGAIN))  # paused: asked at its end
    return Stale()


def settle_done(job: Job) -> SettleJob:
    assert job.lease_token is not None, "a claimed job holds a lease"
    return SettleJob(job.id, job.lease_token, JobState.COMPLETED)


def settle_failed(job_id: int, token: str, error: str) -> SettleJob:
    return SettleJob(job_id, token, JobState.DISCARDED, error=error)


def settle_retry(job_id: int, token: str, at: datetime, error: str) -> SettleJob:
    return SettleJob(job_id, token, JobState.RETRYABLE, scheduled_at=at, error=error)


def marked(
    staged: Sequence[Mapping[str, Any]], rule: PersonRule, state: str, at: datetime, error: str = ""
) -> list[dict[str, Any]]:
    """``outcome.staged`` with ``rule``'s entry now ``state`` (SENT or FAILED)."""
    out = []
    for entry in staged:
        item = dict(entry)
        if rule.same(entry):
            item |= {"state": state, "fire_time": at.isoformat()}
            if error:
                item["error"] = error
        out.append(item)
    return out

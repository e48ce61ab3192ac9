"""Heartbeats (SPEC §7 "Alerts in"): a job that must report in, and the page UNS sends
when it does not. The value, its validation, and its deadline as a timer of the work
table (kind ``heartbeat_deadline``, SPEC §7 "One work engine"). Pure.

    Put (new, or interval/grace changed) --(same commit)--> job due at the deadline
    Beat, not paging --> last beat moved (one row UPDATE; the job stays where it is)
    job due, the heartbeat gone or the job not its own --> completed, nothing done
    job due, a beat moved the deadline --> completed; a job due at the new deadline
    job due, silent past interval + grace --> the page sent (intake, same commit),
        PAGING; completed, no next job (the next beat re-arms)
    job due, the page refused (e.g. NO_POLICY) --> completed; a job due a minute later
    Beat while PAGING --> the page withdrawn ("heartbeat resumed"), UP, a new job
    Delete --> the live job cancelled (a running one completes stale)

The heartbeat row names its one live job (``job_id``): any other job of the kind that
falls due for it is stale. The deadline is computed, never stored: the last beat (or,
before the first, when the heartbeat was armed) plus interval and grace, so a beat is
one cheap UPDATE. The page is sent as ``heartbeat:<id>`` with the idempotency key
``heartbeat:<id>:<basis>``: one page per silence, whoever sends it, however often.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from uns_server.domain.enums import Intent
from uns_server.domain.errors import FieldViolation, InvalidRequest, UnsError
from uns_server.domain.jobs import JobKind, NewJob
from uns_server.domain.people import id_problems
from uns_server.domain.records import Job
from uns_server.domain.requests import SendRequest
from uns_server.domain.validation import validate_send

KIND = JobKind.HEARTBEAT_DEADLINE
# Claim, decision, page and settle commit together (``services.heartbeat_deadlines``):
# a row of this kind is never left running, so attempts only count rolled-back rounds.
MAX_ATTEMPTS = 3
PERIOD_MAX = timedelta(days=366)
PAGE_RETRY = timedelta(minutes=1)
PRINCIPAL_PREFIX = "heartbeat:"
SOURCE = "heartbeat"
RESUMED_REASON = "heartbeat resumed"
PAGE_ERROR_MAX_CHARS = 1000


class HeartbeatState(StrEnum):
    UP = "UP"
    LATE = "LATE"
    PAGING = "PAGING"


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """One ``uns_heartbeats`` row (the first six fields are the operator's)."""

    heartbeat_id: str
    notification_type: str
    interval: timedelta
    grace: timedelta
    title: str
    message: str
    armed_at: datetime | None = None
    """When it was (re-)armed: the deadline's basis until the first beat."""
    last_beat_at: datetime | None = None
    paging: bool = False
    notification_id: str | None = None
    """The page of the current silence (paging), or of the last one."""
    page_error: str = ""
    job_id: int | None = None
    """Its one live ``heartbeat_deadline`` job (None while paging)."""
    created_at: datetime | None = None
    updated_at: datetime | None = None
    updated_by: str = ""

    @property
    def basis(self) -> datetime:
        basis = self.last_beat_at or self.armed_at
        assert basis is not None, "a stored heartbeat was armed"
        return basis

    @property
    def deadline(self) -> datetime | None:
        """When it pages unless a beat comes first (None while paging)."""
        return None if self.paging else self.basis + self.interval + self.grace

    def state(self, now: datetime) -> HeartbeatState:
        if self.paging:
            return HeartbeatState.PAGING
        if now > self.basis + self.interval:
            return HeartbeatState.LATE
        return HeartbeatState.UP

    def page_problem(self, now: datetime) -> str:
        """Why the page of the current silence is not sent yet ("" when none is owed:
        a beat since ended the silence, even before its job looks again)."""
        deadline = self.deadline
        return self.page_error if deadline is not None and deadline <= now else ""

    @property
    def principal(self) -> str:
        return PRINCIPAL_PREFIX + self.heartbeat_id

    def page(self) -> SendRequest:
        """The notification of the current silence."""
        return SendRequest(
            notification_type=self.notification_type,
            intent=Intent.WARNING,
            title=self.title,
            message=self.message,
            source=SOURCE,
            idempotency_key=f"{self.principal}:{self.basis.astimezone(UTC).isoformat()}",
            metadata={"heartbeat_id": self.heartbeat_id},
        )

    def same_timing(self, other: Heartbeat) -> bool:
        return (self.interval, self.grace) == (other.interval, other.grace)


def build_heartbeat(
    heartbeat_id: str,
    notification_type: str,
    interval: timedelta | None,
    grace: timedelta | None,
    title: str,
    message: str,
) -> Heartbeat:
    """Operator input as a value, or INVALID_REQUEST naming every field
    (``heartbeat.<field>``). Title, message and type are checked as the page's."""
    violations = [FieldViolation("heartbeat.heartbeat_id", p) for p in id_problems(heartbeat_id)]
    violations += _period("heartbeat.interval", interval, required=True)
    violations += _period("heartbeat.grace", grace, required=False)
    value = Heartbeat(
        heartbeat_id,
        notification_type,
        interval or timedelta(0),
        grace or timedelta(0),
        title,
        message,
    )
    try:  # any instant will do as the basis: only the request's shape is checked
        validate_send(replace(value, armed_at=datetime(1970, 1, 1, tzinfo=UTC)).page())
    except UnsError as exc:
        violations += exc.nested("heartbeat").violations
    if violations:
        fields = ",".join(dict.fromkeys(v.field for v in violations))
        first = violations[0]
        raise InvalidRequest(
            f"{first.field}: {first.description}",
            metadata={"fields": fields},
            violations=violations,
        )
    return value


def _period(name: str, value: timedelta | None, *, required: bool) -> list[FieldViolation]:
    if value is None:
        return [FieldViolation(name, "is required")] if required else []
    if value < timedelta(0) or (required and value == timedelta(0)):
        return [FieldViolation(name, "must be positive" if required else "must not be negative")]
    if value > PERIOD_MAX or value % timedelta(seconds=1):
        return [FieldViolation(name, "must be whole seconds, at most 366 days")]
    return []


def timer(heartbeat_id: str, at: datetime) -> NewJob:
    """The job that looks at ``heartbeat_id`` at ``at``."""
    return NewJob(KIND, {"heartbeat_id": heartbeat_id}, MAX_ATTEMPTS, scheduled_at=at)


def armed(new: Heartbeat, old: Heartbeat | None, now: datetime) -> Heartbeat:
    """A put's row: a new heartbeat is armed now; a replaced one keeps its beats and
    its page, and is re-armed now if its timing changed and it never beat."""
    if old is None:
        return replace(new, armed_at=now)
    armed_at = old.armed_at if new.same_timing(old) or old.last_beat_at else now
    return replace(
        new,
        armed_at=armed_at,
        last_beat_at=old.last_beat_at,
        paging=old.paging,
        notification_id=old.notification_id,
        page_error=old.page_error,
        job_id=old.job_id,
        created_at=old.created_at,
    )


def needs_timer(new: Heartbeat, old: Heartbeat | None) -> bool:
    """Does a put insert a new live job? A new heartbeat, or a new timing while not
    paging (the old job's due time no longer fits); a paging one waits for a beat."""
    return old is None or (not new.paging and not new.same_timing(old))


@dataclass(frozen=True, slots=True)
class Stale:
    """The job no longer serves the heartbeat: complete it, nothing done."""


@dataclass(frozen=True, slots=True)
class Rearm:
    """A beat moved the deadline: complete this job, insert one due ``at``."""

    at: datetime


@dataclass(frozen=True, slots=True)
class Page:
    """Silent past interval + grace: send ``request`` as ``principal``."""

    principal: str
    request: SendRequest


Decision = Stale | Rearm | Page


def decide(job: Job, row: Heartbeat | None, now: datetime) -> Decision:
    """What a due job does, ``row`` re-read locked."""
    if row is None or row.job_id != job.id or row.paging:
        return Stale()
    deadline = row.deadline
    assert deadline is not None
    if deadline > now:
        return Rearm(deadline)
    return Page(row.principal, row.page())


def page_error(exc: UnsError) -> str:
    return f"{exc.reason}: {exc.message}"[:PAGE_ERROR_MAX_CHARS]

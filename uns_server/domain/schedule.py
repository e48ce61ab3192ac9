"""The obligation over time: when each planned step is due (SPEC §5, issue 25).

Pure: instants and policy values in, instants and decisions out. The same functions
serve the workers (intake's first attempt, the follow-up worker's reminders and
escalation steps) and Simulate's ``planned_steps``, so the plan a producer is shown
and what the server does cannot drift apart.

Timeline of one obligation, all offsets from the instant ``t0`` it was accepted::

    t0 --(schedule_time, if later)--> first attempt --delivered at d-->
        reminder k at  d + first_after * (1 + m + ... + m^(k-1)),  k = 1..max_count
        step i     at  d + escalation[i].after
        deadline   at  d + ack_timeout_minutes          (TIMED_OUT, unchanged)

Every step except the deadline passes through :func:`next_allowed`: inside the
policy's quiet hours it is held until the window ends, unless the notification's
intent is SAFETY or ESCALATION. Reminders and steps whose (held) time is not before
the deadline are not planned: once the ack settles, times out or is withdrawn,
nothing more is sent.

A step whose provider call fails transiently is retried on the failing channels
alone (:func:`decide_step_attempt`), with the delivery backoff, before the next step
fires; its one event is written once it is decided.

Quiet hours are wall-clock times in an IANA zone (``zoneinfo``, data from ``tzdata``).
An instant is quiet when its local wall time lies in ``[start, end)`` (a window with
``start > end`` wraps midnight). The window ends at the first instant whose wall time
reads ``end`` or later, so on a spring-forward day an ``end`` inside the skipped hour
ends the window at the jump, and on a fall-back day at the first of the two readings.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from uns_server.domain.enums import Intent
from uns_server.domain.errors import FieldViolation
from uns_server.domain.retry import next_attempt_at

SCHEDULE_AHEAD_MAX = timedelta(days=90)
# Intents that are never held by quiet hours.
QUIET_EXEMPT = frozenset({Intent.SAFETY, Intent.ESCALATION})
REMINDER_FIRST_AFTER_MIN = timedelta(seconds=1)
REMINDER_FIRST_AFTER_MAX = timedelta(days=7)
REMINDER_MULTIPLIER_MAX = 10.0
REMINDER_MAX_COUNT_MAX = 20
ESCALATION_STEPS_MAX = 10


# -- scheduled sends -------------------------------------------------------------------


def schedule_violations(schedule_time: datetime | None, now: datetime) -> list[FieldViolation]:
    """A schedule more than 90 days ahead is refused (a past one means now)."""
    if schedule_time is not None and schedule_time - now > SCHEDULE_AHEAD_MAX:
        days = SCHEDULE_AHEAD_MAX.days
        return [FieldViolation("schedule_time", f"must be at most {days} days ahead")]
    return []


def first_attempt_at(
    now: datetime,
    schedule_time: datetime | None,
    quiet: QuietHours | None = None,
    intent: str | None = None,
) -> datetime:
    """When a notification accepted at ``now`` is first attempted: its schedule (never
    before now), then held by the quiet hours."""
    due = now if schedule_time is None or schedule_time < now else schedule_time
    return next_allowed(due, quiet, intent)


# -- quiet hours -----------------------------------------------------------------------


@dataclass(frozen=True)
class QuietHours:
    """``PolicySpec.quiet_hours``: local wall-clock window ``[start, end)`` in a zone."""

    time_zone: str
    start: time
    end: time

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.time_zone)

    @classmethod
    def parse(
        cls, time_zone: str, start: str, end: str, field: str
    ) -> tuple[QuietHours | None, list[FieldViolation]]:
        """Operator input (``"22:00"``, ``"07:30"``) to a value, or the violations."""
        violations: list[FieldViolation] = []
        try:
            if not time_zone or time_zone != time_zone.strip():
                raise ZoneInfoNotFoundError(time_zone)
            ZoneInfo(time_zone)
        except (ZoneInfoNotFoundError, ValueError):
            violations.append(
                FieldViolation(f"{field}.time_zone", "must be an IANA time zone, e.g. Europe/Paris")
            )
        times: list[time] = []
        for name, text in (("start", start), ("end", end)):
            parsed = _parse_wall_time(text)
            if parsed is None:
                violations.append(FieldViolation(f"{field}.{name}", "must be HH:MM (00:00-23:59)"))
            else:
                times.append(parsed)
        if len(times) == 2 and times[0] == times[1]:
            violations.append(FieldViolation(f"{field}.end", "must differ from start"))
        if violations:
            return None, violations
        return cls(time_zone, times[0], times[1]), []

    def to_json(self) -> dict[str, str]:
        return {
            "time_zone": self.time_zone,
            "start": self.start.strftime("%H:%M"),
            "end": self.end.strftime("%H:%M"),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> QuietHours:
        start, end = _parse_wall_time(data["start"]), _parse_wall_time(data["end"])
        assert start is not None and end is not None
        return cls(str(data["time_zone"]), start, end)


def _parse_wall_time(text: str) -> time | None:
    parts = text.split(":")
    if len(parts) != 2 or not all(p.isdigit() and len(p) == 2 for p in parts):
        return None
    hour, minute = int(parts[0]), int(parts[1])
    if hour > 23 or minute > 59:
        return None
    return time(hour, minute)


def _wall(t: datetime, zone: ZoneInfo) -> time:
    return t.astimezone(zone).time().replace(tzinfo=None, fold=0)


def is_quiet(t: datetime, quiet: QuietHours) -> bool:
    """Does ``t``'s local wall time fall inside the window?"""
    wall = _wall(t, quiet.zone)
    if quiet.start < quiet.end:
        return quiet.start <= wall < quiet.end
    return wall >= quiet.start or wall < quiet.end


def _first_instant_reading(day: date, wall: time, zone: ZoneInfo, after: datetime) -> datetime:
    """The first instant after ``after`` at which the local clock on ``day`` reads
    ``wall`` (or jumps past it)."""
    early = datetime.combine(day, wall.replace(fold=0), tzinfo=zone).astimezone(UTC)
    late = datetime.combine(day, wall.replace(fold=1), tzinfo=zone).astimezone(UTC)
    if early <= late:  # the wall time exists (once, or twice on a fall-back day)
        return early if early > after else late
    # Inside a spring-forward gap: the answer is the jump, between the two readings
    # (zone transitions fall on whole seconds, so bisect over seconds).
    target = datetime.combine(day, wall)
    lo, hi = math.floor(late.timestamp()), math.ceil(early.timestamp())
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, zone).replace(tzinfo=None) >= target:
            hi = mid
        else:
            lo = mid
    return datetime.fromtimestamp(hi, UTC)


def next_allowed(t: datetime, quiet: QuietHours | None, intent: str | None) -> datetime:
    """``t``, or the end of the quiet window ``t`` falls in. SAFETY and ESCALATION
    notifications are never held."""
    if quiet is None or intent in QUIET_EXEMPT:
        return t
    zone = quiet.zone
    # A fall-back day can re-enter a window right after it ended: a few rounds suffice.
    for _ in range(4):
        if not is_quiet(t, quiet):
            return t
        local = t.astimezone(zone)
        day = local.date()
        if quiet.start > quiet.end and _wall(t, zone) >= quiet.start:
            day += timedelta(days=1)
        t = max(t, _first_instant_reading(day, quiet.end, zone, t))
    return t


# -- reminders and escalation steps -----------------------------------------------------


@dataclass(frozen=True)
class Reminder:
    """``PolicySpec.reminder``: re-send after ``first_after``, then each interval
    ``multiplier`` times the previous one, at most ``max_count`` times."""

    first_after: timedelta
    multiplier: float
    max_count: int

    def to_json(self) -> dict[str, Any]:
        return {
            "first_after": self.first_after.total_seconds(),
            "multiplier": self.multiplier,
            "max_count": self.max_count,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Reminder:
        return cls(
            timedelta(seconds=float(data["first_after"])),
            float(data["multiplier"]),
            int(data["max_count"]),
        )

    def offsets(self, before: timedelta | None = None) -> list[timedelta]:
        """Each reminder's nominal offset from delivery; with ``before``, only those
        earlier than it (a tapering series soon outgrows any deadline, and datetime)."""
        out, interval, total = [], self.first_after, timedelta(0)
        for _ in range(self.max_count):
            total += interval
            if before is not None and total >= before:
                break
            out.append(total)
            interval = interval * self.multiplier
        return out


def reminder_violations(r: Reminder, field: str) -> list[FieldViolation]:
    out = []
    if not REMINDER_FIRST_AFTER_MIN <= r.first_after <= REMINDER_FIRST_AFTER_MAX:
        out.append(FieldViolation(f"{field}.first_after", "must be between 1s and 7 days"))
    if not 1.0 <= r.multiplier <= REMINDER_MULTIPLIER_MAX:
        out.append(
            FieldViolation(
                f"{field}.multiplier", f"must be between 1 and {REMINDER_MULTIPLIER_MAX}"
            )
        )
    if not 1 <= r.max_count <= REMINDER_MAX_COUNT_MAX:
        out.append(
            FieldViolation(f"{field}.max_count", f"must be between 1 and {REMINDER_MAX_COUNT_MAX}")
        )
    return out


@dataclass(frozen=True)
class EscalationStep:
    """One ``PolicySpec.escalation`` step: ``after`` delivery, send to ``channels``."""

    after: timedelta
    channels: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"after": self.after.total_seconds(), "channels": list(self.channels)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EscalationStep:
        return cls(timedelta(seconds=float(data["after"])), tuple(data["channels"]))


class StepKind(StrEnum):
    """What a planned step is (``uns.v1.PlannedStepKind``)."""

    DELIVERY = "DELIVERY"
    REMINDER = "REMINDER"
    ESCALATION = "ESCALATION"
    DEADLINE = "DEADLINE"


@dataclass(frozen=True)
class Step:
    """One planned step: the ``number``-th of its kind (1-based), due ``at``."""

    kind: StepKind
    number: int
    at: datetime
    channels: tuple[str, ...]
    held: bool = False  # quiet hours moved it from its nominal time


@dataclass(frozen=True)
class Timing:
    """The frozen policy values the timeline depends on."""

    channels: tuple[str, ...]
    require_ack: bool
    ack_timeout: timedelta
    quiet: QuietHours | None = None
    reminder: Reminder | None = None
    escalation: tuple[EscalationStep, ...] = ()

    @property
    def follows_up(self) -> bool:
        """Does a delivered notification of this policy have reminders or steps?"""
        return self.require_ack and (self.reminder is not None or bool(self.escalation))


def follow_ups(delivered_at: datetime, timing: Timing, intent: str | None) -> list[Step]:
    """Every reminder and escalation step of a notification delivered at
    ``delivered_at``, in the order they fire (time, then escalation before reminder)."""
    if not timing.require_ack:
        return []
    deadline = delivered_at + timing.ack_timeout
    nominal: list[tuple[StepKind, int, datetime, tuple[str, ...]]] = []
    if timing.reminder is not None:
        nominal += [
            (StepKind.REMINDER, k, delivered_at + offset, timing.channels)
            for k, offset in enumerate(timing.reminder.offsets(timing.ack_timeout), start=1)
        ]
    nominal += [
        (StepKind.ESCALATION, i, delivered_at + step.after, step.channels)
        for i, step in enumerate(timing.escalation, start=1)
    ]
    steps = []
    for kind, number, at, channels in nominal:
        held = next_allowed(at, timing.quiet, intent)
        if held < deadline:
            steps.append(Step(kind, number, held, channels, held != at))
    order = {StepKind.ESCALATION: 0, StepKind.REMINDER: 1}
    return sorted(steps, key=lambda s: (s.at, order[s.kind], s.number))


def pending_follow_ups(
    steps: Sequence[Step], reminders_sent: int, escalations_sent: int
) -> list[Step]:
    """The steps not fired yet (each kind fires in number order)."""
    sent = {StepKind.REMINDER: reminders_sent, StepKind.ESCALATION: escalations_sent}
    return [s for s in steps if s.number > sent[s.kind]]


@dataclass(frozen=True)
class Fire:
    """Send ``step`` now."""

    step: Step


@dataclass(frozen=True)
class Wait:
    """Nothing is due; look again at ``at`` (None: nothing is left to send)."""

    at: datetime | None


def decide_follow_up(
    *,
    delivered_at: datetime,
    timing: Timing,
    intent: str | None,
    reminders_sent: int,
    escalations_sent: int,
    now: datetime,
) -> Fire | Wait:
    """The follow-up worker's decision for a notification whose ack is PENDING."""
    pending = pending_follow_ups(
        follow_ups(delivered_at, timing, intent), reminders_sent, escalations_sent
    )
    if not pending:
        return Wait(None)
    if pending[0].at <= now:
        return Fire(pending[0])
    return Wait(pending[0].at)


def after_fired(
    *,
    delivered_at: datetime,
    timing: Timing,
    intent: str | None,
    reminders_sent: int,
    escalations_sent: int,
) -> datetime | None:
    """When to look again once the counters include the step just fired."""
    pending = pending_follow_ups(
        follow_ups(delivered_at, timing, intent), reminders_sent, escalations_sent
    )
    return pending[0].at if pending else None


def plan(
    accepted_at: datetime,
    schedule_time: datetime | None,
    timing: Timing,
    intent: str | None,
) -> list[Step]:
    """Simulate's ``planned_steps``: the first delivery (assuming it succeeds at its
    first attempt), then, with require_ack and no answer, every reminder and
    escalation step and the deadline."""
    nominal = accepted_at if schedule_time is None or schedule_time < accepted_at else schedule_time
    delivery_at = first_attempt_at(accepted_at, schedule_time, timing.quiet, intent)
    steps = [Step(StepKind.DELIVERY, 1, delivery_at, timing.channels, delivery_at != nominal)]
    if timing.require_ack:
        steps += follow_ups(delivery_at, timing, intent)
        steps.append(Step(StepKind.DEADLINE, 1, delivery_at + timing.ack_timeout, ()))
    return steps


# -- retrying one step ----------------------------------------------------------------

# Provider calls per reminder or escalation step at most: the policy's max_attempts,
# capped here, because a step retried for long would crowd the next one (steps fire in
# order) and a reminder that comes late is worth little.
STEP_ATTEMPTS_MAX = 5
# A provider's Retry-After beyond this is treated as this (the deadline bounds it anyway).
STEP_RETRY_AFTER_CAP_SECONDS = 3600.0


class StepOutcome(StrEnum):
    """How a step was decided (the ``decision`` of its REMINDER_SENT / ESCALATED event)."""

    SENT = "SENT"  # every channel accepted it
    GAVE_UP = "GAVE_UP"  # a channel refused for good, or retries ran out before it accepted
    STOPPED = "STOPPED"  # the ack settled or was withdrawn while the step waited to retry


@dataclass(frozen=True)
class ChannelAnswer:
    """What one channel said to the latest call of a step (``ChannelResult``, classified)."""

    success: bool
    retryable: bool
    retry_after_seconds: float | None = None

    @property
    def transient(self) -> bool:
        return not self.success and self.retryable


@dataclass(frozen=True)
class StepDecided:
    """Record the step now (its one event) and move on to the next."""

    outcome: StepOutcome


@dataclass(frozen=True)
class RetryStep:
    """Call ``channels`` (those that failed transiently) again at ``at``; no event yet."""

    at: datetime
    channels: tuple[str, ...]


def decide_step_attempt(
    *,
    channels: Sequence[str],
    answers: Mapping[str, ChannelAnswer],
    attempts: int,
    max_attempts: int,
    ack_pending: bool,
    now: datetime,
    deadline: datetime,
    quiet: QuietHours | None,
    intent: str | None,
    rand: Callable[[], float],
) -> StepDecided | RetryStep:
    """After ``attempts`` calls of one step, with each channel's latest answer: decided,
    or retried on the channels that failed transiently, with the delivery backoff
    (``domain.retry``), held by quiet hours.

    A channel that accepted is never called again, and a permanent refusal is final for
    its channel. Once no channel is left to retry the step is SENT (all accepted) or
    GAVE_UP. Otherwise it is STOPPED when the ack is no longer pending, GAVE_UP after
    ``min(max_attempts, STEP_ATTEMPTS_MAX)`` calls or when the retry would not come
    before the ack deadline, and retried on the transient channels alone.
    """
    retry = tuple(ch for ch in channels if ch not in answers or answers[ch].transient)
    if not retry:
        if all(answers[ch].success for ch in channels):
            return StepDecided(StepOutcome.SENT)
        return StepDecided(StepOutcome.GAVE_UP)
    if not ack_pending:
        return StepDecided(StepOutcome.STOPPED)
    if attempts >= min(max_attempts, STEP_ATTEMPTS_MAX):
        return StepDecided(StepOutcome.GAVE_UP)
    hint = max(
        (answers[ch].retry_after_seconds or 0.0 for ch in retry if ch in answers), default=0.0
    )
    due = next_attempt_at(
        now,
        max(attempts, 1),
        rand=rand,
        retry_after_seconds=min(hint, STEP_RETRY_AFTER_CAP_SECONDS),
    )
    due = next_allowed(due, quiet, intent)
    if due >= deadline:
        return StepDecided(StepOutcome.GAVE_UP)
    return RetryStep(due, retry)

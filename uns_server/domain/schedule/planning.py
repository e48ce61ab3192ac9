"""Scheduled sends and Simulate's plan: the first attempt, then the whole timeline."""

from __future__ import annotations

from datetime import datetime, timedelta

from uns_server.domain.errors import FieldViolation
from uns_server.domain.schedule.follow_up_steps import Step, StepKind, Timing, follow_ups
from uns_server.domain.schedule.quiet_hours import QuietHours, next_allowed

SCHEDULE_AHEAD_MAX = timedelta(days=90)


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


def plan(
    accepted_at: datetime,
    schedule_time: datetime | None,
    timing: Timing,
    intent: str | None,
    delivered_at: datetime | None = None,
) -> list[Step]:
    """Simulate's ``planned_steps``: the first delivery (assuming it succeeds at its
    first attempt), then, with require_ack and no answer, every reminder and
    escalation step and the deadline, counted from ``delivered_at`` (by default the
    first attempt; later when a person's own quiet hours hold their message, since
    the delivery completes only once every message is sent)."""
    nominal = accepted_at if schedule_time is None or schedule_time < accepted_at else schedule_time
    delivery_at = first_attempt_at(accepted_at, schedule_time, timing.quiet, intent)
    steps = [
        Step(
            StepKind.DELIVERY,
            1,
            delivery_at,
            timing.channels,
            delivery_at != nominal,
            timing.targets,
        )
    ]
    if timing.require_ack:
        done = delivered_at or delivery_at
        steps += follow_ups(done, timing, intent)
        steps.append(Step(StepKind.DEADLINE, 1, done + timing.ack_timeout, ()))
    return steps

"""Reminders and escalation steps: which is due after delivery, and when (SPEC §5).

Offsets from the delivery instant ``d``::

    reminder k at  d + first_after * (1 + m + ... + m^(k-1)),  k = 1..max_count
    step i     at  d + escalation[i].after  (+ p * max(after) in loop p, p <= escalation_loops)
    deadline   at  d + ack_timeout_minutes          (TIMED_OUT, unchanged)

Every step passes through :func:`~uns_server.domain.schedule.quiet_hours.next_allowed`.
Reminders and steps whose (held) time is not before the deadline are not planned: once
the ack settles, times out or is withdrawn, nothing more is sent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from uns_server.domain.errors import FieldViolation
from uns_server.domain.schedule.quiet_hours import QuietHours, next_allowed
from uns_server.domain.targets import Target, targets_from_json, targets_json

REMINDER_FIRST_AFTER_MIN = timedelta(seconds=1)
REMINDER_FIRST_AFTER_MAX = timedelta(days=7)
REMINDER_MULTIPLIER_MAX = 10.0
REMINDER_MAX_COUNT_MAX = 20
ESCALATION_STEPS_MAX = 10
ESCALATION_LOOPS_MAX = 9


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
    """One ``PolicySpec.escalation`` step: ``after`` delivery, send to ``channels``
    and ask ``targets`` (people or rotations, resolved when the step fires)."""

    after: timedelta
    channels: tuple[str, ...]
    targets: tuple[Target, ...] = ()

    def to_json(self) -> dict[str, Any]:
        # ``targets`` only when set: steps written before them keep their hash.
        out: dict[str, Any] = {"after": self.after.total_seconds(), "channels": list(self.channels)}
        if self.targets:
            out["targets"] = targets_json(self.targets)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EscalationStep:
        return cls(
            timedelta(seconds=float(data["after"])),
            tuple(data["channels"]),
            targets_from_json(data.get("targets")),
        )


class StepKind(StrEnum):
    """What a planned step is (``uns.v1.PlannedStepKind``)."""

    DELIVERY = "DELIVERY"
    REMINDER = "REMINDER"
    ESCALATION = "ESCALATION"
    DEADLINE = "DEADLINE"
    PERSON_RULE = "PERSON_RULE"  # a person's staged rule (Simulate only)
    # The reminder at a snooze's end (SPEC §7): sent by the follow-up worker, never
    # planned (a snooze is not foreseen), counted apart from the policy's reminders.
    SNOOZE_REMINDER = "SNOOZE_REMINDER"


@dataclass(frozen=True)
class Step:
    """One planned step: the ``number``-th of its kind (1-based), due ``at``."""

    kind: StepKind
    number: int
    at: datetime
    channels: tuple[str, ...]
    held: bool = False  # quiet hours moved it from its nominal time
    # The people or rotations it asks (the policy's for the delivery and reminders,
    # the step's own for an escalation step); resolved when it is sent.
    targets: tuple[Target, ...] = ()


@dataclass(frozen=True)
class Timing:
    """The frozen policy values the timeline depends on."""

    channels: tuple[str, ...]
    require_ack: bool
    ack_timeout: timedelta
    quiet: QuietHours | None = None
    reminder: Reminder | None = None
    escalation: tuple[EscalationStep, ...] = ()
    targets: tuple[Target, ...] = ()
    escalation_loops: int = 0

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
    nominal: list[tuple[StepKind, int, datetime, tuple[str, ...], tuple[Target, ...]]] = []
    if timing.reminder is not None:
        nominal += [
            (StepKind.REMINDER, k, delivered_at + offset, timing.channels, timing.targets)
            for k, offset in enumerate(timing.reminder.offsets(timing.ack_timeout), start=1)
        ]
    nominal += [
        (StepKind.ESCALATION, i, delivered_at + after, step.channels, step.targets)
        for i, (after, step) in enumerate(escalation_offsets(timing), start=1)
    ]
    steps = []
    for kind, number, at, channels, targets in nominal:
        held = next_allowed(at, timing.quiet, intent)
        if held < deadline:
            steps.append(Step(kind, number, held, channels, held != at, targets))
    order = {StepKind.ESCALATION: 0, StepKind.REMINDER: 1}
    return sorted(steps, key=lambda s: (s.at, order[s.kind], s.number))


def snooze_reminder(timing: Timing, number: int, at: datetime) -> Step:
    """The reminder that asks again at the end of the ``number``-th snooze, due ``at``:
    a reminder's channels and targets. The policy's own steps keep their times
    (shifted by the pause); this one is beside them and moves no counter."""
    return Step(StepKind.SNOOZE_REMINDER, number, at, timing.channels, targets=timing.targets)


def escalation_offsets(timing: Timing) -> list[tuple[timedelta, EscalationStep]]:
    """Each escalation step's offset from delivery, looped: with ``escalation_loops``
    L, the steps run L more times after the first pass, pass ``p`` shifted by ``p``
    times the latest step's ``after`` (PagerDuty's ``num_loops``: after the last step,
    start again). Steps of any pass stop at the ack deadline like every step."""
    if not timing.escalation:
        return []
    period = max(step.after for step in timing.escalation)
    return [
        (p * period + step.after, step)
        for p in range(timing.escalation_loops + 1)
        for step in timing.escalation
    ]


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

"""A follow-up step between and after its provider calls: the progress stored in
``followup_step`` (calls made, each channel's latest answer) while the step retries
transiently failed channels, the frozen policy's timing it is decided against, and the
one event payload that records the decided step (``workers.followups``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from uns_server.channels.base import ChannelResult
from uns_server.domain import schedule
from uns_server.domain.records import Notification
from uns_server.domain.schedule import StepProgress

NUMBER_FIELD = {
    schedule.StepKind.REMINDER: "number",
    schedule.StepKind.ESCALATION: "step",
    schedule.StepKind.SNOOZE_REMINDER: "snooze",  # the snooze's number (SNOOZE_ENDED's)
}


def progress_of(n: Notification, step: schedule.Step | None = None) -> StepProgress | None:
    """The row's stored progress (of ``step``, when given)."""
    progress = n.followup_step
    if progress is None or (step is not None and not progress.is_of(step.kind, step.number)):
        return None
    return progress


def timing_of(n: Notification) -> tuple[schedule.Timing, str | None]:
    """The frozen policy's timing and the notification's intent."""
    doc = n.notification
    return doc.effective.spec.timing, doc.intent.value if doc.intent else None


def sent_count(n: Notification, kind: schedule.StepKind) -> int:
    """How many steps of ``kind`` the notification has counted as sent."""
    return n.reminders_sent if kind == schedule.StepKind.REMINDER else n.escalations_sent


def result_json(result: ChannelResult) -> dict[str, Any]:
    return {
        "success": result.success,
        "retryable": result.retryable,
        "message_id": result.message_id,
        "error": result.error,
        "retry_after_seconds": result.retry_after_seconds,
    }


def snooze_step(
    n: Notification, number: int | None, due: datetime, timing: schedule.Timing
) -> schedule.Step | None:
    """The reminder of snooze ``number`` (due ``due``, or when its stored progress
    says); None for a plain look at the policy's steps."""
    if number is None:
        return None
    progress = n.followup_step
    if progress is not None and progress.is_of(schedule.StepKind.SNOOZE_REMINDER, number):
        return step_of(progress, timing)
    return schedule.snooze_reminder(timing, number, due)


def step_of(progress: StepProgress, timing: schedule.Timing) -> schedule.Step:
    """The step a stored progress belongs to (its channels, from the frozen policy)."""
    if progress.kind == schedule.StepKind.SNOOZE_REMINDER:
        return schedule.snooze_reminder(timing, progress.number, progress.due_time)
    if progress.kind == schedule.StepKind.REMINDER:
        channels = timing.channels
    else:
        # Step numbers run on through the loops (``escalation_offsets``).
        channels = timing.escalation[(progress.number - 1) % len(timing.escalation)].channels
    return schedule.Step(progress.kind, progress.number, progress.due_time, channels)


def step_payload(
    step: schedule.Step,
    progress: StepProgress,
    outcome: schedule.StepOutcome,
    *,
    lease_token: str | None,
    people: Mapping[str, str] | None = None,
    unreachable: Sequence[Mapping[str, str]] = (),
    waiting: Mapping[str, Sequence[Mapping[str, str]]] | None = None,
) -> dict[str, Any]:
    """The step's one event: every channel's latest answer, the calls made, the decision;
    with targets, who it asked (``people``: route key -> recipient id), whom it could
    not reach, and whom it let wait (``waiting``: ``recipients_held``,
    ``recipients_not_due``)."""
    payload: dict[str, Any] = {
        NUMBER_FIELD[step.kind]: step.number,
        "channels": list(step.channels),
        "results": [
            {"channel": ch, **public_result(progress.results[ch])}
            for ch in step.channels
            if ch in progress.results
        ],
        "lease_token": lease_token,
        "due_time": step.at.isoformat(),
        "provider_effect_may_have_occurred": progress.recovered,
        "attempts": progress.calls,
        "decision": outcome.value,
    }
    if step.kind == schedule.StepKind.SNOOZE_REMINDER:  # REMINDER_SENT after a snooze
        payload["follow_up"] = step.kind.value
    if people:  # SPEC §6: who the step asked, per result too
        payload["recipient_ids"] = list(dict.fromkeys(people.values()))
        for r in payload["results"]:
            if r["channel"] in people:
                r["recipient_id"] = people[r["channel"]]
                r["route"], r["channel"] = r["channel"], r["channel"].partition("@")[0]
    if unreachable:
        payload["recipients_unreachable"] = list(unreachable)
    # Whom it did not ask now: in their quiet hours, or not due a reminder yet.
    payload |= {k: list(v) for k, v in (waiting or {}).items() if v}
    return payload


def public_result(result: Mapping[str, Any]) -> dict[str, Any]:
    return {k: result.get(k) for k in ("success", "retryable", "message_id", "error")}

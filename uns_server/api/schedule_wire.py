"""The policy's schedule and targets on the wire: quiet hours, reminders, escalation
steps, targets, Simulate's planned steps (split from ``api.convert``, which
re-exports them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from google.protobuf import duration_pb2, timestamp_pb2

from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_server.domain.planned_people import PlannedAsk
from uns_server.domain.schedule import EscalationStep, QuietHours, Reminder, Step, StepKind
from uns_server.domain.targets import Target
from uns_server.services.message_preview import Preview, Previews


def quiet_hours(q: QuietHours | None) -> t.QuietHours | None:
    if q is None:
        return None
    return t.QuietHours(**q.to_json())


def duration(value: timedelta) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromTimedelta(value)
    return d


def reminder(r: Reminder | None) -> t.Reminder | None:
    if r is None:
        return None
    return t.Reminder(
        first_after=duration(r.first_after), multiplier=r.multiplier, max_count=r.max_count
    )


def targets(items: Sequence[Target]) -> list[t.Target]:
    return [
        t.Target(rotation_id=x.rotation_id)
        if x.rotation_id
        else t.Target(recipient_id=x.recipient_id)
        for x in items
    ]


def targets_from_wire(items: Sequence[t.Target]) -> list[Target]:
    """Shape is checked by the domain (exactly one id, well formed)."""
    return [Target(x.recipient_id, x.rotation_id) for x in items]


def escalation(steps: Sequence[EscalationStep]) -> list[t.EscalationStep]:
    return [
        t.EscalationStep(
            after=duration(s.after), channels=list(s.channels), targets=targets(s.targets)
        )
        for s in steps
    ]


def reminder_from_wire(r: t.Reminder) -> Reminder:
    return Reminder(r.first_after.ToTimedelta(), r.multiplier or 1.0, r.max_count)


def escalation_from_wire(steps: Sequence[t.EscalationStep]) -> list[EscalationStep]:
    return [
        EscalationStep(
            s.after.ToTimedelta(),
            tuple(dict.fromkeys(s.channels)),
            tuple(dict.fromkeys(targets_from_wire(s.targets))),
        )
        for s in steps
    ]


def planned_steps(
    steps: Sequence[Step],
    accepted_at: datetime | None,
    asked: Mapping[tuple[StepKind, int], PlannedAsk] | None = None,
    messages: Previews | None = None,
) -> list[pb.PlannedStep]:
    """``asked``: who each step asks, by (kind, number); ``messages``: what it sends."""
    asked = asked or {}
    messages = messages or {}
    out = []
    for s in steps:
        assert accepted_at is not None
        who = asked.get((s.kind, s.number), PlannedAsk())
        step = pb.PlannedStep(
            kind=pb.PlannedStepKind.Value(f"PLANNED_STEP_KIND_{s.kind.value}"),
            number=s.number,
            offset=duration(s.at - accepted_at),
            channels=list(s.channels),
            held_by_quiet_hours=s.held,
            recipient_ids=list(who.sent),
            held_recipients=[
                pb.HeldRecipient(recipient_id=rid, hold_end_time=_timestamp(until))
                for rid, until in who.held.items()
            ],
            not_due_recipients=[
                pb.NotDueRecipient(recipient_id=rid, due_time=_timestamp(due))
                for rid, due in who.not_due.items()
            ],
            messages=[_rendered(m) for m in messages.get((s.kind, s.number), ())],
        )
        step.time.FromDatetime(s.at)
        out.append(step)
    return out


def _rendered(m: Preview) -> pb.RenderedMessage:
    return pb.RenderedMessage(
        channel=m.channel,
        channel_type=m.channel_type,
        recipient_id=m.recipient_id,
        locale=m.locale,
        title=m.text.title,
        body=m.text.body,
        template_index=m.text.template,
        template_error=m.text.error,
    )


def _timestamp(value: datetime | None) -> timestamp_pb2.Timestamp | None:
    if value is None:
        return None
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(value)
    return ts

"""Simulate's planned_steps against what happens: a scheduled notification with
quiet hours (across the US DST change), reminders and escalation steps is run
through a moved clock, and its events match the plan step for step."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from google.protobuf import timestamp_pb2

from tests.support.policies import activate_policy
from tests.support.server import RunningServer, ShiftableClock, send_request, start_server
from tests.support.watching import events_until
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_server.domain.enums import DeliveryMode
from uns_server.domain.schedule import EscalationStep, Reminder

TYPE = "ops.planned"
T0 = datetime(2026, 3, 8, 5, tzinfo=UTC)  # 00:00 EST, the night clocks spring forward
# Quiet 01:30-02:30 New York time: 02:30 does not exist that night, so the window
# ends at the jump, 03:00 EDT = 07:00 UTC.
QUIET = {"time_zone": "America/New_York", "start": "01:30", "end": "02:30"}


@pytest.fixture
def clock() -> ShiftableClock:
    return ShiftableClock()


@pytest.fixture
async def srv(db_url: str, tmp_path: Path, clock: ShiftableClock) -> AsyncIterator[RunningServer]:
    await activate_policy(
        db_url,
        TYPE,
        channels=["log"],
        delivery_mode=DeliveryMode.GUARANTEED,
        require_ack=True,
        ack_timeout_minutes=120,
        quiet_hours=QUIET,
        reminder=Reminder(timedelta(minutes=10), 2.0, 4),
        escalation=(EscalationStep(timedelta(minutes=45), ("log",)),),
    )
    running = await start_server(db_url, tmp_path, clock=clock, dispatch_enabled=False)
    try:
        yield running
    finally:
        await running.stop()


def minutes(m: float) -> timedelta:
    return timedelta(minutes=m)


K = pb.PlannedStepKind


async def test_the_plan_is_what_happens(srv: RunningServer, clock: ShiftableClock) -> None:
    clock.offset = T0 - datetime.now(UTC)
    when = timestamp_pb2.Timestamp()
    when.FromDatetime(T0 + minutes(60))  # 01:00 EST
    request = send_request(notification_type=TYPE, idempotency_key="plan", schedule_time=when)
    alice = srv.stub("alice")
    sim = await alice.Simulate(pb.SimulateRequest(request=request))
    plan = [
        (
            K.Name(s.kind).removeprefix("PLANNED_STEP_KIND_"),
            s.number,
            timedelta(seconds=round(s.offset.ToTimedelta().total_seconds())),
            s.held_by_quiet_hours,
        )
        for s in sim.planned_steps
    ]
    assert plan == [
        ("DELIVERY", 1, minutes(60), False),
        ("REMINDER", 1, minutes(70), False),
        ("ESCALATION", 1, minutes(120), True),  # 01:45 EST, held to the jump
        ("REMINDER", 2, minutes(120), True),  # 01:30 EST, held to the jump
        ("REMINDER", 3, minutes(130), False),
        # Reminder 4 would fall 150 minutes after delivery, past the deadline at 120.
        ("DEADLINE", 1, minutes(180), False),
    ]
    assert [list(s.channels) for s in sim.planned_steps][-1] == []

    sent = await alice.SendNotification(request)
    nid = sent.notification_id
    app = srv.app
    for step in sim.planned_steps:  # live through the plan, one step at a time
        # A few seconds late, as a worker polling would be (and the delivery settles a
        # moment after its time, moving every later step by as much).
        late = timedelta(seconds=60 if step.kind == K.PLANNED_STEP_KIND_DEADLINE else 5)
        clock.offset += step.time.ToDatetime(tzinfo=UTC) + late - clock()
        await app.dispatcher.run_once()
        await app.followups.run_once()
        await app.timers.run_once()
    events = await events_until(
        alice,
        pb.WatchEventsRequest(replay_history=True, notification_ids=[nid]),
        lambda evs: bool(evs) and evs[-1].kind == t.EVENT_KIND_TIMED_OUT,
    )
    happened = []
    for e in events:
        payload = dict(e.payload)
        if e.kind == t.EVENT_KIND_DELIVERY_RESULT and payload["status"] == "DELIVERED":
            happened.append(("DELIVERY", 1, e.at.ToDatetime(tzinfo=UTC)))
        elif e.kind in (t.EVENT_KIND_REMINDER_SENT, t.EVENT_KIND_ESCALATED):
            kind = "REMINDER" if e.kind == t.EVENT_KIND_REMINDER_SENT else "ESCALATION"
            number = int(payload.get("number") or payload["step"])
            happened.append((kind, number, datetime.fromisoformat(payload["due_time"])))
        elif e.kind == t.EVENT_KIND_TIMED_OUT:
            n = await alice.GetNotification(pb.GetNotificationRequest(notification_id=nid))
            happened.append(
                ("DEADLINE", 1, n.notification.ack_deadline_time.ToDatetime(tzinfo=UTC))
            )
    assert [(k, n) for k, n, _ in happened] == [(k, n) for k, n, _, _ in plan]
    # Each was due when planned (up to the delivery's few seconds of lateness).
    for (_, _, at), step in zip(happened, sim.planned_steps, strict=True):
        assert abs(at - step.time.ToDatetime(tzinfo=UTC)) < timedelta(seconds=10)

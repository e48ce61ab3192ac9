"""Simulate's plan for people (SPEC §6, issue 31 item 5) against what happens, on
SQLite, through a real server with a movable clock: a person held by
their own quiet hours at the delivery is shown held until their hold ends (the other
asked at once, and the follow-ups counted from when the delivery completes), and a
person paged again by an escalation step is shown not due at the next reminder; then
the request is sent and lived through, and the events say the same."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.support.people import acked_spec, minutes, operator_stub, put_people, put_policy
from tests.support.server import RunningServer, ShiftableClock, send_request, start_server
from tests.support.watching import events_until
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import recipient_service_pb2 as rpb
from uns.v1 import recipient_service_pb2_grpc as rpb_grpc
from uns.v1 import types_pb2 as t

TYPE = "ops.people.plan"
ZONE = "Asia/Tokyo"  # alice's own zone, far from the server's UTC
K = pb.PlannedStepKind
# Workers polling run a moment after a step is due: the delivery 5 seconds late (so
# every later step is due 5 seconds later than planned), the follow-ups 30.
LATE = timedelta(seconds=5)
LATER = timedelta(seconds=30)


@pytest.fixture
def clock() -> ShiftableClock:
    return ShiftableClock()


@pytest.fixture
async def srv(db_url: str, tmp_path: Path, clock: ShiftableClock) -> AsyncIterator[RunningServer]:
    running = await start_server(db_url, tmp_path, clock=clock, dispatch_enabled=False)
    try:
        yield running
    finally:
        await running.stop()


def wall(value: datetime) -> str:
    return value.astimezone(ZoneInfo(ZONE)).strftime("%H:%M")


def at(ts: Any) -> datetime:
    return ts.ToDatetime(tzinfo=UTC)


def kind(step: pb.PlannedStep) -> str:
    return K.Name(step.kind).removeprefix("PLANNED_STEP_KIND_")


def asked(step: pb.PlannedStep) -> tuple[list[str], list[str], list[str]]:
    return (
        list(step.recipient_ids),
        [h.recipient_id for h in step.held_recipients],
        [n.recipient_id for n in step.not_due_recipients],
    )


async def simulate(srv: RunningServer, **fields: Any) -> pb.SimulateResponse:
    request = send_request(notification_type=TYPE, idempotency_key="plan", **fields)
    reply: pb.SimulateResponse = await srv.stub("alice").Simulate(
        pb.SimulateRequest(request=request)
    )
    return reply


async def send(srv: RunningServer) -> str:
    sent = await srv.stub("alice").SendNotification(
        send_request(notification_type=TYPE, idempotency_key="plan")
    )
    return str(sent.notification_id)


async def run_at(srv: RunningServer, clock: ShiftableClock, when: datetime) -> None:
    clock.offset += when + LATE - clock()
    await srv.app.dispatcher.run_once()
    clock.offset += when + LATER - clock()
    await srv.app.followups.run_once()


async def events(srv: RunningServer, nid: str, done: Any) -> list[t.Event]:
    return await events_until(
        srv.stub("oscar"),
        pb.WatchEventsRequest(replay_history=True, notification_ids=[nid]),
        done,
    )


def within(a: datetime, b: datetime) -> bool:
    return abs(a - b) <= LATER


async def test_a_person_asleep_at_the_delivery_is_planned_held_until_their_morning(
    srv: RunningServer, clock: ShiftableClock
) -> None:
    now = clock().replace(second=0, microsecond=0)
    wakes = now + timedelta(hours=1)
    await put_people(srv, {"alice": [("log", "alice")], "bob": [("log", "bob")]})
    # Alice asleep from an hour ago until an hour from now, in her zone.
    await operator_stub(srv, rpb_grpc.RecipientServiceStub).PutRecipient(
        rpb.PutRecipientRequest(
            recipient=rpb.Recipient(
                recipient_id="alice",
                display_name="Alice",
                time_zone=ZONE,
                contacts=[rpb.Contact(channel="log", address="alice")],
                quiet_hours=t.QuietHours(
                    time_zone=ZONE, start=wall(now - timedelta(hours=1)), end=wall(wakes)
                ),
            )
        )
    )
    await put_policy(
        srv,
        TYPE,
        acked_spec(
            targets=[t.Target(recipient_id="alice"), t.Target(recipient_id="bob")],
            reminder=t.Reminder(first_after=minutes(30), multiplier=1, max_count=1),
        ),
    )
    sim = await simulate(srv)
    delivery, reminder, deadline = sim.planned_steps
    assert [(kind(s), s.number) for s in sim.planned_steps] == [
        ("DELIVERY", 1),
        ("REMINDER", 1),
        ("DEADLINE", 1),
    ]
    # Bob is sent the delivery at once; alice's waits for the end of her quiet hours.
    assert asked(delivery) == (["bob"], ["alice"], [])
    assert at(delivery.held_recipients[0].hold_end_time) == wakes
    # The delivery completes when alice's message goes out: the rest counts from then.
    assert at(reminder.time) == wakes + timedelta(minutes=30)
    assert asked(reminder) == (["alice", "bob"], [], [])
    assert at(deadline.time) == wakes + timedelta(minutes=240)
    # SAFETY is never held.
    safety = await simulate(srv, intent=t.NOTIFICATION_INTENT_SAFETY)
    assert asked(safety.planned_steps[0]) == (["alice", "bob"], [], [])

    # Live through it: what the server does is what the plan said.
    nid = await send(srv)
    await run_at(srv, clock, at(delivery.time))
    await run_at(srv, clock, wakes)
    await run_at(srv, clock, at(reminder.time))
    seen = await events(
        srv, nid, lambda evs: any(e.kind == t.EVENT_KIND_REMINDER_SENT for e in evs)
    )
    results = [dict(e.payload) for e in seen if e.kind == t.EVENT_KIND_DELIVERY_RESULT]
    assert [r["status"] for r in results] == ["PENDING", "DELIVERED"]
    [held] = results[0]["outcome"]["held"]
    assert (held["recipient_id"], datetime.fromisoformat(held["held_until"])) == ("alice", wakes)
    sent = [
        (e.payload["attempt"], e.payload["recipient_id"])
        for e in seen
        if e.kind == t.EVENT_KIND_CHANNEL_ATTEMPT_RESULT
    ]
    assert [rid for _, rid in sent] == ["bob", "alice"]
    n = await srv.stub("oscar").GetNotification(pb.GetNotificationRequest(notification_id=nid))
    assert within(at(n.notification.deliver_time), wakes)
    [reminded] = [e.payload for e in seen if e.kind == t.EVENT_KIND_REMINDER_SENT]
    assert within(datetime.fromisoformat(reminded["due_time"]), at(reminder.time))
    assert list(reminded["recipient_ids"]) == list(reminder.recipient_ids)


async def test_a_person_paged_again_is_planned_not_due_at_the_next_reminder(
    srv: RunningServer, clock: ShiftableClock
) -> None:
    await put_people(srv, {"alice": [("log", "alice")], "bob": [("log", "bob")]})
    # Reminders at +10, +40, +130 (each interval three times the last); alice is paged
    # again by the escalation step at +35.
    await put_policy(
        srv,
        TYPE,
        acked_spec(
            targets=[t.Target(recipient_id="alice"), t.Target(recipient_id="bob")],
            reminder=t.Reminder(first_after=minutes(10), multiplier=3, max_count=3),
            escalation=[
                t.EscalationStep(after=minutes(35), targets=[t.Target(recipient_id="alice")])
            ],
        ),
    )
    sim = await simulate(srv)
    t0 = at(sim.planned_steps[0].time)
    plan = [
        (kind(s), s.number, round((at(s.time) - t0).total_seconds() / 60), *asked(s))
        for s in sim.planned_steps
    ]
    assert plan == [
        ("DELIVERY", 1, 0, ["alice", "bob"], [], []),
        ("REMINDER", 1, 10, ["alice", "bob"], [], []),
        ("ESCALATION", 1, 35, ["alice"], [], []),
        # Bob is due (10 + 3 * 10); alice, paged at +35, not before +65.
        ("REMINDER", 2, 40, ["bob"], [], ["alice"]),
        # Bob's third; alice's second (her count is 1, not the obligation's 2).
        ("REMINDER", 3, 130, ["alice", "bob"], [], []),
        ("DEADLINE", 1, 240, [], [], []),
    ]
    [not_due] = sim.planned_steps[3].not_due_recipients
    assert at(not_due.due_time) == t0 + timedelta(minutes=65)

    # Live through it: each step's event names whom the plan said.
    nid = await send(srv)
    follow_ups = [s for s in sim.planned_steps if kind(s) in ("REMINDER", "ESCALATION")]
    for step in sim.planned_steps[:-1]:
        await run_at(srv, clock, at(step.time))
    fired = (t.EVENT_KIND_REMINDER_SENT, t.EVENT_KIND_ESCALATED)
    seen = await events(srv, nid, lambda evs: sum(e.kind in fired for e in evs) >= len(follow_ups))
    happened = [dict(e.payload) for e in seen if e.kind in fired]
    assert [list(p["recipient_ids"]) for p in happened] == [
        list(s.recipient_ids) for s in follow_ups
    ]
    assert [[w["recipient_id"] for w in p.get("recipients_not_due", [])] for p in happened] == [
        [n.recipient_id for n in s.not_due_recipients] for s in follow_ups
    ]
    runtime_due = datetime.fromisoformat(happened[2]["recipients_not_due"][0]["due_time"])
    assert within(runtime_due, at(not_due.due_time))

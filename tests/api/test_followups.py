"""Reminders and escalation steps through gRPC on both dialects, with webhook
receivers on loopback and the clock moved by the test (workers stepped with
``run_once``): each step fires once, on its channels, marked with its number; they
stop when the ack settles or is withdrawn; a second replica never decides a step
twice; an interrupted step is recovered and flagged; a transient provider failure is
retried on that channel alone, bounded, and the step recorded once."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from tests.support.http_receiver import HttpReceiver, Reply
from tests.support.policies import activate_policy
from tests.support.server import RunningServer, ShiftableClock, send_request, start_server
from tests.support.watching import events_until, kinds
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_server.domain.enums import DeliveryMode
from uns_server.domain.schedule import EscalationStep, Reminder
from uns_server.workers.followups import FollowUpWorker

SECRET = "whsec_cGxhbnRlZC1zZWNyZXQtdmFsdWUtMTIzNDU="
TYPE = "ops.nag"
# From delivery: reminder 1 at 10m, step 1 at 20m, reminder 2 at 30m, step 2 at 45m,
# deadline at 60m (reminder 3 would fall at 70m: not planned).
REMINDER = Reminder(timedelta(minutes=10), 2.0, 3)
STEPS = (
    EscalationStep(timedelta(minutes=20), ("pager",)),
    EscalationStep(timedelta(minutes=45), ("pager", "hook")),
)


@dataclass
class Rig:
    server: RunningServer
    hook: HttpReceiver
    pager: HttpReceiver
    clock: ShiftableClock

    @property
    def worker(self) -> FollowUpWorker:
        return self.server.app.followups

    def replica(self) -> FollowUpWorker:
        """Another server's worker on the same database."""
        app = self.server.app
        return FollowUpWorker(app.store, app.channels, self.clock, lease_seconds=30, poll_seconds=1)

    async def delivered(self) -> tuple[str, datetime]:
        sent = await self.server.stub("alice").SendNotification(
            send_request(notification_type=TYPE)
        )
        assert (await self.server.app.dispatcher.run_once()).claimed == 1
        n = await self.get(sent.notification_id)
        assert n.ack_state == t.ACK_STATE_PENDING
        return sent.notification_id, n.deliver_time.ToDatetime(tzinfo=UTC)

    async def get(self, notification_id: str) -> t.Notification:
        reply = await self.server.stub("oscar").GetNotification(
            pb.GetNotificationRequest(notification_id=notification_id)
        )
        return reply.notification

    def at(self, instant: datetime) -> None:
        self.clock.offset += instant - self.clock()

    async def events(self, notification_id: str, last_kind: int) -> list[t.Event]:
        return await events_until(
            self.server.stub("oscar"),
            pb.WatchEventsRequest(replay_history=True, notification_ids=[notification_id]),
            lambda evs: bool(evs) and evs[-1].kind == last_kind,
        )


@contextlib.asynccontextmanager
async def started_rig(db_url: str, tmp_path: Path, **server: object) -> AsyncIterator[Rig]:
    """A server (dispatch off, stepped by the test) with a `hook` and a `pager` webhook
    channel and the reminder/escalation policy TYPE; ``server`` overrides settings."""
    async with HttpReceiver() as hook, HttpReceiver() as pager:
        hook.default = pager.default = Reply.json({"ok": True})
        channels = tmp_path / "channels.yaml"
        channels.write_text(
            f"hook:\n  type: webhook\n  url: {hook.url('/hook')}\n  secret: {SECRET}\n"
            f"pager:\n  type: webhook\n  url: {pager.url('/pager')}\n  secret: {SECRET}\n"
        )
        await activate_policy(
            db_url,
            TYPE,
            channels=["hook"],
            delivery_mode=DeliveryMode.GUARANTEED,
            require_ack=True,
            ack_timeout_minutes=60,
            reminder=REMINDER,
            escalation=STEPS,
        )
        clock = ShiftableClock()
        running = await start_server(
            db_url,
            tmp_path,
            clock=clock,
            channels_file=str(channels),
            dispatch_enabled=False,
            **server,
        )
        try:
            yield Rig(running, hook, pager, clock)
        finally:
            await running.stop()


@pytest.fixture
async def rig(db_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with started_rig(db_url, tmp_path) as running:
        yield running


def minutes(m: float) -> timedelta:
    return timedelta(minutes=m)


async def test_steps_fire_once_each_on_their_channels_until_the_ack(rig: Rig) -> None:
    nid, d = await rig.delivered()
    assert (await rig.worker.run_once()).fired == 0  # nothing due yet: looks again at 10m
    assert (await rig.get(nid)).next_follow_up_time.ToDatetime(tzinfo=UTC) == d + minutes(10)

    rig.at(
        d
        + minutes(
            10,
        )
        + timedelta(seconds=1)
    )
    assert (await rig.worker.run_once()).fired == 1
    assert (await rig.worker.run_once()).fired == 0  # once only
    [_, reminder] = await rig.hook.wait_for_requests(2)  # the delivery, then reminder 1
    data = reminder.json()["data"]
    assert data["follow_up"] == {"kind": "REMINDER", "number": 1}
    assert data["title"].startswith("Reminder 1: ")
    assert reminder.headers["webhook-id"] == f"{nid}:hook:reminder:1"

    rig.at(d + minutes(20) + timedelta(seconds=1))
    assert (await rig.worker.run_once()).fired == 1
    [step] = await rig.pager.wait_for_requests(1)
    assert step.json()["data"]["follow_up"] == {"kind": "ESCALATION", "number": 1}
    n = await rig.get(nid)
    assert (n.reminders_sent, n.escalations_sent) == (1, 1)
    assert n.next_follow_up_time.ToDatetime(tzinfo=UTC) == d + minutes(30)

    await rig.server.stub("rita").Acknowledge(pb.AcknowledgeRequest(notification_id=nid))
    rig.at(d + minutes(50))
    assert (await rig.worker.run_once()).fired == 0  # the ack settled: nothing more
    events = await rig.events(nid, t.EVENT_KIND_ACKED)
    follow = [e for e in events if e.kind in (t.EVENT_KIND_REMINDER_SENT, t.EVENT_KIND_ESCALATED)]
    assert kinds(follow) == ["REMINDER_SENT", "ESCALATED"]
    assert follow[0].payload["number"] == 1 and follow[1].payload["step"] == 1
    assert follow[1].payload["channels"] == ["pager"]
    assert follow[1].payload["results"][0]["success"] is True
    assert follow[0].payload["provider_effect_may_have_occurred"] is False
    assert len(rig.hook.requests) == 2 and len(rig.pager.requests) == 1


async def test_withdrawal_stops_reminders_and_fences_one_in_flight(rig: Rig) -> None:
    nid, d = await rig.delivered()
    await rig.worker.run_once()
    rig.at(d + minutes(10) + timedelta(seconds=1))
    claims, _ = await rig.worker.claim()
    assert len(claims) == 1
    await rig.server.stub("alice").WithdrawNotification(
        pb.WithdrawNotificationRequest(notification_id=nid, reason="resolved")
    )
    await rig.worker.deliver(claims[0])  # sent, but its settlement is fenced
    rig.at(d + minutes(59))
    assert (await rig.worker.run_once()).fired == 0
    events = await rig.events(nid, t.EVENT_KIND_LEASE_LOST)
    assert kinds(events)[-2:] == ["WITHDRAWN", "LEASE_LOST"]
    assert events[-1].payload["follow_up"] == "REMINDER"
    assert t.EVENT_KIND_REMINDER_SENT not in [e.kind for e in events]
    n = await rig.get(nid)
    assert n.ack_state == t.ACK_STATE_WITHDRAWN and n.reminders_sent == 0
    assert not n.HasField("next_follow_up_time")


async def test_replicas_decide_each_step_once_and_recover_an_interrupted_one(
    rig: Rig,
) -> None:
    nid, d = await rig.delivered()
    await rig.worker.run_once()
    rig.at(d + minutes(10) + timedelta(seconds=1))
    other = rig.replica()
    [mine], _ = await rig.worker.claim()
    assert (await other.claim())[0] == []  # leased: the other replica skips it
    # This worker dies before sending; its lease expires, the rescuer makes the step
    # due again and the other replica recovers it.
    rig.at(d + minutes(12))
    assert (await rig.server.app.rescuer.run_once()).retried == 1
    [recovered], _ = await other.claim()
    assert recovered.recovered and recovered.step == mine.step
    await other.deliver(recovered)
    assert not await rig.worker.settle(mine, [])  # the stale worker is fenced
    events = await rig.events(nid, t.EVENT_KIND_LEASE_LOST)
    sent = [e for e in events if e.kind == t.EVENT_KIND_REMINDER_SENT]
    assert len(sent) == 1 and sent[0].payload["provider_effect_may_have_occurred"] is True
    assert (await rig.get(nid)).reminders_sent == 1


async def test_without_an_answer_every_step_fires_then_the_deadline(rig: Rig) -> None:
    nid, d = await rig.delivered()
    for m in (0, 10, 20, 30, 45, 59):
        rig.at(d + minutes(m) + timedelta(seconds=1))
        await rig.worker.run_once()
    rig.at(d + minutes(61))
    assert (await rig.server.app.timers.run_once()).timed_out == 1
    assert (await rig.worker.run_once()).fired == 0
    events = await rig.events(nid, t.EVENT_KIND_TIMED_OUT)
    follow = [
        (e.kind, dict(e.payload).get("number") or dict(e.payload).get("step"))
        for e in events
        if e.kind in (t.EVENT_KIND_REMINDER_SENT, t.EVENT_KIND_ESCALATED)
    ]
    assert follow == [
        (t.EVENT_KIND_REMINDER_SENT, 1),
        (t.EVENT_KIND_ESCALATED, 1),
        (t.EVENT_KIND_REMINDER_SENT, 2),
        (t.EVENT_KIND_ESCALATED, 2),
    ]


async def test_watch_filters_on_the_new_kinds(rig: Rig) -> None:
    nid, d = await rig.delivered()
    for m in (0, 10, 20):
        rig.at(d + minutes(m) + timedelta(seconds=1))
        await rig.worker.run_once()
    await rig.server.stub("alice").WithdrawNotification(
        pb.WithdrawNotificationRequest(notification_id=nid)
    )
    wanted = [t.EVENT_KIND_REMINDER_SENT, t.EVENT_KIND_ESCALATED, t.EVENT_KIND_WITHDRAWN]
    seen = await events_until(
        rig.server.stub("alice"),  # the producer sees its own follow-ups
        pb.WatchEventsRequest(replay_history=True, kinds=wanted),
        lambda evs: bool(evs) and evs[-1].kind == t.EVENT_KIND_WITHDRAWN,
    )
    assert kinds(seen) == ["REMINDER_SENT", "ESCALATED", "WITHDRAWN"]


async def answered_until(rig: Rig, d: datetime, *marks: float) -> None:
    """Run the worker at each mark (minutes after delivery), one step per mark."""
    for m in marks:
        rig.at(d + minutes(m) + timedelta(seconds=1))
        await rig.worker.run_once()


def is_step(e: t.Event, number: int) -> bool:
    return e.kind == t.EVENT_KIND_ESCALATED and e.payload["step"] == number


async def step_events(rig: Rig, nid: str, number: int, *, withdraw: bool = True) -> list[t.Event]:
    """Every ESCALATED event of step ``number``: the whole history up to a withdrawal
    made now (so a second event would be seen), or up to the first one."""
    if withdraw:
        await rig.server.stub("alice").WithdrawNotification(
            pb.WithdrawNotificationRequest(notification_id=nid)
        )
    events = await events_until(
        rig.server.stub("oscar"),
        pb.WatchEventsRequest(replay_history=True, notification_ids=[nid]),
        lambda evs: (
            bool(evs)
            and (evs[-1].kind == t.EVENT_KIND_WITHDRAWN if withdraw else is_step(evs[-1], number))
        ),
    )
    return [e for e in events if is_step(e, number)]


async def test_a_transient_failure_is_retried_on_that_channel_alone(rig: Rig) -> None:
    nid, d = await rig.delivered()
    await answered_until(rig, d, 0, 10, 20, 30)
    await rig.hook.wait_for_requests(3)  # the delivery, reminders 1 and 2
    rig.pager.script(Reply(status=503))
    await answered_until(rig, d, 45)  # step 2: the pager fails, the hook accepts
    await rig.pager.wait_for_requests(2)
    n = await rig.get(nid)
    assert n.escalations_sent == 1  # step 2 is not decided yet: no event
    retry_at = n.next_follow_up_time.ToDatetime(tzinfo=UTC)
    assert d + minutes(45) < retry_at < d + minutes(46)  # backoff, not the next step

    rig.at(retry_at + timedelta(milliseconds=1))
    assert (await rig.worker.run_once()).fired == 1
    *_, failed, retried = await rig.pager.wait_for_requests(3)
    step_id = f"{nid}:pager:escalation:2"
    assert failed.headers["webhook-id"] == retried.headers["webhook-id"] == step_id
    assert len(rig.hook.requests) == 4  # it accepted the first call: not called again
    n = await rig.get(nid)
    assert n.escalations_sent == 2 and not n.HasField("next_follow_up_time")
    [event] = await step_events(rig, nid, 2)
    assert event.payload["decision"] == "SENT" and event.payload["attempts"] == 2
    results = {r["channel"]: r["success"] for r in event.payload["results"]}
    assert results == {"pager": True, "hook": True}
    assert event.payload["provider_effect_may_have_occurred"] is False


async def test_a_permanent_rejection_is_final(rig: Rig) -> None:
    nid, d = await rig.delivered()
    rig.pager.script(Reply(status=400))
    await answered_until(rig, d, 0, 10, 20)
    n = await rig.get(nid)
    assert n.escalations_sent == 1
    assert n.next_follow_up_time.ToDatetime(tzinfo=UTC) == d + minutes(30)  # reminder 2
    await answered_until(rig, d, 29)
    assert len(rig.pager.requests) == 1
    [event] = await step_events(rig, nid, 1)
    assert event.payload["decision"] == "GAVE_UP" and event.payload["attempts"] == 1
    [result] = event.payload["results"]
    assert (result["success"], result["retryable"]) == (False, False)


async def test_retries_of_a_step_are_bounded(rig: Rig) -> None:
    nid, d = await rig.delivered()
    rig.pager.default = Reply(status=503)
    await answered_until(rig, d, 0, 10, 20)
    for _ in range(10):
        n = await rig.get(nid)
        if n.escalations_sent == 1:
            break
        rig.at(n.next_follow_up_time.ToDatetime(tzinfo=UTC) + timedelta(milliseconds=1))
        await rig.worker.run_once()
    # The policy's max_attempts (5 by default; at most STEP_ATTEMPTS_MAX).
    assert len(rig.pager.requests) == 5
    assert (await rig.get(nid)).escalations_sent == 1
    [event] = await step_events(rig, nid, 1)
    assert event.payload["decision"] == "GAVE_UP" and event.payload["attempts"] == 5
    assert event.payload["results"][0]["retryable"] is True


@pytest.mark.parametrize("ending", ["acknowledge", "withdraw"])
async def test_the_ack_ending_stops_a_step_between_retries(rig: Rig, ending: str) -> None:
    nid, d = await rig.delivered()
    rig.pager.script(Reply(status=503))
    await answered_until(rig, d, 0, 10, 20)
    await rig.pager.wait_for_requests(1)
    retry_at = (await rig.get(nid)).next_follow_up_time.ToDatetime(tzinfo=UTC)
    if ending == "acknowledge":
        await rig.server.stub("rita").Acknowledge(pb.AcknowledgeRequest(notification_id=nid))
    else:
        await rig.server.stub("alice").WithdrawNotification(
            pb.WithdrawNotificationRequest(notification_id=nid, reason="resolved")
        )
    rig.at(retry_at + timedelta(seconds=1))
    assert (await rig.worker.run_once()).fired == 0  # no provider call...
    assert (await rig.worker.run_once()).rescheduled == 0  # ...and closed once
    rig.at(d + minutes(50))
    assert (await rig.worker.run_once()).fired == 0
    assert len(rig.pager.requests) == 1
    [event] = await step_events(rig, nid, 1, withdraw=False)
    assert event.payload["decision"] == "STOPPED" and event.payload["attempts"] == 1
    assert event.payload["results"][0]["retryable"] is True


async def test_a_reminder_carries_answer_links_valid_until_the_deadline(
    db_url: str, tmp_path: Path
) -> None:
    """A reminder nags someone to answer: with the HTTP surface on it carries the same
    Acknowledge/Dismiss links as the delivery, and opening one shows the request."""
    async with started_rig(db_url, tmp_path, http_listen="127.0.0.1:0") as rig:
        _nid, d = await rig.delivered()
        rig.at(d + minutes(10) + timedelta(seconds=1))
        assert (await rig.worker.run_once()).fired == 1
        [delivery, reminder] = await rig.hook.wait_for_requests(2)
        links = reminder.json()["data"]["links"]
        assert set(links) == set(delivery.json()["data"]["links"]) == {"acknowledge", "dismiss"}
        async with httpx.AsyncClient() as http:
            page = await http.get(links["acknowledge"])
        assert page.status_code == 200 and "Acknowledge" in page.text

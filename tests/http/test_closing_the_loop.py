"""Answers close the loop (SPEC §6): every message an obligation sent (the delivery,
each reminder, each escalation step) is closed when it ends; answers to any of them
count, once, also while the delivery carrying them is still in flight; a due send never
waits behind a scheduled dedup leader; a stale button says who settled it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import grpc
import httpx
from aiohttp import web

from tests.http.conftest import PAGERDUTY_WEBHOOK_SECRET, Rig
from tests.http.test_provider_callbacks import (
    PAGERDUTY_PATH,
    SLACK_PATH,
    pagerduty_body,
    slack_button,
    slack_headers,
)
from tests.support.policies import activate_policy
from tests.support.providers import SLACK_CHANNEL_ID
from tests.support.server import KEYS, send_request, start_server
from tests.support.watching import events_until
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import notification_service_pb2_grpc as pb_grpc
from uns.v1 import types_pb2 as t
from uns_server.domain.enums import DeliveryMode
from uns_server.domain.schedule import EscalationStep, Reminder
from uns_server.domain.signatures import pagerduty_signature

TYPE = "ops.loop"


async def _loop_policy(db_url: str) -> None:
    """Delivery on Slack and PagerDuty, reminder 1 at 10 min on both, escalation step 1
    at 20 min on PagerDuty."""
    await activate_policy(
        db_url,
        TYPE,
        channels=["alerts-slack", "pager"],
        delivery_mode=DeliveryMode.GUARANTEED,
        require_ack=True,
        ack_timeout_minutes=60,
        reminder=Reminder(timedelta(minutes=10), 2.0, 1),
        escalation=(EscalationStep(timedelta(minutes=20), ("pager",)),),
    )


async def _delivered_with_follow_ups(rig: Rig) -> tuple[str, t.Notification]:
    nid = await rig.send("loop-1", notification_type=TYPE)
    assert await rig.deliver() == 1
    delivered = (await rig.get(nid)).deliver_time.ToDatetime(tzinfo=UTC)
    for minutes in (10, 20):  # reminder 1, then escalation step 1
        rig.clock.offset += delivered + timedelta(minutes=minutes, seconds=1) - rig.clock()
        assert (await rig.server.app.followups.run_once()).fired == 1
    return nid, await rig.get(nid)


async def test_every_message_is_recorded_and_closed_when_a_person_answers_an_escalation(
    rig: Rig, db_url: str
) -> None:
    await _loop_policy(db_url)
    nid, n = await _delivered_with_follow_ups(rig)
    refs = sorted(
        (r.channel, r.follow_up, r.follow_up_number, r.slack_ts or r.pagerduty_dedup_key)
        for r in n.provider_references
    )
    posts = rig.fakes.slack("chat.postMessage")
    triggers = rig.fakes.pagerduty_events()
    assert len(posts) == 2 and len(triggers) == 3
    assert [(c, f, k) for c, f, k, _ in refs] == [
        ("alerts-slack", "", 0),
        ("alerts-slack", "REMINDER", 1),
        ("pager", "", 0),
        ("pager", "ESCALATION", 1),
        ("pager", "REMINDER", 1),
    ]
    slack_refs = {ref for channel, *_, ref in refs if channel == "alerts-slack"}
    pager_refs = {ref for channel, *_, ref in refs if channel == "pager"}
    assert len(slack_refs) == 2  # each post's ts, as the fake answered
    assert pager_refs == {e["dedup_key"] for e in triggers}

    # A PagerDuty user acknowledges the escalation step's incident: that settles it.
    body = pagerduty_body(triggers[-1]["dedup_key"])
    async with httpx.AsyncClient(base_url=rig.base_url) as http:
        answer = await http.post(
            PAGERDUTY_PATH,
            content=body,
            headers={"X-PagerDuty-Signature": pagerduty_signature(PAGERDUTY_WEBHOOK_SECRET, body)},
        )
    assert answer.json() == {"outcome": "settled"}
    assert (await rig.get(nid)).ack_actor == "pagerduty:PXPGF42"

    # Every message is closed: both Slack messages updated, all three incidents resolved.
    result = await rig.server.app.message_updater.run_once()
    assert (result.done, result.failed) == (5, 0)
    assert sorted(u["ts"] for u in rig.fakes.slack("chat.update")) == sorted(slack_refs)
    resolved = [e for e in rig.fakes.pagerduty_events() if e["event_action"] == "resolve"]
    assert sorted(e["dedup_key"] for e in resolved) == sorted(e["dedup_key"] for e in triggers)
    assert (await rig.server.app.followups.run_once()).fired == 0  # no more steps


def _press_body(token: str, user: str, response_url: str) -> bytes:
    """The form body of a Slack interaction: ``user`` presses the ack button ``token``."""
    payload = {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower()},
        "channel": {"id": SLACK_CHANNEL_ID},
        "response_url": response_url,
        "actions": [{"action_id": "uns_ack", "value": token, "type": "button"}],
    }
    return urlencode({"payload": json.dumps(payload)}).encode()


async def test_a_button_on_a_reminder_answers_and_a_stale_press_is_told_who_settled(
    rig: Rig, db_url: str
) -> None:
    await _loop_policy(db_url)
    nid, _ = await _delivered_with_follow_ups(rig)
    token = slack_button(rig, "uns_ack", index=1)  # the reminder's button
    response_url = rig.fakes.receiver.url("/slack/response/1")

    def press(user: str) -> bytes:
        return _press_body(token, user, response_url)

    async with httpx.AsyncClient(base_url=rig.base_url) as http:
        first = press("U0ADA")
        assert (await http.post(SLACK_PATH, content=first, headers=slack_headers(first))).is_success
        assert (await rig.get(nid)).ack_actor == "slack:U0ADA"
        assert not rig.fakes.calls("/slack/response/1")  # an answer that counted: no note
        before = len(rig.fakes.receiver.requests)
        late = press("U0EVE")
        assert (await http.post(SLACK_PATH, content=late, headers=slack_headers(late))).is_success
    await rig.fakes.receiver.wait_for_requests(before + 1)
    [note] = [r.json() for r in rig.fakes.calls("/slack/response/1")]
    assert note["response_type"] == "ephemeral" and note["replace_original"] is False
    assert note["text"].startswith("This notification was already acknowledged by slack:U0ADA at ")
    assert (await rig.get(nid)).ack_actor == "slack:U0ADA"  # the late press changed nothing


async def test_a_press_after_the_obligation_ended_is_told_how_it_ended(rig: Rig) -> None:
    """Pressed when withdrawn, again by the one who answered, past the deadline (told
    nothing until the sweep has timed it out): each press is a 200 that changes nothing,
    and the presser alone is told how the obligation ended."""
    nids = []
    for key in ("ended-withdrawn", "ended-repeat", "ended-late"):
        nids.append(await rig.send(key))
        assert await rig.deliver() == 1
    tokens = {nid: slack_button(rig, "uns_ack", index=i) for i, nid in enumerate(nids)}
    withdrawn, repeat, late = nids
    await rig.server.stub("alice").WithdrawNotification(
        pb.WithdrawNotificationRequest(notification_id=withdrawn, reason="cleared")
    )

    async def press(nid: str, path: str) -> None:
        body = _press_body(tokens[nid], "U0ADA", rig.fakes.receiver.url(path))
        async with httpx.AsyncClient(base_url=rig.base_url) as http:
            answer = await http.post(SLACK_PATH, content=body, headers=slack_headers(body))
        assert (answer.status_code, answer.text) == (200, "")

    async def told(nid: str, path: str) -> str:
        """The one note a press of ``nid``'s button that changes nothing is told."""
        before = len(rig.fakes.receiver.requests)
        records = await rig.ack_records(nid)
        await press(nid, path)
        await rig.fakes.receiver.wait_for_requests(before + 1)
        [note] = [r.json() for r in rig.fakes.calls(path)]
        assert (note["response_type"], note["replace_original"]) == ("ephemeral", False)
        assert await rig.ack_records(nid) == records
        return str(note["text"])

    note = await told(withdrawn, "/r/withdrawn")
    assert note.startswith("This notification was withdrawn at ")
    assert note.endswith(" UTC; no answer is needed.")
    assert (await rig.get(withdrawn)).ack_state == t.ACK_STATE_WITHDRAWN

    await press(repeat, "/r/first")  # an answer that counts: no note
    note = await told(repeat, "/r/repeat")
    assert note.startswith("This notification was already acknowledged by slack:U0ADA at ")
    assert not rig.fakes.calls("/r/first")
    assert len(await rig.ack_records(repeat)) == 1

    # Just past the deadline (the button's token lives one lease longer), not yet swept.
    deadline = (await rig.get(late)).ack_deadline_time.ToDatetime(tzinfo=UTC)
    rig.clock.offset += deadline + timedelta(seconds=1) - rig.clock()
    records = await rig.ack_records(late)
    await press(late, "/r/unswept")
    assert await rig.ack_records(late) == records
    assert (await rig.server.app.timers.run_once()).timed_out == 1
    note = await told(late, "/r/timed-out")
    assert note.startswith("This notification was not answered in time (")
    assert note.endswith(" UTC); escalation is required.")
    assert not rig.fakes.calls("/r/unswept")  # the press before the sweep was told nothing


async def test_a_due_send_never_waits_behind_a_scheduled_leader(rig: Rig) -> None:
    stub = rig.server.stub("alice")
    later = datetime.now(UTC) + timedelta(minutes=20)
    scheduled = send_request(notification_type="ops.page", dedup_key="disk")
    scheduled.schedule_time.FromDatetime(later)
    scheduled.idempotency_key = "scheduled"
    leader = await stub.SendNotification(scheduled)
    due = send_request(notification_type="ops.page", dedup_key="disk", idempotency_key="due-1")
    simulated = await stub.Simulate(pb.SimulateRequest(request=due))
    assert simulated.outcome == pb.SIMULATE_OUTCOME_NEW
    assert [s.kind for s in simulated.planned_steps][:1] == [pb.PLANNED_STEP_KIND_DELIVERY]
    first = await stub.SendNotification(due)
    assert first.dedup_owner_id == "" and first.notification_id != leader.notification_id
    assert await rig.deliver() == 1  # the due one, now; the scheduled one keeps its time
    assert (await rig.get(first.notification_id)).state == t.NOTIFICATION_STATE_DELIVERED
    assert (await rig.get(leader.notification_id)).state == t.NOTIFICATION_STATE_PENDING
    # Due sends still coalesce among themselves, and scheduled repeats with theirs.
    due.idempotency_key = "due-2"
    assert (await stub.SendNotification(due)).dedup_owner_id == first.notification_id
    scheduled.idempotency_key = "scheduled-2"
    assert (await stub.SendNotification(scheduled)).dedup_owner_id == leader.notification_id


async def test_an_answer_from_inside_the_receivers_handler_is_honoured(
    db_url: str, tmp_path: Path
) -> None:
    """The receiver acknowledges before it answers UNS's POST: the ack settles while the
    attempt is in flight, the attempt still records its result, and the receiver is told
    how the obligation ended once that result is in."""
    acknowledged: list[t.AckState.ValueType] = []
    received: list[dict[str, Any]] = []
    target: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        body = await request.json()
        received.append(body)
        if body["type"] == "uns.notification":
            async with grpc.aio.insecure_channel(target[0]) as channel:
                reply = await pb_grpc.NotificationServiceStub(channel).Acknowledge(
                    pb.AcknowledgeRequest(notification_id=body["data"]["notification_id"]),
                    metadata=(("authorization", f"Bearer {KEYS['rita']}"),),
                )
            acknowledged.append(reply.notification.ack_state)
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/hook", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    channels = tmp_path / "channels.yaml"
    channels.write_text(
        f"hook:\n  type: webhook\n  url: http://127.0.0.1:{port}/hook\n  secret: s3cret-value\n"
    )
    await activate_policy(
        db_url,
        "ops.hooked",
        channels=["hook"],
        delivery_mode=DeliveryMode.GUARANTEED,
        require_ack=True,
        ack_timeout_minutes=30,
    )
    server = await start_server(
        db_url, tmp_path, channels_file=str(channels), dispatch_enabled=False
    )
    try:
        target.append(server.target)
        sent = await server.stub("alice").SendNotification(
            send_request(notification_type="ops.hooked")
        )
        nid = sent.notification_id
        assert (await server.app.dispatcher.run_once()).claimed == 1
        assert acknowledged == [t.ACK_STATE_ACKED]  # not ACK_NOT_PENDING
        n = (
            await server.stub("oscar").GetNotification(
                pb.GetNotificationRequest(notification_id=nid)
            )
        ).notification
        assert n.state == t.NOTIFICATION_STATE_DELIVERED
        assert (n.ack_state, n.ack_actor) == (t.ACK_STATE_ACKED, "rita")
        assert [r.channel for r in n.provider_references] == ["hook"]
        events = await events_until(
            server.stub("oscar"),
            pb.WatchEventsRequest(replay_history=True, notification_ids=[nid]),
            lambda evs: any(e.kind == t.EVENT_KIND_DELIVERY_RESULT for e in evs),
        )
        kinds = [e.kind for e in events]
        assert kinds.index(t.EVENT_KIND_ACKED) < kinds.index(t.EVENT_KIND_DELIVERY_RESULT)
        # The settled notice waits for the attempt's reference, then goes out once.
        assert (await server.app.message_updater.run_once()).done == 1
        assert [b["type"] for b in received] == ["uns.notification", "uns.notification.settled"]
        settled = received[-1]["data"]
        assert (settled["notification_id"], settled["ack_state"], settled["actor"]) == (
            nid,
            "ACKED",
            "rita",
        )
        assert (await server.app.dispatcher.run_once()).claimed == 0
    finally:
        await server.stop()
        await runner.cleanup()

"""Delivery through a real signed webhook on loopback: retries, dead letters, fencing,
crash recovery and credential hygiene. Dispatch is stepped with ``run_once()`` and
a movable clock, so backoff and lease expiry need no sleeping; the last test runs the
dispatcher, whose handoff from intake only exists while it runs."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from google.protobuf import json_format

from tests.reliability.checker import EventView, NotificationView, timeline_problems
from tests.support.http_receiver import HttpReceiver, Reply
from tests.support.policies import activate_policy
from tests.support.server import RunningServer, ShiftableClock, send_request, start_server
from tests.support.watching import events_until, kinds
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_clients.webhooks import verify_webhook
from uns_server.domain.enums import DeliveryMode

SECRET = "whsec_cGxhbnRlZC1zZWNyZXQtdmFsdWUtMTIzNDU="  # "planted-secret-value-12345"
HEADER_SECRET = "planted-header-token-67890"
LEASE_SECONDS = 5.0


@dataclass
class Rig:
    server: RunningServer
    receiver: HttpReceiver
    clock: ShiftableClock

    async def send(self, notification_type: str, key: str) -> str:
        sent = await self.server.stub("alice").SendNotification(
            send_request(notification_type=notification_type, idempotency_key=key)
        )
        return str(sent.notification_id)

    async def get(self, notification_id: str) -> t.Notification:
        reply = await self.server.stub("oscar").GetNotification(
            pb.GetNotificationRequest(notification_id=notification_id)
        )
        return reply.notification

    async def step(self) -> int:
        """Let time pass beyond any backoff, then run one dispatch batch."""
        self.clock.advance(hours=2)
        return (await self.server.app.dispatcher.run_once()).claimed

    async def timeline(self, notification_id: str, last_kind: int) -> list[t.Event]:
        return await events_until(
            self.server.stub("oscar"),
            pb.WatchEventsRequest(replay_history=True, notification_ids=[notification_id]),
            lambda evs: bool(evs) and evs[-1].kind == last_kind,
        )


@pytest.fixture
async def rig(db_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with HttpReceiver() as receiver:
        channels = tmp_path / "channels.yaml"
        channels.write_text(
            f"hook:\n  type: webhook\n  url: {receiver.url('/hook')}\n  secret: {SECRET}\n"
            f"  timeout_seconds: 1\n  headers:\n    X-Api-Token: {HEADER_SECRET}\n"
        )
        for name, mode, attempts in (
            ("ops.guaranteed", DeliveryMode.GUARANTEED, 3),
            ("ops.besteffort", DeliveryMode.BEST_EFFORT, 2),
        ):
            await activate_policy(
                db_url,
                name,
                channels=["hook"],
                delivery_mode=mode,
                require_ack=False,
                max_attempts=attempts,
            )
        clock = ShiftableClock()
        server = await start_server(
            db_url,
            tmp_path,
            clock=clock,
            channels_file=str(channels),
            dispatch_enabled=False,
            lease_seconds=LEASE_SECONDS,
        )
        try:
            yield Rig(server, receiver, clock)
        finally:
            await server.stop()


async def test_webhook_is_signed_and_provider_id_recorded(rig: Rig) -> None:
    rig.receiver.script(Reply.json({"id": "msg-42"}, headers={"x-message-id": "msg-42"}))
    nid = await rig.send("ops.guaranteed", "sig")
    assert await rig.step() == 1
    [request] = rig.receiver.requests
    assert request.headers["webhook-id"] == f"{nid}:hook:1"
    verify_webhook(request.headers, request.body, SECRET)
    assert request.json()["data"]["notification_id"] == nid
    assert (await rig.get(nid)).state == t.NOTIFICATION_STATE_DELIVERED
    events = await rig.timeline(nid, t.EVENT_KIND_DELIVERY_RESULT)
    result = next(e for e in events if e.kind == t.EVENT_KIND_CHANNEL_ATTEMPT_RESULT)
    assert result.payload["success"] is True and result.payload["message_id"] == "msg-42"


async def test_transient_failures_back_off_then_deliver(rig: Rig) -> None:
    rig.receiver.script(
        Reply(status=503), Reply(status=429, headers={"retry-after": "120"}), Reply(status=200)
    )
    nid = await rig.send("ops.guaranteed", "retry")
    assert (await rig.server.app.dispatcher.run_once()).claimed == 1
    first = await rig.get(nid)
    assert first.state == t.NOTIFICATION_STATE_PENDING and first.cycle_attempts == 1
    assert first.next_attempt_time.ToDatetime() > first.update_time.ToDatetime()
    assert (await rig.server.app.dispatcher.run_once()).claimed == 0  # backing off: not due yet

    assert await rig.step() == 1
    second = await rig.get(nid)
    waited = second.next_attempt_time.ToDatetime() - second.update_time.ToDatetime()
    assert waited.total_seconds() >= 120  # Retry-After honoured
    assert second.cycle_attempts == 1  # a 429 defers: it spends no attempt
    assert await rig.step() == 1
    done = await rig.get(nid)
    assert done.state == t.NOTIFICATION_STATE_DELIVERED and done.attempts == 3
    assert done.cycle_attempts == 2  # the 429 was not counted against max_attempts
    assert len(rig.receiver.requests) == 3
    assert len({r.headers["webhook-id"] for r in rig.receiver.requests}) == 1


async def test_guaranteed_work_is_dead_lettered_after_max_attempts(rig: Rig) -> None:
    rig.receiver.default = Reply(status=500)
    nid = await rig.send("ops.guaranteed", "dlq")
    for _ in range(3):
        assert await rig.step() == 1
    assert await rig.step() == 0
    failed = await rig.get(nid)
    assert failed.state == t.NOTIFICATION_STATE_FAILED and failed.dead_letter
    assert failed.cycle_attempts == 3 and "500" in failed.outcome.error_message


async def test_best_effort_work_ends_failed_without_dead_letter(rig: Rig) -> None:
    rig.receiver.default = Reply(status=502)
    nid = await rig.send("ops.besteffort", "be")
    assert await rig.step() == 1
    assert await rig.step() == 1
    failed = await rig.get(nid)
    assert failed.state == t.NOTIFICATION_STATE_FAILED and not failed.dead_letter


async def test_permanent_rejection_is_not_retried(rig: Rig) -> None:
    rig.receiver.default = Reply(status=400)
    nid = await rig.send("ops.guaranteed", "perm")
    assert await rig.step() == 1
    failed = await rig.get(nid)
    assert failed.state == t.NOTIFICATION_STATE_FAILED and failed.attempts == 1


async def test_late_settlement_after_lost_lease_is_fenced(rig: Rig) -> None:
    dispatcher = rig.server.app.dispatcher
    nid = await rig.send("ops.guaranteed", "fence")
    [stale] = await dispatcher.claim(1)  # this worker then stalls past its lease
    rig.clock.advance(seconds=LEASE_SECONDS + 1)
    [fresh] = await dispatcher.claim(1)  # another worker recovers the row
    assert fresh.token != stale.token
    await dispatcher.deliver(fresh)
    await dispatcher.deliver(stale)  # the stalled worker wakes up and tries to settle

    done = await rig.get(nid)
    assert done.state == t.NOTIFICATION_STATE_DELIVERED and done.attempts == 2
    events = await rig.timeline(nid, t.EVENT_KIND_LEASE_LOST)
    names = kinds(events)
    assert names.count("DELIVERY_RESULT") == 1 and names.count("LEASE_LOST") == 1
    assert names.count("CHANNEL_ATTEMPT_RESULT") == 2  # the late observation is kept
    recovered = [e for e in events if e.kind == t.EVENT_KIND_ATTEMPT_STARTED][1]
    assert recovered.payload["recovery_may_repeat_provider_effect"] is True
    lost = next(e for e in events if e.kind == t.EVENT_KIND_LEASE_LOST)
    assert lost.payload["lease_token"] == stale.token


async def test_work_of_a_dead_worker_is_recovered_after_its_lease(rig: Rig) -> None:
    dispatcher = rig.server.app.dispatcher
    nid = await rig.send("ops.guaranteed", "crash")
    await dispatcher.claim(1)  # claimed, then the worker "dies": no settlement
    assert (await dispatcher.run_once()).claimed == 0  # still leased
    rig.clock.advance(seconds=LEASE_SECONDS + 1)
    assert (await dispatcher.run_once()).claimed == 1
    assert (await rig.get(nid)).state == t.NOTIFICATION_STATE_DELIVERED


@pytest.mark.parametrize("mode", [DeliveryMode.GUARANTEED, DeliveryMode.BEST_EFFORT])
async def test_an_interrupted_last_attempt_counts(
    rig: Rig, db_url: str, mode: DeliveryMode
) -> None:
    """Seed 004: consumed attempts, interrupted ones included, end in explicit failure.
    With max_attempts 1, a worker that dies mid-attempt spent the only attempt: the
    recovered row is settled as exhausted, and no provider is called again."""
    await activate_policy(
        db_url,
        "ops.once",
        channels=["hook"],
        delivery_mode=mode,
        require_ack=False,
        max_attempts=1,
    )
    dispatcher = rig.server.app.dispatcher
    nid = await rig.send("ops.once", "interrupted")
    [dead] = await dispatcher.claim(1)  # claimed, then the worker dies mid-attempt
    rig.clock.advance(seconds=LEASE_SECONDS + 1)
    assert (await dispatcher.run_once()).claimed == 0  # recovered, but nothing left to attempt

    failed = await rig.get(nid)
    assert failed.state == t.NOTIFICATION_STATE_FAILED
    assert failed.dead_letter is (mode == DeliveryMode.GUARANTEED)
    assert (failed.attempts, failed.cycle_attempts) == (1, 1)
    assert "interrupted" in failed.outcome.error_message
    assert list(failed.outcome.channels_failed) == ["hook"]
    assert rig.receiver.requests == []
    events = await rig.timeline(nid, t.EVENT_KIND_DELIVERY_RESULT)
    assert kinds(events).count("ATTEMPT_STARTED") == 1
    result = events[-1].payload
    assert result["status"] == "FAILED" and result["interrupted"] is True
    assert (result["attempt"], result["cycle_attempt"]) == (1, 1)
    assert result["lease_token"] == dead.token
    assert await rig.step() == 0  # settled for good

    # The worker was only stalled: its late answer is kept, and fenced.
    await dispatcher.deliver(dead)
    assert await rig.get(nid) == failed
    events = await rig.timeline(nid, t.EVENT_KIND_LEASE_LOST)
    assert kinds(events)[-2:] == ["CHANNEL_ATTEMPT_RESULT", "LEASE_LOST"]
    walk = [EventView.from_proto(e) for e in events]
    assert timeline_problems(walk, NotificationView.from_proto(failed)) == []


async def test_credentials_never_reach_events_or_logs(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    rig.receiver.script(Reply(status=401, body=b"bad token"), Reply(status=200))
    ok = await rig.send("ops.guaranteed", "s1")
    await rig.step()
    await rig.step()
    assert rig.receiver.requests[0].headers["x-api-token"] == HEADER_SECRET  # it was used
    events = await rig.timeline(ok, t.EVENT_KIND_DELIVERY_RESULT)
    dumped = json.dumps([json_format.MessageToDict(e) for e in events])
    dumped += json.dumps(json_format.MessageToDict(await rig.get(ok)))
    for secret in (SECRET, HEADER_SECRET, "planted-secret-value"):
        assert secret not in dumped
        assert secret not in caplog.text


async def test_accepted_with_free_slots_is_leased_by_its_accepting_transaction(
    db_url: str, tmp_path: Path
) -> None:
    """With the dispatcher running and idle, the accepting transaction itself leases
    the new leader: ACCEPTED, ATTEMPT_STARTED and CHANNEL_ATTEMPT_STARTED commit
    together (one ``at``, consecutive sequences), then the delivery follows."""
    async with HttpReceiver() as receiver:
        channels = tmp_path / "channels.yaml"
        channels.write_text(
            f"hook:\n  type: webhook\n  url: {receiver.url('/hook')}\n  secret: {SECRET}\n"
        )
        await activate_policy(
            db_url,
            "ops.handoff",
            channels=["hook"],
            delivery_mode=DeliveryMode.GUARANTEED,
            require_ack=False,
            max_attempts=3,
        )
        server = await start_server(db_url, tmp_path, channels_file=str(channels))
        try:
            sent = await server.stub("alice").SendNotification(
                send_request(notification_type="ops.handoff", idempotency_key="handoff")
            )
            events = await events_until(
                server.stub("oscar"),
                pb.WatchEventsRequest(replay_history=True, notification_ids=[sent.notification_id]),
                lambda evs: bool(evs) and evs[-1].kind == t.EVENT_KIND_DELIVERY_RESULT,
            )
        finally:
            await server.stop()
    accepted, started, channel_started = events[:3]
    assert kinds(events[:3]) == ["ACCEPTED", "ATTEMPT_STARTED", "CHANNEL_ATTEMPT_STARTED"]
    assert accepted.at == started.at == channel_started.at
    assert [e.sequence for e in events[:3]] == list(range(accepted.sequence, accepted.sequence + 3))
    assert channel_started.payload["attempt"] == 1
    assert events[-1].payload["status"] == "DELIVERED"
    assert len(receiver.requests) == 1

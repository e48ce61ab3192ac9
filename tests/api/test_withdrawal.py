"""WithdrawNotification through gRPC on both dialects: before delivery, with a
pending ack, fencing an attempt in flight, dedup leaders and followers, refusals."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import grpc
import pytest
from google.protobuf import timestamp_pb2

from tests.support.grpc_errors import rich_error
from tests.support.http_receiver import HttpReceiver, Reply
from tests.support.policies import activate_policy
from tests.support.server import RunningServer, ShiftableClock, send_request, start_server
from tests.support.watching import events_until, kinds
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_server.domain.enums import DeliveryMode

SECRET = "whsec_cGxhbnRlZC1zZWNyZXQtdmFsdWUtMTIzNDU="


@dataclass
class Rig:
    server: RunningServer
    receiver: HttpReceiver
    clock: ShiftableClock

    async def send(self, **fields: object) -> str:
        sent = await self.server.stub("alice").SendNotification(send_request(**fields))
        return str(sent.notification_id)

    async def withdraw(self, notification_id: str, who: str = "alice") -> t.Notification:
        reply = await self.server.stub(who).WithdrawNotification(
            pb.WithdrawNotificationRequest(notification_id=notification_id, reason="cleared")
        )
        return reply.notification

    async def get(self, notification_id: str) -> t.Notification:
        reply = await self.server.stub("oscar").GetNotification(
            pb.GetNotificationRequest(notification_id=notification_id)
        )
        return reply.notification

    async def timeline(self, notification_id: str, last_kind: int) -> list[t.Event]:
        return await events_until(
            self.server.stub("oscar"),
            pb.WatchEventsRequest(replay_history=True, notification_ids=[notification_id]),
            lambda evs: bool(evs) and evs[-1].kind == last_kind,
        )

    def later(self, **delta: float) -> timestamp_pb2.Timestamp:
        ts = timestamp_pb2.Timestamp()
        ts.FromDatetime(self.clock() + timedelta(**delta))
        return ts


@pytest.fixture
async def rig(db_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with HttpReceiver() as receiver:
        channels = tmp_path / "channels.yaml"
        channels.write_text(
            f"hook:\n  type: webhook\n  url: {receiver.url('/hook')}\n  secret: {SECRET}\n"
            "  timeout_seconds: 5\n"
        )
        await activate_policy(
            db_url,
            "ops.hooked",
            channels=["hook"],
            delivery_mode=DeliveryMode.GUARANTEED,
            require_ack=False,
        )
        clock = ShiftableClock()
        server = await start_server(
            db_url, tmp_path, clock=clock, channels_file=str(channels), dispatch_enabled=False
        )
        try:
            yield Rig(server, receiver, clock)
        finally:
            await server.stop()


async def refusal(call: object) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await call  # type: ignore[misc]
    err = rich_error(exc.value)
    return err.code, err.reason


async def test_withdraw_a_scheduled_send_before_delivery(rig: Rig) -> None:
    nid = await rig.send(schedule_time=rig.later(hours=1))
    withdrawn = await rig.withdraw(nid)
    assert withdrawn.state == t.NOTIFICATION_STATE_WITHDRAWN
    assert (withdrawn.withdraw_actor, withdrawn.withdraw_reason) == ("alice", "cleared")
    # The same caller again: the same answer, nothing new.
    again = await rig.withdraw(nid)
    assert again.withdraw_time == withdrawn.withdraw_time
    # Another caller (an operator) finds it settled.
    assert await refusal(rig.withdraw(nid, "oscar")) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "NOT_WITHDRAWABLE",
    )
    # Its time comes and goes: nothing is attempted.
    rig.clock.advance(hours=2)
    assert (await rig.server.app.dispatcher.run_once()).claimed == 0
    events = await rig.timeline(nid, t.EVENT_KIND_WITHDRAWN)
    assert kinds(events) == ["ACCEPTED", "WITHDRAWN"]
    assert dict(events[-1].payload) == {
        "actor": "alice",
        "reason": "cleared",
        "scope": "NOTIFICATION",
    }
    assert (await rig.get(nid)).attempts == 0


async def test_withdraw_a_pending_ack_stops_it(rig: Rig) -> None:
    nid = await rig.send(require_ack=True)
    assert (await rig.server.app.dispatcher.run_once()).claimed == 1
    withdrawn = await rig.withdraw(nid, "oscar")
    assert withdrawn.state == t.NOTIFICATION_STATE_DELIVERED
    assert withdrawn.ack_state == t.ACK_STATE_WITHDRAWN
    assert withdrawn.withdraw_actor == "oscar" and withdrawn.ack_actor == "oscar"
    events = await rig.timeline(nid, t.EVENT_KIND_WITHDRAWN)
    assert events[-1].payload["scope"] == "ACK"
    # Nobody has to answer any more; the deadline passing changes nothing.
    # Nothing is pending any more (not a conflict with the withdrawing operator, who
    # is not named to the responder).
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await rig.server.stub("rita").Acknowledge(pb.AcknowledgeRequest(notification_id=nid))
    err = rich_error(exc.value)
    assert (err.code, err.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "ACK_NOT_PENDING")
    assert err.metadata["ack_state"] == "WITHDRAWN"
    assert "oscar" not in err.message and "oscar" not in err.metadata.values()
    rig.clock.advance(hours=2)
    assert (await rig.server.app.timers.run_once()).timed_out == 0
    assert (await rig.get(nid)).ack_state == t.ACK_STATE_WITHDRAWN


async def test_settled_notifications_are_not_withdrawable(rig: Rig) -> None:
    nid = await rig.send()  # no ack required
    assert (await rig.server.app.dispatcher.run_once()).claimed == 1
    code, reason = await refusal(rig.withdraw(nid))
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "NOT_WITHDRAWABLE")
    assert (await rig.get(nid)).withdraw_actor == ""
    # Another producer's notification, or an unknown id: NOT_FOUND.
    assert (await refusal(rig.withdraw(nid, "bob")))[1] == "NOT_FOUND"
    assert (await refusal(rig.withdraw(nid, "rita")))[1] == "PERMISSION_DENIED"


async def test_an_attempt_in_flight_is_fenced(rig: Rig) -> None:
    rig.receiver.script(Reply.json({"ok": True}, delay_seconds=0.5))
    nid = await rig.send(notification_type="ops.hooked")
    dispatcher = rig.server.app.dispatcher
    [claim] = await dispatcher.claim(1)
    delivering = asyncio.create_task(dispatcher.deliver(claim))
    await rig.receiver.wait_for_requests(1)  # the provider call has started
    withdrawn = await rig.withdraw(nid)
    assert withdrawn.state == t.NOTIFICATION_STATE_WITHDRAWN
    await delivering
    # The provider's answer is recorded; the settlement did not resurrect the row.
    events = await rig.timeline(nid, t.EVENT_KIND_LEASE_LOST)
    assert kinds(events)[-3:] == ["WITHDRAWN", "CHANNEL_ATTEMPT_RESULT", "LEASE_LOST"]
    assert events[-2].payload["success"] is True
    after = await rig.get(nid)
    assert after.state == t.NOTIFICATION_STATE_WITHDRAWN and not after.HasField("deliver_time")
    rig.clock.advance(hours=2)
    assert (await dispatcher.run_once()).claimed == 0


async def test_withdrawing_a_dedup_leader_withdraws_its_pending_followers(rig: Rig) -> None:
    # Dispatch is off here: the leader stays PENDING, due but not yet delivered.
    leader = await rig.send(dedup_key="disk", idempotency_key="1")
    first = await rig.send(dedup_key="disk", idempotency_key="2")
    second = await rig.send(dedup_key="disk", idempotency_key="3")
    assert (await rig.get(first)).dedup_owner_id == leader
    # A follower alone: the leader and the other follower keep their obligation.
    assert (await rig.withdraw(first)).state == t.NOTIFICATION_STATE_WITHDRAWN
    assert (await rig.get(leader)).state == t.NOTIFICATION_STATE_PENDING
    assert (await rig.get(second)).state == t.NOTIFICATION_STATE_PENDING
    # The leader: the follower coalesced into it shares the obligation and goes with it.
    assert (await rig.withdraw(leader)).state == t.NOTIFICATION_STATE_WITHDRAWN
    follower = await rig.get(second)
    assert follower.state == t.NOTIFICATION_STATE_WITHDRAWN
    assert follower.withdraw_actor == "alice"
    events = await rig.timeline(second, t.EVENT_KIND_WITHDRAWN)
    assert events[-1].payload["with_owner_id"] == leader
    # The window no longer coalesces: the next send leads a new generation.
    fresh = await rig.server.stub("alice").SendNotification(
        send_request(dedup_key="disk", idempotency_key="4")
    )
    assert fresh.state == t.NOTIFICATION_STATE_PENDING and fresh.dedup_owner_id == ""
    assert (await rig.get(fresh.notification_id)).dedup_generation == 2

"""uns.v1.AuditService through the real server, on SQLite: every settled
delivery attempt (retry, delivered, failed) and every ack transition (acked, dismissed,
timed out) leaves one append-only audit record, listed in order, operator only."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from google.protobuf import json_format

from tests.support.grpc_errors import rich_error
from tests.support.http_receiver import HttpReceiver, Reply
from tests.support.policies import activate_policy
from tests.support.server import (
    KEYS,
    Client,
    RunningServer,
    ShiftableClock,
    send_request,
    start_server,
)
from uns.v1 import audit_service_pb2 as apb
from uns.v1 import audit_service_pb2_grpc as apb_grpc
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_server.domain.enums import DeliveryMode

ACK_TIMEOUT_MINUTES = 30


@dataclass
class Rig:
    server: RunningServer
    receiver: HttpReceiver
    clock: ShiftableClock

    def audit(self, who: str = "oscar") -> Client:
        channel = grpc.aio.insecure_channel(self.server.target)
        self.server.channels.append(channel)
        return Client(apb_grpc.AuditServiceStub(channel), KEYS.get(who, who))  # type: ignore[arg-type]

    async def send(self, key: str, notification_type: str = "ops.audited") -> str:
        sent = await self.server.stub("alice").SendNotification(
            send_request(
                notification_type=notification_type,
                idempotency_key=key,
                autonomy_context=t.AutonomyContext(
                    autonomy_mode=t.AUTONOMY_MODE_SUPERVISED, agent_id="agent-7"
                ),
            )
        )
        return str(sent.notification_id)

    async def step(self, *replies: Reply) -> int:
        self.receiver.script(*replies)
        self.clock.advance(hours=1)  # past any backoff
        return (await self.server.app.dispatcher.run_once()).claimed

    async def deliveries(self, nid: str, **paging: object) -> apb.ListDeliveryAuditRecordsResponse:
        reply: apb.ListDeliveryAuditRecordsResponse = await self.audit().ListDeliveryAuditRecords(
            apb.ListDeliveryAuditRecordsRequest(notification_id=nid, **paging)
        )
        return reply

    async def acks(self, nid: str) -> list[apb.AckAuditRecord]:
        reply = await self.audit().ListAckAuditRecords(
            apb.ListAckAuditRecordsRequest(notification_id=nid)
        )
        return list(reply.records)

    async def get(self, nid: str) -> t.Notification:
        reply = await self.server.stub("oscar").GetNotification(
            pb.GetNotificationRequest(notification_id=nid)
        )
        return reply.notification


@pytest.fixture
async def rig(db_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with HttpReceiver() as receiver:
        channels = tmp_path / "channels.yaml"
        channels.write_text(
            f"hook:\n  type: webhook\n  url: {receiver.url('/hook')}\n"
            "  secret: whsec_YXVkaXQtdGVzdC1zZWNyZXQtdmFsdWU=\n  timeout_seconds: 1\n"
        )
        await activate_policy(
            db_url,
            "ops.audited",
            channels=["hook"],
            delivery_mode=DeliveryMode.GUARANTEED,
            require_ack=True,
            ack_timeout_minutes=ACK_TIMEOUT_MINUTES,
            max_attempts=3,
        )
        clock = ShiftableClock()
        server = await start_server(
            db_url, tmp_path, clock=clock, channels_file=str(channels), dispatch_enabled=False
        )
        try:
            yield Rig(server, receiver, clock)
        finally:
            await server.stop()


async def test_retry_delivery_and_ack_are_audited_in_order(rig: Rig) -> None:
    nid = await rig.send("one")
    assert await rig.step(Reply(status=503)) == 1
    [retry] = (await rig.deliveries(nid)).records
    assert retry.state == t.NOTIFICATION_STATE_PENDING
    assert list(retry.channels_failed) == ["hook"] and "503" in retry.error_message
    assert not retry.HasField("deliver_time")

    assert await rig.step(Reply(status=200)) == 1
    records = list((await rig.deliveries(nid)).records)
    assert [r.state for r in records] == [
        t.NOTIFICATION_STATE_PENDING,
        t.NOTIFICATION_STATE_DELIVERED,
    ]
    assert records[0] == retry  # append-only: the earlier record is unchanged
    delivered = records[1]
    notification = await rig.get(nid)
    assert delivered.deliver_time == notification.deliver_time
    assert list(delivered.channels_attempted) == ["hook"]
    assert list(delivered.channels_succeeded) == ["hook"]
    assert list(delivered.channels_failed) == [] and delivered.error_message == ""
    assert delivered.notification_id == nid and delivered.notification_type == "ops.audited"
    assert delivered.intent == t.NOTIFICATION_INTENT_WARNING
    assert delivered.delivery_mode == t.DELIVERY_MODE_GUARANTEED
    assert delivered.autonomy_mode == t.AUTONOMY_MODE_SUPERVISED
    assert delivered.agent_id == "agent-7"
    policy = notification.effective_policy
    assert delivered.policy_config_id == policy.policy_id != ""
    assert delivered.policy_config_hash == policy.policy_hash != ""
    assert records[0].create_time.ToDatetime() < delivered.create_time.ToDatetime()
    assert await rig.acks(nid) == []

    await rig.server.stub("rita").Acknowledge(
        pb.AcknowledgeRequest(notification_id=nid, metadata={"ticket": "OPS-1"})
    )
    [ack] = await rig.acks(nid)
    assert ack.notification_id == nid and ack.acked_by == "rita"
    assert (ack.old_state, ack.new_state) == (t.ACK_STATE_PENDING, t.ACK_STATE_ACKED)
    assert json_format.MessageToDict(ack.ack_metadata) == {"ticket": "OPS-1"}
    assert ack.ack_time == (await rig.get(nid)).respond_time
    # An idempotent repeat of the same ack is not a transition: no second record.
    await rig.server.stub("rita").Acknowledge(
        pb.AcknowledgeRequest(notification_id=nid, metadata={"ticket": "OPS-1"})
    )
    assert await rig.acks(nid) == [ack]
    assert list((await rig.deliveries(nid)).records) == records


async def test_failure_dismissal_and_timeout_are_audited(rig: Rig) -> None:
    failed = await rig.send("failed")
    assert await rig.step(Reply(status=400)) == 1  # permanent: FAILED, dead-lettered
    [record] = (await rig.deliveries(failed)).records
    assert record.state == t.NOTIFICATION_STATE_FAILED and "400" in record.error_message

    dismissed = await rig.send("dismissed")
    timed_out = await rig.send("timed-out")
    assert await rig.step(Reply(status=200), Reply(status=200)) == 2
    await rig.server.stub("rita").Acknowledge(
        pb.AcknowledgeRequest(notification_id=dismissed, dismiss=True)
    )
    rig.clock.advance(minutes=ACK_TIMEOUT_MINUTES + 1)
    assert (await rig.server.app.timers.run_once()).timed_out == 1

    [dismissal] = await rig.acks(dismissed)
    assert dismissal.new_state == t.ACK_STATE_DISMISSED and dismissal.acked_by == "rita"
    [timeout] = await rig.acks(timed_out)
    assert (timeout.old_state, timeout.new_state) == (t.ACK_STATE_PENDING, t.ACK_STATE_TIMED_OUT)
    assert timeout.acked_by == "uns-timeout-worker"
    assert json_format.MessageToDict(timeout.ack_metadata) == {"escalation_required": True}
    deadline = (await rig.get(timed_out)).ack_deadline_time.ToDatetime()
    assert timeout.ack_time.ToDatetime() >= deadline


async def test_paging_and_refusals(rig: Rig) -> None:
    nid = await rig.send("paged")
    for _ in range(2):
        assert await rig.step(Reply(status=503)) == 1
    assert await rig.step(Reply(status=200)) == 1
    everything = list((await rig.deliveries(nid)).records)
    assert len(everything) == 3

    pages: list[apb.DeliveryAuditRecord] = []
    token = ""
    while True:
        page = await rig.deliveries(nid, page_size=2, page_token=token)
        assert len(page.records) <= 2
        pages += page.records
        token = page.next_page_token
        if not token:
            break
    assert pages == everything

    unknown = await rig.deliveries("00000000-0000-4000-8000-000000000000")
    assert list(unknown.records) == [] and unknown.next_page_token == ""

    async def refusal(who: str, request: apb.ListDeliveryAuditRecordsRequest) -> str:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await rig.audit(who).ListDeliveryAuditRecords(request)
        return rich_error(caught.value).reason

    good = apb.ListDeliveryAuditRecordsRequest(notification_id=nid)
    for who in ("alice", "rita"):
        assert await refusal(who, good) == "PERMISSION_DENIED"
    assert await refusal("nobody", good) == "UNAUTHENTICATED"
    for bad in (
        apb.ListDeliveryAuditRecordsRequest(notification_id="not-a-uuid"),
        apb.ListDeliveryAuditRecordsRequest(notification_id=nid, page_size=-1),
        apb.ListDeliveryAuditRecordsRequest(notification_id=nid, page_token="garbage"),
    ):
        assert await refusal("oscar", bad) == "INVALID_REQUEST"
    other = await rig.send("other")
    first = await rig.deliveries(nid, page_size=1)
    borrowed = apb.ListDeliveryAuditRecordsRequest(
        notification_id=other, page_token=first.next_page_token
    )
    assert await refusal("oscar", borrowed) == "INVALID_REQUEST"

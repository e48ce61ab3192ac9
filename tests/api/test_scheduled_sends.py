"""Scheduled sends (SPEC §5 schedule_time) through gRPC on both dialects, with a
clock the test moves forward."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import grpc
import pytest
from google.protobuf import timestamp_pb2

from tests.support.grpc_errors import rich_error
from tests.support.server import RunningServer, ShiftableClock, send_request, start_server
from tests.support.watching import events_until, has_kind, kinds
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t


@pytest.fixture
def clock() -> ShiftableClock:
    return ShiftableClock()


@pytest.fixture
async def srv(db_url: str, tmp_path: Path, clock: ShiftableClock) -> AsyncIterator[RunningServer]:
    running = await start_server(db_url, tmp_path, clock=clock, idle_poll_seconds=0.2)
    try:
        yield running
    finally:
        await running.stop()


def at(clock: ShiftableClock, **delta: float) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime((clock() + timedelta(**delta)).replace(microsecond=0))
    return ts


async def get(srv: RunningServer, notification_id: str) -> t.Notification:
    reply = await srv.stub("alice").GetNotification(
        pb.GetNotificationRequest(notification_id=notification_id)
    )
    return reply.notification


async def test_scheduled_send_waits_for_its_time(srv: RunningServer, clock: ShiftableClock) -> None:
    alice = srv.stub("alice")
    when = at(clock, hours=2)
    sent = await alice.SendNotification(send_request(idempotency_key="s1", schedule_time=when))
    assert sent.state == t.NOTIFICATION_STATE_PENDING
    held = await get(srv, sent.notification_id)
    # Accepted now, not leased (intake's inline hand-over skips it), due at its time.
    assert held.state == t.NOTIFICATION_STATE_PENDING and held.attempts == 0
    assert not held.HasField("lease_expire_time") and not held.HasField("deliver_time")
    assert held.next_attempt_time == when and held.schedule_time == when
    # An unscheduled send after it is delivered first.
    other = await alice.SendNotification(send_request(wait_for_first_attempt=True))
    assert other.state == t.NOTIFICATION_STATE_DELIVERED
    assert (await get(srv, sent.notification_id)).attempts == 0

    clock.advance(hours=2, seconds=1)
    seen = await events_until(
        alice,
        pb.WatchEventsRequest(replay_history=True, notification_ids=[sent.notification_id]),
        has_kind(sent.notification_id, t.EVENT_KIND_DELIVERY_RESULT),
    )
    assert kinds(seen)[:2] == ["ACCEPTED", "ATTEMPT_STARTED"]
    delivered = await get(srv, sent.notification_id)
    assert delivered.state == t.NOTIFICATION_STATE_DELIVERED
    assert delivered.deliver_time.ToDatetime() >= when.ToDatetime()
    assert delivered.schedule_time == when


async def test_past_schedule_means_now(srv: RunningServer, clock: ShiftableClock) -> None:
    sent = await srv.stub("alice").SendNotification(
        send_request(schedule_time=at(clock, hours=-3), wait_for_first_attempt=True)
    )
    assert sent.state == t.NOTIFICATION_STATE_DELIVERED


async def test_schedule_limits_and_idempotency(srv: RunningServer, clock: ShiftableClock) -> None:
    alice = srv.stub("alice")
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await alice.SendNotification(send_request(schedule_time=at(clock, days=90, hours=1)))
    err = rich_error(exc.value)
    assert (err.code, err.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_REQUEST")
    assert "schedule_time" in err.violations
    # Simulate refuses it the same way, naming the field by its path in SimulateRequest.
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await alice.Simulate(
            pb.SimulateRequest(request=send_request(schedule_time=at(clock, days=91)))
        )
    assert "request.schedule_time" in rich_error(exc.value).violations

    when = at(clock, days=89)
    first = await alice.SendNotification(send_request(idempotency_key="k", schedule_time=when))
    again = await alice.SendNotification(send_request(idempotency_key="k", schedule_time=when))
    assert again.idempotent_replay and again.notification_id == first.notification_id
    # The schedule is part of the payload: another time (or none) is another request.
    for other in (at(clock, days=88), None):
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await alice.SendNotification(send_request(idempotency_key="k", schedule_time=other))
        assert rich_error(exc.value).reason == "IDEMPOTENCY_CONFLICT"

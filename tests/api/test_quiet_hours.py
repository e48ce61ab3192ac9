"""Quiet hours through gRPC on SQLite: validated at PutPolicyRevision, frozen at
acceptance, the first attempt held to the end of the window (visible as
next_attempt_time) across a DST change, SAFETY never held; the clock is moved."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest

from tests.api.test_lifecycle_rpcs import closed_port
from tests.support.grpc_errors import rich_error
from tests.support.people import operator_stub, put_policy
from tests.support.server import RunningServer, ShiftableClock, send_request, start_server
from tests.support.watching import events_until, has_kind
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import policy_service_pb2 as ppb
from uns.v1 import policy_service_pb2_grpc as ppb_grpc
from uns.v1 import types_pb2 as t

NIGHT = t.QuietHours(time_zone="America/New_York", start="22:00", end="07:00")
# 01:30 EST on the night the US springs forward (02:00 EST -> 03:00 EDT).
BEFORE_DST = datetime(2026, 3, 8, 6, 30, tzinfo=UTC)
MORNING = datetime(2026, 3, 8, 11, tzinfo=UTC)  # 07:00 EDT, not 12:00 UTC


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


def move_to(clock: ShiftableClock, instant: datetime) -> None:
    clock.offset = instant - datetime.now(UTC)


def spec(**fields: object) -> ppb.PolicySpec:
    return ppb.PolicySpec(channels=["log"], delivery_mode=t.DELIVERY_MODE_GUARANTEED, **fields)


async def test_quiet_hours_are_validated(srv: RunningServer) -> None:
    bad = t.QuietHours(time_zone="Mars/Olympus_Mons", start="25:00", end="07:00")
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await operator_stub(srv, ppb_grpc.PolicyServiceStub).PutPolicyRevision(
            ppb.PutPolicyRevisionRequest(notification_type="night.ops", spec=spec(quiet_hours=bad))
        )
    err = rich_error(exc.value)
    assert err.reason == "INVALID_REQUEST"
    assert set(err.violations) == {"spec.quiet_hours.time_zone", "spec.quiet_hours.start"}


async def test_first_attempt_is_held_across_the_dst_change(
    srv: RunningServer, clock: ShiftableClock
) -> None:
    put = await put_policy(srv, "night.ops", spec(quiet_hours=NIGHT))
    assert put.spec.quiet_hours == NIGHT
    move_to(clock, BEFORE_DST)
    alice = srv.stub("alice")
    held = await alice.SendNotification(send_request(notification_type="night.ops"))
    got = await alice.GetNotification(
        pb.GetNotificationRequest(notification_id=held.notification_id)
    )
    n = got.notification
    assert n.state == t.NOTIFICATION_STATE_PENDING and n.attempts == 0
    assert n.next_attempt_time.ToDatetime(tzinfo=UTC) == MORNING
    assert n.effective_policy.quiet_hours == NIGHT
    # A safety notification is never held.
    safety = await alice.SendNotification(
        send_request(
            notification_type="night.ops",
            intent="NOTIFICATION_INTENT_SAFETY",
            wait_for_first_attempt=True,
        )
    )
    assert safety.state == t.NOTIFICATION_STATE_DELIVERED
    # Simulate says the same: the delivery is planned at the end of the window.
    plan = await alice.Simulate(
        pb.SimulateRequest(request=send_request(notification_type="night.ops"))
    )
    assert plan.effective_policy.quiet_hours == NIGHT

    move_to(clock, MORNING + timedelta(seconds=1))
    await events_until(
        alice,
        pb.WatchEventsRequest(replay_history=True, notification_ids=[held.notification_id]),
        has_kind(held.notification_id, t.EVENT_KIND_DELIVERY_RESULT),
    )
    got = await alice.GetNotification(
        pb.GetNotificationRequest(notification_id=held.notification_id)
    )
    assert got.notification.state == t.NOTIFICATION_STATE_DELIVERED
    assert got.notification.deliver_time.ToDatetime(tzinfo=UTC) >= MORNING


async def test_a_retry_is_held_too(db_url: str, tmp_path: Path, clock: ShiftableClock) -> None:
    channels = tmp_path / "channels.yaml"
    channels.write_text(  # nothing listens there: every attempt fails, retryably
        f"broken:\n  type: webhook\n  url: http://127.0.0.1:{closed_port()}/hook\n"
        "  secret: test-secret\n  timeout_seconds: 2\n"
    )
    running = await start_server(
        db_url, tmp_path, clock=clock, channels_file=str(channels), dispatch_enabled=False
    )
    try:
        await put_policy(
            running,
            "night.broken",
            ppb.PolicySpec(
                channels=["broken"], delivery_mode=t.DELIVERY_MODE_GUARANTEED, quiet_hours=NIGHT
            ),
        )
        # 21:59:59.9 in New York (EST): the attempt is allowed, its retry falls inside.
        move_to(clock, datetime(2026, 1, 15, 2, 59, 59, 900000, tzinfo=UTC))
        alice = running.stub("alice")
        sent = await alice.SendNotification(send_request(notification_type="night.broken"))
        assert (await running.app.dispatcher.run_once()).claimed == 1
        got = await alice.GetNotification(
            pb.GetNotificationRequest(notification_id=sent.notification_id)
        )
        n = got.notification
        assert n.state == t.NOTIFICATION_STATE_PENDING and n.attempts == 1
        assert n.next_attempt_time.ToDatetime(tzinfo=UTC) == datetime(2026, 1, 15, 12, tzinfo=UTC)
    finally:
        await running.stop()

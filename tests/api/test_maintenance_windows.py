"""Maintenance windows (SPEC §7 "Quiet on purpose") through gRPC on SQLite,
with a clock the test moves: what a window holds stays PENDING (held_until,
an EVENT_KIND_HELD event) and is delivered at its end; SAFETY is never held; prefixes;
Delete releases at once; a held notification can be withdrawn; the hold survives a
restart; Simulate shows the window; operator only; every change audited."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import timestamp_pb2
from sqlalchemy import select

from tests.support.grpc_errors import rich_error
from tests.support.people import stub_as
from tests.support.server import RunningServer, ShiftableClock, send_request, start_server
from tests.support.watching import events_until, has_kind
from uns.v1 import maintenance_service_pb2 as mpb
from uns.v1 import maintenance_service_pb2_grpc as mpb_grpc
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_server.store.tables import maintenance_audit_records


@pytest.fixture
def clock() -> ShiftableClock:
    return ShiftableClock()


async def _start(db_url: str, tmp_path: Path, clock: ShiftableClock) -> RunningServer:
    return await start_server(db_url, tmp_path, clock=clock, idle_poll_seconds=0.2)


@pytest.fixture
async def srv(db_url: str, tmp_path: Path, clock: ShiftableClock) -> AsyncIterator[RunningServer]:
    running = await _start(db_url, tmp_path, clock)
    try:
        yield running
    finally:
        await running.stop()


def at(clock: ShiftableClock, **delta: float) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime((clock() + timedelta(**delta)).replace(microsecond=0))
    return ts


def windows(srv: RunningServer, who: str = "oscar") -> Any:
    return stub_as(srv, mpb_grpc.MaintenanceServiceStub, who)


async def put_window(
    srv: RunningServer,
    clock: ShiftableClock,
    window_id: str = "db-upgrade",
    types: tuple[str, ...] = ("db.*",),
    *,
    start: float = -1,
    hours: float = 2,
) -> mpb.MaintenanceWindow:
    window = mpb.MaintenanceWindow(
        window_id=window_id,
        start_time=at(clock, minutes=start),
        end_time=at(clock, hours=hours),
        notification_types=list(types),
        reason="PostgreSQL 17 upgrade",
    )
    reply = await windows(srv).PutMaintenanceWindow(mpb.PutMaintenanceWindowRequest(window=window))
    return reply.window


async def get(srv: RunningServer, notification_id: str) -> t.Notification:
    reply = await srv.stub("alice").GetNotification(
        pb.GetNotificationRequest(notification_id=notification_id)
    )
    return reply.notification


async def delivered(srv: RunningServer, notification_id: str) -> list[t.Event]:
    return await events_until(
        srv.stub("alice"),
        pb.WatchEventsRequest(replay_history=True, notification_ids=[notification_id]),
        has_kind(notification_id, t.EVENT_KIND_DELIVERY_RESULT),
    )


def held_event(events: list[t.Event]) -> t.Event:
    [held] = [e for e in events if e.kind == t.EVENT_KIND_HELD]
    return held


async def test_a_matching_send_is_held_until_the_window_ends(
    srv: RunningServer, clock: ShiftableClock
) -> None:
    window = await put_window(srv, clock)
    assert window.updated_by == "oscar" and window.reason == "PostgreSQL 17 upgrade"
    alice = srv.stub("alice")
    sent = await alice.SendNotification(send_request(notification_type="db.backup_failed"))
    other = await alice.SendNotification(
        send_request(notification_type="web.down", wait_for_first_attempt=True)
    )
    assert other.state == t.NOTIFICATION_STATE_DELIVERED  # another type is not held
    held = await get(srv, sent.notification_id)
    assert held.state == t.NOTIFICATION_STATE_PENDING and held.attempts == 0
    assert held.held_until == window.end_time and held.held_by_window_id == "db-upgrade"
    assert held.next_attempt_time == window.end_time

    clock.advance(hours=2, seconds=1)
    seen = await delivered(srv, sent.notification_id)
    event = held_event(seen)
    assert event.payload["window_id"] == "db-upgrade"
    assert event.payload["reason"] == "PostgreSQL 17 upgrade"
    done = await get(srv, sent.notification_id)
    assert done.state == t.NOTIFICATION_STATE_DELIVERED and done.attempts == 1
    assert not done.HasField("held_until") and done.held_by_window_id == ""


async def test_safety_is_never_held_and_patterns_match(
    srv: RunningServer, clock: ShiftableClock
) -> None:
    await put_window(srv, clock, types=("db.*", "web.down"))
    alice = srv.stub("alice")
    safety = await alice.SendNotification(
        send_request(
            notification_type="db.fire",
            intent="NOTIFICATION_INTENT_SAFETY",
            wait_for_first_attempt=True,
        )
    )
    assert safety.state == t.NOTIFICATION_STATE_DELIVERED
    for kind, is_held in (
        ("web.down", True),
        ("db.replica.lag", True),
        ("web.downtime", False),  # an exact name is not a prefix
        ("dbx.alert", False),  # "db.*" is the prefix "db."
    ):
        sent = await alice.SendNotification(send_request(notification_type=kind))
        if is_held:
            assert (await get(srv, sent.notification_id)).held_by_window_id == "db-upgrade"
        else:
            await delivered(srv, sent.notification_id)


async def test_delete_releases_at_once_and_withdraw_works(
    srv: RunningServer, clock: ShiftableClock
) -> None:
    await put_window(srv, clock, hours=5)
    alice = srv.stub("alice")
    first = await alice.SendNotification(send_request(notification_type="db.a"))
    second = await alice.SendNotification(send_request(notification_type="db.b"))
    withdrawn = await alice.WithdrawNotification(
        pb.WithdrawNotificationRequest(notification_id=second.notification_id, reason="moot")
    )
    assert withdrawn.notification.state == t.NOTIFICATION_STATE_WITHDRAWN
    ended = await windows(srv).DeleteMaintenanceWindow(
        mpb.DeleteMaintenanceWindowRequest(window_id="db-upgrade")
    )
    assert ended.window.window_id == "db-upgrade"
    await delivered(srv, first.notification_id)  # no clock moved: released now
    assert (await get(srv, second.notification_id)).state == t.NOTIFICATION_STATE_WITHDRAWN
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await windows(srv).GetMaintenanceWindow(
            mpb.GetMaintenanceWindowRequest(window_id="db-upgrade")
        )
    assert rich_error(exc.value).reason == "NOT_FOUND"
    # Every change is audited with its operator.
    async with srv.app.db.read() as conn:
        rows = (await conn.execute(select(maintenance_audit_records))).mappings().all()
    assert sorted((r["action"], r["actor"]) for r in rows) == [
        ("DELETE", "oscar"),
        ("PUT", "oscar"),
    ]


async def test_a_retry_or_scheduled_send_falling_due_inside_is_held(
    srv: RunningServer, clock: ShiftableClock
) -> None:
    alice = srv.stub("alice")
    sent = await alice.SendNotification(
        send_request(notification_type="db.nightly", schedule_time=at(clock, hours=1))
    )
    window = await put_window(srv, clock, start=30, hours=3)  # opens in 30 minutes
    clock.advance(hours=1, seconds=1)
    seen = await events_until(
        alice,
        pb.WatchEventsRequest(replay_history=True, notification_ids=[sent.notification_id]),
        has_kind(sent.notification_id, t.EVENT_KIND_HELD),
    )
    assert held_event(seen).payload["window_id"] == "db-upgrade"
    held = await get(srv, sent.notification_id)
    assert held.state == t.NOTIFICATION_STATE_PENDING and held.attempts == 0
    assert held.held_until == window.end_time and not held.HasField("lease_expire_time")
    # Moving the end later keeps it held until the new end.
    later = await put_window(srv, clock, start=-60, hours=4)
    assert (await get(srv, sent.notification_id)).held_until == later.end_time
    clock.advance(hours=4)
    await delivered(srv, sent.notification_id)
    assert (await get(srv, sent.notification_id)).attempts == 1


async def test_a_restart_inside_the_window_keeps_the_hold(
    db_url: str, tmp_path: Path, clock: ShiftableClock
) -> None:
    srv = await _start(db_url, tmp_path, clock)
    try:
        window = await put_window(srv, clock)
        sent = await srv.stub("alice").SendNotification(send_request(notification_type="db.x"))
    finally:
        await srv.stop()
    srv = await _start(db_url, tmp_path, clock)
    try:
        # A send after the restart is held too: the windows were loaded at start.
        again = await srv.stub("alice").SendNotification(send_request(notification_type="db.y"))
        for nid in (sent.notification_id, again.notification_id):
            n = await get(srv, nid)
            assert n.state == t.NOTIFICATION_STATE_PENDING and n.held_until == window.end_time
        clock.advance(hours=2, seconds=1)
        await delivered(srv, sent.notification_id)
        await delivered(srv, again.notification_id)
    finally:
        await srv.stop()


async def test_simulate_shows_the_window(srv: RunningServer, clock: ShiftableClock) -> None:
    window = await put_window(srv, clock)
    alice = srv.stub("alice")
    sim = await alice.Simulate(
        pb.SimulateRequest(request=send_request(notification_type="db.backup_failed"))
    )
    assert sim.held_by_window_id == "db-upgrade" and sim.held_until == window.end_time
    after = await alice.Simulate(
        pb.SimulateRequest(
            request=send_request(
                notification_type="db.backup_failed", schedule_time=at(clock, hours=3)
            )
        )
    )
    assert after.held_by_window_id == "" and not after.HasField("held_until")
    safety = await alice.Simulate(
        pb.SimulateRequest(
            request=send_request(notification_type="db.fire", intent="NOTIFICATION_INTENT_SAFETY")
        )
    )
    assert safety.held_by_window_id == ""


async def test_validation_listing_and_roles(srv: RunningServer, clock: ShiftableClock) -> None:
    ops = windows(srv)
    bad = mpb.MaintenanceWindow(
        window_id="Bad Id",
        start_time=at(clock, hours=2),
        end_time=at(clock, hours=1),
        notification_types=["db.*.x", "ok.type", "a b"],
    )
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await ops.PutMaintenanceWindow(mpb.PutMaintenanceWindowRequest(window=bad))
    err = rich_error(exc.value)
    assert (err.code, err.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_REQUEST")
    assert set(err.violations) == {
        "window.window_id",
        "window.end_time",
        "window.notification_types[0]",
        "window.notification_types[2]",
    }
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await ops.PutMaintenanceWindow(
            mpb.PutMaintenanceWindowRequest(window=mpb.MaintenanceWindow(window_id="w"))
        )
    assert {"window.start_time", "window.end_time", "window.notification_types"} <= set(
        rich_error(exc.value).violations
    )
    for window_id in ("a", "b", "c"):
        await put_window(srv, clock, window_id)
    page = await ops.ListMaintenanceWindows(mpb.ListMaintenanceWindowsRequest(page_size=2))
    assert [w.window_id for w in page.windows] == ["a", "b"] and page.next_page_token
    rest = await ops.ListMaintenanceWindows(
        mpb.ListMaintenanceWindowsRequest(page_size=2, page_token=page.next_page_token)
    )
    assert [w.window_id for w in rest.windows] == ["c"] and not rest.next_page_token
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await ops.DeleteMaintenanceWindow(mpb.DeleteMaintenanceWindowRequest(window_id="nope"))
    assert rich_error(exc.value).reason == "NOT_FOUND"
    for who in ("alice", "rita"):
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await windows(srv, who).ListMaintenanceWindows(mpb.ListMaintenanceWindowsRequest())
        assert exc.value.code() == grpc.StatusCode.PERMISSION_DENIED

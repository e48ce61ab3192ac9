"""Heartbeats (SPEC §7 "Alerts in", issue 44 item 2) through a real server, on SQLite:
a silence pages once, further rounds do not page again, the next beat
withdraws the page ("heartbeat resumed"), a beat before the deadline moves it, a
restart in the middle keeps it, Delete cancels it, a refused page is retried; roles,
validation and the audit trail. Time moves with the server's ShiftableClock and the
deadline worker is stepped with ``run_once`` (its loop is off: dispatch_enabled=False).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from sqlalchemy import select

from tests.support.grpc_errors import rich_error
from tests.support.people import stub_as
from tests.support.server import RunningServer, ShiftableClock, start_server
from uns.v1 import heartbeat_service_pb2 as pb
from uns.v1 import heartbeat_service_pb2_grpc as pb_grpc
from uns.v1 import notification_service_pb2 as npb
from uns.v1 import types_pb2 as t
from uns_server.store.db import Database
from uns_server.store.tables import people_audit_records

TYPE = "demo.alert"  # no policy: the server's default channel (log)


def minutes(n: float) -> Duration:
    out = Duration()
    out.FromTimedelta(timedelta(minutes=n))
    return out


def backup(**fields: Any) -> pb.HeartbeatMonitor:
    values: dict[str, Any] = {
        "heartbeat_id": "nightly-backup",
        "notification_type": TYPE,
        "interval": minutes(60),
        "grace": minutes(5),
        "title": "The nightly backup did not run",
        "message": "No beat from the backup job within its hour and five minutes.",
    }
    values.update(fields)
    return pb.HeartbeatMonitor(**values)


class Rig:
    def __init__(self, server: RunningServer, clock: ShiftableClock) -> None:
        self.server = server
        self.clock = clock

    def stub(self, who: str = "oscar") -> Any:
        return stub_as(self.server, pb_grpc.HeartbeatServiceStub, who)

    async def put(self, **fields: Any) -> pb.HeartbeatMonitor:
        reply = await self.stub().PutHeartbeat(pb.PutHeartbeatRequest(heartbeat=backup(**fields)))
        return reply.heartbeat

    async def get(self, heartbeat_id: str = "nightly-backup") -> pb.HeartbeatMonitor:
        reply = await self.stub("alice").GetHeartbeat(
            pb.GetHeartbeatRequest(heartbeat_id=heartbeat_id)
        )
        return reply.heartbeat

    async def beat(self, who: str = "alice") -> pb.HeartbeatMonitor:
        reply = await self.stub(who).Beat(pb.BeatRequest(heartbeat_id="nightly-backup"))
        return reply.heartbeat

    async def rounds(self) -> int:
        """Step the deadline worker until it has nothing due; the pages it sent."""
        paged = 0
        while True:
            done = await self.server.app.timers.run_once()
            paged += done.paged
            if not done.more:
                return paged

    async def notifications(self) -> list[t.Notification]:
        reply = await self.server.stub("oscar").ListNotifications(
            npb.ListNotificationsRequest(filter=f"notification_type = {TYPE}")
        )
        return list(reply.notifications)

    async def notification(self, notification_id: str) -> t.Notification:
        reply = await self.server.stub("oscar").GetNotification(
            npb.GetNotificationRequest(notification_id=notification_id)
        )
        return reply.notification


async def _start(db_url: str, tmp_path: Path, clock: ShiftableClock, **kw: Any) -> RunningServer:
    return await start_server(db_url, tmp_path, clock=clock, dispatch_enabled=False, **kw)


@pytest.fixture
async def rig(db_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    clock = ShiftableClock()
    server = await _start(db_url, tmp_path, clock)
    try:
        yield Rig(server, clock)
    finally:
        await server.stop()


async def refused(call: Any) -> Any:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return rich_error(info.value)


async def test_a_silence_pages_once_and_the_next_beat_withdraws_the_page(rig: Rig) -> None:
    put = await rig.put()
    assert (put.state, put.updated_by) == (pb.HEARTBEAT_STATE_UP, "oscar")
    assert not put.HasField("last_beat_time")
    due = put.deadline_time.ToDatetime() - put.create_time.ToDatetime()
    assert due == timedelta(minutes=65)
    assert await rig.rounds() == 0
    rig.clock.advance(minutes=61)
    assert (await rig.get()).state == pb.HEARTBEAT_STATE_LATE  # in the grace
    assert await rig.rounds() == 0
    rig.clock.advance(minutes=5)
    assert await rig.rounds() == 1
    paging = await rig.get()
    assert paging.state == pb.HEARTBEAT_STATE_PAGING
    assert not paging.HasField("deadline_time")
    [page] = await rig.notifications()
    assert page.id == paging.notification_id
    assert (page.title, page.source) == ("The nightly backup did not run", "heartbeat")
    assert page.principal == "heartbeat:nightly-backup"
    assert page.state == t.NOTIFICATION_STATE_PENDING
    # Further rounds, however late, do not page again for this silence.
    for _ in range(3):
        rig.clock.advance(minutes=90)
        assert await rig.rounds() == 0
    assert len(await rig.notifications()) == 1
    # A producer's beat ends it: the page is withdrawn with the reason, the deadline back.
    beaten = await rig.beat()
    assert beaten.state == pb.HEARTBEAT_STATE_UP
    assert beaten.notification_id == page.id  # the last page, for the record
    assert beaten.deadline_time.ToDatetime() - beaten.last_beat_time.ToDatetime() == timedelta(
        minutes=65
    )
    withdrawn = await rig.notification(page.id)
    assert withdrawn.state == t.NOTIFICATION_STATE_WITHDRAWN
    assert withdrawn.withdraw_reason == "heartbeat resumed"
    assert withdrawn.withdraw_actor == "heartbeat:nightly-backup"
    # The next silence is a new page.
    rig.clock.advance(minutes=64)
    assert await rig.rounds() == 0
    rig.clock.advance(minutes=2)
    assert await rig.rounds() == 1
    pages = await rig.notifications()
    assert len(pages) == 2
    assert (await rig.get()).notification_id not in ("", page.id)


async def test_a_beat_before_the_deadline_moves_it(rig: Rig) -> None:
    await rig.put()
    rig.clock.advance(minutes=50)
    await rig.beat()
    rig.clock.advance(minutes=30)  # past the first deadline, inside the new one
    assert await rig.rounds() == 0
    assert (await rig.get()).state == pb.HEARTBEAT_STATE_UP
    rig.clock.advance(minutes=34)  # 64 minutes after the beat: late, not yet paging
    assert await rig.rounds() == 0
    assert (await rig.get()).state == pb.HEARTBEAT_STATE_LATE
    rig.clock.advance(minutes=2)
    assert await rig.rounds() == 1
    assert len(await rig.notifications()) == 1


async def test_a_restart_in_the_middle_keeps_the_deadline(db_url: str, tmp_path: Path) -> None:
    clock = ShiftableClock()
    first = await _start(db_url, tmp_path, clock)
    try:
        await Rig(first, clock).put()
        clock.advance(minutes=30)
    finally:
        await first.stop()
    second = await _start(db_url, tmp_path, clock)
    try:
        rig = Rig(second, clock)
        assert await rig.rounds() == 0
        clock.advance(minutes=36)
        assert await rig.rounds() == 1
        assert (await rig.get()).state == pb.HEARTBEAT_STATE_PAGING
    finally:
        await second.stop()
    third = await _start(db_url, tmp_path, clock)  # paging survives a restart too
    try:
        rig = Rig(third, clock)
        clock.advance(minutes=120)
        assert await rig.rounds() == 0
        assert len(await rig.notifications()) == 1
        assert (await rig.beat()).state == pb.HEARTBEAT_STATE_UP
        [page] = await rig.notifications()
        assert page.state == t.NOTIFICATION_STATE_WITHDRAWN
    finally:
        await third.stop()


async def test_delete_cancels_and_a_new_timing_rearms(rig: Rig) -> None:
    await rig.put()
    rig.clock.advance(minutes=50)
    # A shorter interval applies at once: never beaten, it is re-armed from now.
    again = await rig.put(interval=minutes(10), grace=minutes(0))
    assert again.deadline_time.ToDatetime() - again.update_time.ToDatetime() == timedelta(
        minutes=10
    )
    rig.clock.advance(minutes=11)
    assert await rig.rounds() == 1
    delete = pb.DeleteHeartbeatRequest(heartbeat_id="nightly-backup")
    gone = await rig.stub().DeleteHeartbeat(delete)
    assert gone.heartbeat.state == pb.HEARTBEAT_STATE_PAGING
    await rig.put(heartbeat_id="hourly-sync")
    await rig.stub().DeleteHeartbeat(pb.DeleteHeartbeatRequest(heartbeat_id="hourly-sync"))
    rig.clock.advance(minutes=200)
    assert await rig.rounds() == 0  # nothing of either pages again
    assert len(await rig.notifications()) == 1
    error = await refused(rig.get())
    assert (error.code, error.reason) == (grpc.StatusCode.NOT_FOUND, "NOT_FOUND")
    assert error.metadata["heartbeat_id"] == "nightly-backup"


async def test_a_refused_page_is_recorded_and_tried_again(db_url: str, tmp_path: Path) -> None:
    clock = ShiftableClock()
    server = await _start(db_url, tmp_path, clock, default_channels="")
    try:
        rig = Rig(server, clock)
        await rig.put(notification_type="ops.nobody")  # no policy, no default channels
        clock.advance(minutes=66)
        assert await rig.rounds() == 0
        waiting = await rig.get()
        assert waiting.state == pb.HEARTBEAT_STATE_LATE
        assert waiting.page_error.startswith("NO_POLICY")
        clock.advance(minutes=2)
        assert await rig.rounds() == 0  # tried again, refused again
        await rig.beat()  # the silence ends: nothing left to send
        assert (await rig.get()).page_error == ""  # no page is owed any more
        clock.advance(minutes=2)
        assert await rig.rounds() == 0
        assert (await rig.get()).page_error == ""
    finally:
        await server.stop()


async def test_roles_validation_paging_and_the_audit_trail(rig: Rig) -> None:
    for who in ("alice", "rita"):
        put = pb.PutHeartbeatRequest(heartbeat=backup())
        error = await refused(rig.stub(who).PutHeartbeat(put))
        assert (error.code, error.reason) == (
            grpc.StatusCode.PERMISSION_DENIED,
            "PERMISSION_DENIED",
        )
    error = await refused(rig.beat("rita"))  # a responder does not beat
    assert error.code == grpc.StatusCode.PERMISSION_DENIED
    error = await refused(rig.beat())
    assert (error.code, error.reason) == (grpc.StatusCode.NOT_FOUND, "NOT_FOUND")
    error = await refused(
        rig.stub().PutHeartbeat(
            pb.PutHeartbeatRequest(
                heartbeat=backup(heartbeat_id="Bad Id", interval=minutes(0), title="")
            )
        )
    )
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_REQUEST")
    assert set(error.violations) == {
        "heartbeat.heartbeat_id",
        "heartbeat.interval",
        "heartbeat.title",
    }
    for n in range(3):
        await rig.put(heartbeat_id=f"job-{n}")
    error = await refused(
        rig.stub("alice").DeleteHeartbeat(pb.DeleteHeartbeatRequest(heartbeat_id="job-0"))
    )
    assert error.code == grpc.StatusCode.PERMISSION_DENIED
    seen, token = [], ""
    while True:  # producers read too
        page = await rig.stub("alice").ListHeartbeats(
            pb.ListHeartbeatsRequest(page_size=2, page_token=token)
        )
        seen += [h.heartbeat_id for h in page.heartbeats]
        token = page.next_page_token
        if not token:
            break
    assert seen == ["job-0", "job-1", "job-2"]
    await rig.stub().DeleteHeartbeat(pb.DeleteHeartbeatRequest(heartbeat_id="job-1"))
    db = Database(rig.server.app.settings.database_url)
    try:
        async with db.read() as conn:
            t_ = people_audit_records
            q = select(t_.c.action, t_.c.actor, t_.c.kind).where(t_.c.object_id == "job-1")
            rows = [tuple(r) for r in (await conn.execute(q.order_by(t_.c.created_at)))]
    finally:
        await db.dispose()
    assert rows == [("PUT", "oscar", "heartbeat"), ("DELETE", "oscar", "heartbeat")]

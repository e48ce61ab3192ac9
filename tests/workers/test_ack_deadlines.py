"""The expiry worker over the work table, end to end on both dialects: a delivery
that opens an ack leaves its ``ack_deadline`` job, due at the deadline; the worker
times the ack out once it falls due (and sleeps until then), a stale timer does
nothing, two timers of one ack time it out once, and an ack opened without a job (by
a replica of the previous release) is still timed out by the carry sweep."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, insert, select

from tests.support.server import RunningServer, ShiftableClock, send_request, start_server
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_server.domain import ack_deadlines
from uns_server.store import jobs as job_store
from uns_server.store.tables import events, jobs

ACK_TIMEOUT_MINUTES = 60  # send_request's default policy


@pytest.fixture
def clock() -> ShiftableClock:
    return ShiftableClock()


@pytest.fixture
async def srv(db_url: str, tmp_path: Path, clock: ShiftableClock) -> AsyncIterator[RunningServer]:
    # The background round runs at start, finds nothing due and waits for the poll:
    # each test runs the rounds itself.
    running = await start_server(db_url, tmp_path, clock=clock, expiry_poll_seconds=3600)
    try:
        yield running
    finally:
        await running.stop()


async def send(srv: RunningServer) -> t.Notification:
    sent = await srv.stub("alice").SendNotification(
        send_request(require_ack=True, wait_for_first_attempt=True)
    )
    return await get(srv, sent.notification_id)


async def get(srv: RunningServer, notification_id: str) -> t.Notification:
    reply = await srv.stub("oscar").GetNotification(
        pb.GetNotificationRequest(notification_id=notification_id)
    )
    return reply.notification


async def timers(srv: RunningServer, nid: str) -> list[tuple[Any, ...]]:
    async with srv.app.store.db.read() as conn:
        q = (
            select(jobs.c.kind, jobs.c.state, jobs.c.scheduled_at, jobs.c.args)
            .where(jobs.c.notification_id == nid, jobs.c.kind != "delivery")
            .order_by(jobs.c.id)
        )
        return [tuple(r) for r in (await conn.execute(q)).all()]


async def timeouts(srv: RunningServer, nid: str) -> int:
    async with srv.app.store.db.read() as conn:
        q = select(events.c.id).where(events.c.notification_id == nid, events.c.kind == "TIMED_OUT")
        return len((await conn.execute(q)).all())


async def test_the_deadline_is_a_job_that_times_the_ack_out_when_due(
    srv: RunningServer, clock: ShiftableClock
) -> None:
    n = await send(srv)
    assert n.ack_state == t.ACK_STATE_PENDING
    deadline = n.ack_deadline_time.ToDatetime(tzinfo=clock().tzinfo)
    assert await timers(srv, n.id) == [("ack_deadline", "available", deadline, {})]

    early = await srv.app.timers.run_once()
    assert early.timed_out == 0 and not early.more
    assert early.due_in is not None and 0 < early.due_in <= ACK_TIMEOUT_MINUTES * 60

    clock.advance(minutes=ACK_TIMEOUT_MINUTES + 1)
    assert (await srv.app.timers.run_once()).timed_out == 1
    timed_out = await get(srv, n.id)
    assert timed_out.ack_state == t.ACK_STATE_TIMED_OUT
    assert timed_out.ack_actor == "uns-timeout-worker"
    [(_, state, _, _)] = await timers(srv, n.id)
    assert state == "completed"
    assert await timeouts(srv, n.id) == 1
    assert (await srv.app.timers.run_once()).timed_out == 0  # once
    assert await timeouts(srv, n.id) == 1


async def test_a_timer_made_stale_by_an_answer_does_nothing(
    srv: RunningServer, clock: ShiftableClock
) -> None:
    n = await send(srv)
    await srv.stub("rita").Acknowledge(pb.AcknowledgeRequest(notification_id=n.id))
    clock.advance(minutes=ACK_TIMEOUT_MINUTES + 1)
    assert (await srv.app.timers.run_once()).timed_out == 0
    assert (await get(srv, n.id)).ack_state == t.ACK_STATE_ACKED
    [(_, state, _, _)] = await timers(srv, n.id)
    assert state == "completed"  # it ran, found nothing to do
    assert await timeouts(srv, n.id) == 0


async def test_two_timers_of_one_ack_time_it_out_once(
    srv: RunningServer, clock: ShiftableClock
) -> None:
    n = await send(srv)
    deadline = n.ack_deadline_time.ToDatetime(tzinfo=clock().tzinfo)
    async with srv.app.store.db.write() as tx:  # as the migration and a new replica may
        rows = job_store.rows([ack_deadlines.timer(n.id, deadline)], clock())
        await tx.conn.execute(insert(jobs), rows)
    clock.advance(minutes=ACK_TIMEOUT_MINUTES + 1)
    assert (await srv.app.timers.run_once()).timed_out == 1
    assert [s for _, s, _, _ in await timers(srv, n.id)] == ["completed"] * 2
    assert await timeouts(srv, n.id) == 1


async def test_an_ack_opened_without_a_job_is_timed_out_by_the_carry_sweep(
    srv: RunningServer, clock: ShiftableClock
) -> None:
    n = await send(srv)
    async with srv.app.store.db.write() as tx:  # as a replica of the previous release
        await tx.conn.execute(delete(jobs).where(jobs.c.notification_id == n.id))
    clock.advance(minutes=ACK_TIMEOUT_MINUTES + 1)
    assert (await srv.app.timers.run_once()).timed_out == 1
    timed_out = await get(srv, n.id)
    assert timed_out.ack_state == t.ACK_STATE_TIMED_OUT
    assert await timeouts(srv, n.id) == 1

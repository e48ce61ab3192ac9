"""The migration that makes the ack deadline a job carries a running deployment's
pending acks: each ack the previous schema left PENDING gets its ``ack_deadline`` job,
due at its deadline, and is timed out by the new code when that falls due (others are
left alone); on both dialects."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import select

from tests.store.conftest import insert_under_old_schema, revision_before
from tests.store.test_conformance import row
from tests.support.server import ShiftableClock, start_server
from uns_server.domain.enums import AckStatus, Status
from uns_server.store import migrate
from uns_server.store.db import Database
from uns_server.store.tables import jobs
from uns_server.store.tables import notifications as n


async def test_acks_pending_under_the_old_schema_are_timed_out_by_the_new_code(
    empty_db_url: str, tmp_path: Path
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    pending = AckStatus.PENDING.value
    delivered = {"status": Status.DELIVERED.value, "require_ack": True, "delivered_at": now}
    due_at, later_at = now - timedelta(minutes=1), now + timedelta(hours=1)
    db = Database(empty_db_url)
    try:
        await migrate.upgrade(db, revision_before("ack_deadline"))
        due, later, answered = await insert_under_old_schema(
            db,
            row(**delivered, ack_status=pending, deadline=due_at),
            row(**delivered, ack_status=pending, deadline=later_at),
            row(**delivered, ack_status=AckStatus.ACKED.value, deadline=due_at, actor="rita"),
        )
        await migrate.upgrade(db)
        async with db.read() as conn:
            q = select(jobs.c.notification_id, jobs.c.kind, jobs.c.state, jobs.c.scheduled_at)
            carried = sorted(tuple(r) for r in (await conn.execute(q)).all())
        assert carried == sorted(
            [
                (due, "ack_deadline", "available", due_at),
                (later, "ack_deadline", "available", later_at),
            ]
        )
    finally:
        await db.dispose()

    clock = ShiftableClock()
    server = await start_server(
        empty_db_url, tmp_path, clock=clock, dispatch_enabled=False, expiry_poll_seconds=3600
    )
    try:
        expiry = server.app.timers
        await expiry.run_once()  # (the background round at start may have taken it)
        clock.advance(hours=2)
        assert (await expiry.run_once()).timed_out == 1
        assert (await expiry.run_once()).timed_out == 0
        async with server.app.store.db.read() as conn:
            acks = dict((await conn.execute(select(n.c.id, n.c.ack_status))).all())
            states = set((await conn.execute(select(jobs.c.state))).scalars())
        assert acks == {due: "TIMED_OUT", later: "TIMED_OUT", answered: "ACKED"}
        assert states == {"completed"}  # each timed out by its job
    finally:
        await server.stop()

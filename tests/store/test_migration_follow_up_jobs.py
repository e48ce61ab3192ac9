"""The migration that makes follow-ups jobs carries a running deployment's reminders:
each follow-up the previous schema scheduled on the row (an ack PENDING, a follow-up
time, no lease of its own held) gets its ``follow_up`` job, due then, and the new code
sends the reminder when it falls due; on both dialects."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import select

from tests.store.conftest import insert_under_old_schema, revision_before
from tests.store.test_conformance import row
from tests.support.documents import document, effective
from tests.support.server import ShiftableClock, start_server
from uns_server.domain.enums import AckStatus, EventKind, Status
from uns_server.domain.schedule import Reminder
from uns_server.store import migrate
from uns_server.store.db import Database
from uns_server.store.tables import events, jobs


async def test_follow_ups_scheduled_by_the_old_schema_are_sent_by_the_new_code(
    empty_db_url: str, tmp_path: Path
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    policy = effective(
        ("log",),
        require_ack=True,
        ack_timeout_minutes=120,
        reminder=Reminder(timedelta(minutes=1), 1.0, 1),
    )
    delivered = {
        "status": Status.DELIVERED.value,
        "require_ack": True,
        "delivered_at": now - timedelta(minutes=5),
        "deadline": now + timedelta(hours=1),
        "notification": document(("log",), effective=policy),
    }
    due_at = now - timedelta(minutes=4)
    pending = AckStatus.PENDING.value
    db = Database(empty_db_url)
    try:
        await migrate.upgrade(db, revision_before("follow-ups as work"))
        due, answered, leased = await insert_under_old_schema(
            db,
            row(**delivered, ack_status=pending, followup_at=due_at),
            row(**delivered, ack_status=AckStatus.ACKED.value, actor="rita", followup_at=due_at),
            # In the previous release's hands: its worker settles it, the carry follows.
            row(
                **delivered,
                ack_status=pending,
                followup_at=due_at,
                followup_lease_token=str(uuid.uuid4()),
                followup_lease_until=now + timedelta(minutes=10),
            ),
        )
        await migrate.upgrade(db)
        async with db.read() as conn:
            q = select(jobs.c.notification_id, jobs.c.kind, jobs.c.state, jobs.c.scheduled_at)
            carried = [tuple(r) for r in (await conn.execute(q)).all()]
        assert carried == [(due, "follow_up", "available", due_at)]
    finally:
        await db.dispose()

    clock = ShiftableClock()
    server = await start_server(
        empty_db_url, tmp_path, clock=clock, dispatch_enabled=False, idle_poll_seconds=3600
    )
    try:
        followups = server.app.followups
        await followups.run_once()  # (the background round at start may have taken it)
        assert await reminded(server.app.store.db) == [due]  # the answered one left alone
        # The previous release's lease runs out unsettled: the carry gives it a job.
        clock.advance(minutes=15)
        await followups.run_once()
        assert sorted(await reminded(server.app.store.db)) == sorted([due, leased])
        assert answered not in await reminded(server.app.store.db)
    finally:
        await server.stop()


async def reminded(db: Database) -> list[str]:
    """The notifications with a REMINDER_SENT event, one entry per event."""
    q = select(events.c.notification_id).where(events.c.kind == EventKind.REMINDER_SENT.value)
    async with db.read() as conn:
        return [str(nid) for nid in (await conn.execute(q)).scalars()]

"""The migration that makes deliveries jobs carries a running deployment's pending
work: every PENDING leader the previous schema queued (due now, due later, or leased by
a replica of the previous release) gets its ``delivery`` job, and the new code delivers
each once it is due, once; a follower and a settled row get none. A leader such a
replica queues after the migration is carried by the dispatcher. On both dialects."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import select

from tests.store.conftest import insert_under_old_schema, revision_before
from tests.store.test_conformance import row
from tests.support.documents import document
from tests.support.server import ShiftableClock, start_server
from uns_server.domain.enums import Status
from uns_server.domain.records import Notification
from uns_server.store import migrate, records
from uns_server.store.db import Database
from uns_server.store.tables import jobs, notifications

LOG = ("log",)


async def test_deliveries_queued_by_the_old_schema_are_made_by_the_new_code(
    empty_db_url: str, tmp_path: Path
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    doc = document(LOG)
    pending = {"notification": doc, "next_attempt": now - timedelta(seconds=5)}
    db = Database(empty_db_url)
    try:
        await migrate.upgrade(db, revision_before("deliveries as work"))
        due, later, leased, settled = await insert_under_old_schema(
            db,
            row(**pending),
            row(notification=doc, next_attempt=now + timedelta(hours=1)),
            # A replica of the previous release is delivering it right now.
            row(
                **pending,
                attempts=1,
                cycle_attempts=1,
                lease_token=str(uuid.uuid4()),
                lease_until=now + timedelta(minutes=10),
            ),
            row(**pending, status=Status.DELIVERED.value, delivered_at=now),
        )
        (follower,) = await insert_under_old_schema(
            db, row(**pending, dedup_key="k", dedup_owner_id=due)
        )
        await migrate.upgrade(db)
        async with db.read() as conn:
            q = select(jobs.c.notification_id, jobs.c.kind, jobs.c.state, jobs.c.scheduled_at)
            carried = {r[0]: tuple(r[1:]) for r in (await conn.execute(q)).all()}
        assert carried == {
            due: ("delivery", "available", now - timedelta(seconds=5)),
            later: ("delivery", "available", now + timedelta(hours=1)),
            leased: ("delivery", "available", now - timedelta(seconds=5)),
        }
        assert settled not in carried and follower not in carried
    finally:
        await db.dispose()

    clock = ShiftableClock()
    server = await start_server(
        empty_db_url, tmp_path, clock=clock, dispatch_enabled=False, idle_poll_seconds=3600
    )
    db = server.app.store.db
    dispatcher = server.app.dispatcher
    try:
        await dispatcher.run_once()
        assert await statuses(db, due, later, leased) == ["DELIVERED", "PENDING", "PENDING"]
        # The old replica died holding its lease: recovered, its effect maybe repeated.
        clock.advance(minutes=15)
        await dispatcher.run_once()
        assert await statuses(db, due, later, leased) == ["DELIVERED", "PENDING", "DELIVERED"]
        assert (await one(db, leased)).provider_effect_may_have_occurred
        # A replica of the previous release queues a leader after the migration: the
        # idle dispatcher carries it, then claims it.
        (late,) = await insert_under_old_schema(db, row(**pending | {"next_attempt": clock()}))
        clock.advance(hours=1)  # an idle poll later: carried; and the later one due
        await dispatcher.run_once()
        await dispatcher.run_once()
        assert await statuses(db, due, later, leased, late) == ["DELIVERED"] * 4
        assert (await one(db, due)).attempts == 1  # each delivered once
        assert (await one(db, later)).attempts == 1
        async with db.read() as conn:
            q = select(jobs.c.state).where(jobs.c.kind == "delivery")
            assert set((await conn.execute(q)).scalars()) == {"completed"}
    finally:
        await server.stop()


async def statuses(db: Database, *ids: str) -> list[str]:
    return [(await one(db, nid)).status.value for nid in ids]


async def one(db: Database, nid: str) -> Notification:
    async with db.read() as conn:
        q = select(notifications).where(notifications.c.id == nid)
        return records.notification((await conn.execute(q)).mappings().one())

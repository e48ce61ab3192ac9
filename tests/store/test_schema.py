"""Migrations build the schema the code uses, on both dialects."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import insert, select
from sqlalchemy.engine import Connection

from uns_server.store import migrate
from uns_server.store.db import Database
from uns_server.store.tables import events, metadata


async def test_upgrade_head_on_empty_database_then_no_drift(empty_db_url: str) -> None:
    db = Database(empty_db_url)
    try:
        assert await migrate.current_revision(db) is None
        await migrate.upgrade(db)
        assert await migrate.is_migrated(db)
        await migrate.upgrade(db)  # idempotent

        def diff(conn: Connection) -> list[object]:
            return list(compare_metadata(MigrationContext.configure(conn), metadata))

        async with db.read() as conn:
            differences = await conn.run_sync(diff)
        assert differences == []
    finally:
        await db.dispose()


async def test_json_uuid_and_timestamps_round_trip(db_url: str) -> None:
    db = Database(db_url)
    at = datetime(2026, 11, 29, 7, 30, 1, 123456, tzinfo=timezone(timedelta(hours=2)))
    payload = {"nested": {"list": [1, 2.5, "ü", None, True]}, "emoji": "🚨"}
    event_id = str(uuid.uuid4())
    try:
        async with db.write() as tx:
            await tx.conn.execute(
                insert(events).values(
                    id=event_id,
                    notification_id=str(uuid.uuid4()),
                    principal="p",
                    notification_type="t",
                    kind="ACCEPTED",
                    at=at,
                    payload=payload,
                )
            )
        async with db.read() as conn:
            row = (
                (await conn.execute(select(events).where(events.c.id == event_id))).mappings().one()
            )
    finally:
        await db.dispose()
    assert row["payload"] == payload
    assert row["at"] == at and row["at"].tzinfo is not None
    assert row["at"].astimezone(UTC).hour == 5
    assert uuid.UUID(row["id"]) == uuid.UUID(event_id)
    assert row["sequence"] >= 1


async def test_naive_datetimes_are_refused(db_url: str) -> None:
    db = Database(db_url)
    try:
        with pytest.raises(Exception, match="naive datetime"):
            async with db.write() as tx:
                await tx.conn.execute(
                    insert(events).values(
                        id=str(uuid.uuid4()),
                        notification_id="n",
                        principal="p",
                        notification_type="t",
                        kind="ACCEPTED",
                        at=datetime(2026, 1, 1),
                        payload={},
                    )
                )
    finally:
        await db.dispose()

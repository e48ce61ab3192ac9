"""The migration to the work table carries a running deployment's pending message
updates: updates queued in ``uns_message_updates`` by the previous release are sent
by the new code, once each, on both dialects; one an old replica still holds is left
to it and carried once its lease has expired; finished ones stay where they were."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import func, insert, select

from tests.store.conftest import revision_before
from tests.support.http_receiver import HttpReceiver
from tests.support.server import ShiftableClock, start_server
from uns_server.store import migrate
from uns_server.store.db import Database
from uns_server.store.tables import jobs, message_updates

HOUR = timedelta(hours=1)


def _old_row(notification_id: str, now: datetime, **values: Any) -> dict[str, Any]:
    """An update as the previous release queued it (``services.message_updates``)."""
    outcome = {
        "state": "ACKED",
        "actor": "rita",
        "via": "grpc",
        "at": now.isoformat(),
        "title": "Disk almost full",
        "message": "92% used on db-1",
        "notification_id": notification_id,
    }
    return {
        "id": str(uuid.uuid4()),
        "notification_id": notification_id,
        "channel": "hook",
        "reference": {"type": "webhook", "recipient": "", "webhook_id": f"{notification_id}:1"},
        "outcome": outcome,
        "status": "PENDING",
        "attempts": 0,
        "next_attempt": now - timedelta(seconds=5),
        "lease_until": None,
        "lease_token": None,
        "last_error": None,
        "created_at": now - timedelta(seconds=5),
        "updated_at": now - timedelta(seconds=5),
    } | values


async def test_updates_queued_by_the_old_schema_are_sent_by_the_new_code(
    empty_db_url: str, tmp_path: Path
) -> None:
    now = datetime.now(UTC)
    queued, held, retried, done = "n-queued", "n-held", "n-retried", "n-done"
    db = Database(empty_db_url)
    try:
        await migrate.upgrade(db, revision_before("uns_jobs"))
        async with db.write() as tx:
            await tx.conn.execute(
                insert(message_updates),
                [
                    _old_row(queued, now),
                    # an old replica is sending this one right now
                    _old_row(held, now, lease_token="old-replica", lease_until=now + HOUR),
                    _old_row(retried, now, attempts=3, last_error="503"),
                    _old_row(done, now, status="DONE", attempts=1),
                ],
            )
        await migrate.upgrade(db)
        async with db.read() as conn:
            left = (await conn.execute(select(message_updates.c.notification_id))).scalars()
            assert sorted(left) == [done, held]
            carried = (await conn.execute(select(jobs.c.notification_id, jobs.c.attempt))).all()
            assert sorted(carried) == [(queued, 0), (retried, 3)]
    finally:
        await db.dispose()

    clock = ShiftableClock()
    async with HttpReceiver() as receiver:
        channels = tmp_path / "channels.yaml"
        channels.write_text(
            f"hook:\n  type: webhook\n  url: {receiver.url('/hook')}\n  secret: s3cret-value\n"
        )
        server = await start_server(
            empty_db_url, tmp_path, clock=clock, channels_file=str(channels), dispatch_enabled=False
        )
        try:
            updater = server.app.message_updater
            first = await updater.run_once()
            assert (first.done, first.failed) == (2, 0)
            clock.advance(hours=2)  # the old replica died holding its lease
            second = await updater.run_once()
            assert (second.done, second.failed) == (1, 0)
            assert (await updater.run_once()).done == 0  # each sent once
            sent = [r.json()["data"]["notification_id"] for r in receiver.requests]
            assert sorted(sent) == [held, queued, retried]
            assert {r.json()["type"] for r in receiver.requests} == {"uns.notification.settled"}
        finally:
            await server.stop()

    db = Database(empty_db_url)
    try:
        async with db.read() as conn:
            assert (await conn.execute(select(func.count()).select_from(jobs))).scalar() == 3
            left = (await conn.execute(select(message_updates.c.notification_id))).scalars()
            assert list(left) == [done]  # finished before the migration: left alone
    finally:
        await db.dispose()

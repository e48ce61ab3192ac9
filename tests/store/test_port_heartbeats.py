"""The heartbeats' port (``uns_server.store.port.heartbeats``) on SQLite and PostgreSQL:
put and replace with audit records, reads and paging, the cheap beat, the page's
columns, and the deadline jobs it inserts and cancels (claimed through ``tx.jobs``)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from tests.store.test_conformance import NOW
from uns_server.domain import heartbeats
from uns_server.domain.heartbeats import Heartbeat
from uns_server.domain.jobs import completed
from uns_server.store.sql_store import SqlStore

HOUR = timedelta(hours=1)
LEASE = timedelta(minutes=5)


def _heartbeat(heartbeat_id: str = "backup", **fields: object) -> Heartbeat:
    value = Heartbeat(heartbeat_id, "ops.backup", HOUR, timedelta(minutes=5), "Late", "No beat")
    return replace(value, armed_at=NOW, **fields)  # type: ignore[arg-type]


async def test_a_heartbeat_is_put_read_paged_and_deleted_with_audit_records(
    store: SqlStore,
) -> None:
    async with store.write() as tx:
        stored = await tx.heartbeats.put(_heartbeat(), actor="oscar", now=NOW)
        assert (stored.created_at, stored.updated_by, stored.armed_at) == (NOW, "oscar", NOW)
        assert stored.job_id is None and not stored.paging
        later = NOW + HOUR
        again = await tx.heartbeats.put(_heartbeat(title="Still late"), actor="olga", now=later)
        assert (again.created_at, again.updated_at, again.title) == (NOW, later, "Still late")
        for n in range(3):
            await tx.heartbeats.put(_heartbeat(f"job-{n}"), actor="oscar", now=NOW)
    async with store.read() as tx:
        assert (await tx.heartbeats.get("backup")) == again
        assert await tx.heartbeats.get("nope") is None
        first = await tx.heartbeats.list_heartbeats(after=None, limit=2)
        assert [h.heartbeat_id for h in first] == ["backup", "job-0"]
        rest = await tx.heartbeats.list_heartbeats(after="job-0", limit=10)
        assert [h.heartbeat_id for h in rest] == ["job-1", "job-2"]
    async with store.write() as tx:
        locked = await tx.heartbeats.locked({"job-1", "backup", "nope"})
        assert sorted(locked) == ["backup", "job-1"]
        await tx.heartbeats.delete(locked["job-1"], actor="oscar", now=NOW)
    async with store.read() as tx:
        assert await tx.heartbeats.get("job-1") is None


async def test_a_beat_is_one_update_and_the_page_is_recorded(store: SqlStore) -> None:
    async with store.write() as tx:
        await tx.heartbeats.put(_heartbeat(), actor="oscar", now=NOW)
        assert await tx.heartbeats.beat("nope", NOW) is None
        beaten = await tx.heartbeats.beat("backup", NOW + HOUR)
        assert beaten is not None and beaten.last_beat_at == NOW + HOUR
        await tx.heartbeats.record_page(
            "backup", paging=True, notification_id="n-1", page_error="", job_id=None
        )
    async with store.read() as tx:
        found = await tx.heartbeats.get("backup")
    assert found is not None
    assert (found.paging, found.notification_id, found.last_beat_at) == (True, "n-1", NOW + HOUR)


async def test_deadline_jobs_are_inserted_claimed_and_cancelled(store: SqlStore) -> None:
    async with store.write() as tx:
        due = await tx.heartbeats.insert_timer(heartbeats.timer("backup", NOW), NOW)
        later = await tx.heartbeats.insert_timer(heartbeats.timer("backup", NOW + HOUR), NOW)
        assert later != due
        assert await tx.heartbeats.cancel_timer(later, NOW)  # waiting: cancelled
        assert not await tx.heartbeats.cancel_timer(later, NOW)  # final: left alone
        [claimed] = await tx.jobs.claim((heartbeats.KIND,), now=NOW, limit=10, lease=LEASE)
        assert (claimed.id, claimed.args) == (due, {"heartbeat_id": "backup"})
        assert not await tx.heartbeats.cancel_timer(due, NOW)  # running: left alone
        assert await tx.jobs.settle_many([completed(claimed)], NOW) == {due}
    async with store.read() as tx:
        assert await tx.jobs.next_due_at((heartbeats.KIND,)) is None

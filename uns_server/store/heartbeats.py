"""The heartbeats' port (``store.port.Heartbeats``): ``uns_heartbeats``, their audit
records (``uns_people_audit_records``, kind ``heartbeat``) and the insert and cancel of
their ``heartbeat_deadline`` rows of ``uns_jobs`` (claim and settle are the work
table's, ``store.jobs``)."""

from __future__ import annotations

import uuid
from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import RowMapping, delete, insert, select, update

from uns_server.domain.heartbeats import Heartbeat
from uns_server.domain.jobs import JobState, NewJob
from uns_server.store.bound import Bound
from uns_server.store.tables import heartbeats as h
from uns_server.store.tables import inline
from uns_server.store.tables import jobs as j
from uns_server.store.tables import people_audit_records as audit

_WAITING = j.c.state.in_([inline(s.value) for s in (JobState.AVAILABLE, JobState.RETRYABLE)])


def _heartbeat(row: RowMapping) -> Heartbeat:
    return Heartbeat(
        heartbeat_id=row["heartbeat_id"],
        notification_type=row["notification_type"],
        interval=timedelta(seconds=row["interval_seconds"]),
        grace=timedelta(seconds=row["grace_seconds"]),
        title=row["title"],
        message=row["message"],
        armed_at=row["armed_at"],
        last_beat_at=row["last_beat_at"],
        paging=bool(row["paging"]),
        notification_id=row["notification_id"],
        page_error=row["page_error"],
        job_id=row["job_id"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        updated_by=row["updated_by"],
    )


def content(hb: Heartbeat) -> dict[str, Any]:
    """What the operator put, as the audit record keeps it."""
    return {
        "heartbeat_id": hb.heartbeat_id,
        "notification_type": hb.notification_type,
        "interval_seconds": int(hb.interval.total_seconds()),
        "grace_seconds": int(hb.grace.total_seconds()),
        "title": hb.title,
        "message": hb.message,
    }


class SqlHeartbeatReads(Bound):
    __slots__ = ()

    async def get(self, heartbeat_id: str) -> Heartbeat | None:
        q = select(h).where(h.c.heartbeat_id == heartbeat_id)
        row = (await self._conn.execute(q)).mappings().first()
        return _heartbeat(row) if row else None

    async def list_heartbeats(self, *, after: str | None, limit: int) -> list[Heartbeat]:
        q = select(h)
        if after is not None:
            q = q.where(h.c.heartbeat_id > after)
        rows = (await self._conn.execute(q.order_by(h.c.heartbeat_id).limit(limit))).mappings()
        return [_heartbeat(r) for r in rows]


class SqlHeartbeats(SqlHeartbeatReads):
    __slots__ = ()

    async def locked(self, heartbeat_ids: Collection[str]) -> dict[str, Heartbeat]:
        if not heartbeat_ids:
            return {}
        q = (
            select(h)
            .where(h.c.heartbeat_id.in_(sorted(heartbeat_ids)))
            .order_by(h.c.heartbeat_id)
            .with_for_update()
        )
        rows = (await self._conn.execute(q)).mappings()
        return {r["heartbeat_id"]: _heartbeat(r) for r in rows}

    async def put(self, heartbeat: Heartbeat, *, actor: str, now: datetime) -> Heartbeat:
        c = content(heartbeat)
        del c["heartbeat_id"]
        values: dict[str, Any] = {
            **c,
            "armed_at": heartbeat.armed_at or now,
            "last_beat_at": heartbeat.last_beat_at,
            "paging": heartbeat.paging,
            "notification_id": heartbeat.notification_id,
            "page_error": heartbeat.page_error,
            "job_id": heartbeat.job_id,
            "updated_at": now,
            "updated_by": actor,
        }
        changed = await self._conn.execute(
            update(h).where(h.c.heartbeat_id == heartbeat.heartbeat_id).values(**values)
        )
        if changed.rowcount == 0:
            await self._conn.execute(
                insert(h).values(heartbeat_id=heartbeat.heartbeat_id, created_at=now, **values)
            )
        await self._audit(heartbeat, "PUT", actor, now)
        stored = await self.get(heartbeat.heartbeat_id)
        assert stored is not None
        return stored

    async def delete(self, heartbeat: Heartbeat, *, actor: str, now: datetime) -> None:
        await self._conn.execute(delete(h).where(h.c.heartbeat_id == heartbeat.heartbeat_id))
        await self._audit(heartbeat, "DELETE", actor, now)

    async def beat(self, heartbeat_id: str, now: datetime) -> Heartbeat | None:
        stmt = (
            update(h)
            .where(h.c.heartbeat_id == heartbeat_id)
            .values(last_beat_at=now)
            .returning(*h.c)
        )
        row = (await self._conn.execute(stmt)).mappings().first()
        return _heartbeat(row) if row else None

    async def record_page(
        self,
        heartbeat_id: str,
        *,
        paging: bool,
        notification_id: str | None,
        page_error: str,
        job_id: int | None,
    ) -> None:
        await self._conn.execute(
            update(h)
            .where(h.c.heartbeat_id == heartbeat_id)
            .values(
                paging=paging,
                notification_id=notification_id,
                page_error=page_error,
                job_id=job_id,
            )
        )

    async def insert_timer(self, job: NewJob, now: datetime) -> int:
        stmt = insert(j).values(
            kind=job.kind.value,
            notification_id=job.notification_id,
            args=dict(job.args),
            state=JobState.AVAILABLE.value,
            attempt=0,
            max_attempts=job.max_attempts,
            scheduled_at=job.scheduled_at or now,
            created_at=now,
        )
        job_id = (await self._conn.execute(stmt.returning(j.c.id))).scalar_one()
        return int(job_id)

    async def cancel_timer(self, job_id: int, now: datetime) -> bool:
        stmt = (
            update(j)
            .where(j.c.id == job_id, _WAITING)
            .values(
                state=JobState.CANCELLED.value,
                finalized_at=now,
                last_error="the heartbeat was replaced or deleted",
            )
        )
        return bool((await self._conn.execute(stmt)).rowcount)

    async def _audit(self, heartbeat: Heartbeat, action: str, actor: str, now: datetime) -> None:
        await self._conn.execute(
            insert(audit).values(
                id=str(uuid.uuid4()),
                kind="heartbeat",
                object_id=heartbeat.heartbeat_id,
                action=action,
                actor=actor,
                content=content(heartbeat),
                created_at=now,
            )
        )

"""Queue statistics: one cheap aggregate over the pending leaders, for the metrics
sampler (``workers.queue_sampler``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from uns_server.domain.enums import Status
from uns_server.store.tables import UtcDateTime
from uns_server.store.tables import notifications as n


async def queue_stats(
    conn: AsyncConnection, now: datetime
) -> tuple[int, int, int, datetime | None]:
    """(due, leased, scheduled, oldest due ``next_attempt``) over pending leaders.

    The WHERE clause is the predicate of the partial index ``ix_uns_notifications_due``,
    so this reads only pending leaders (the backlog), never the notification history.
    """
    leased = n.c.lease_until > now
    due = (n.c.next_attempt <= now) & (n.c.lease_until.is_(None) | (n.c.lease_until <= now))
    scheduled = (n.c.next_attempt > now) & (n.c.lease_until.is_(None) | (n.c.lease_until <= now))

    def count(cond: Any) -> Any:
        return func.coalesce(func.sum(case((cond, 1), else_=0)), 0)

    q = select(
        count(due),
        count(leased),
        count(scheduled),
        func.min(case((due, n.c.next_attempt), else_=None)),
    ).where(n.c.status == Status.PENDING.value, n.c.dedup_owner_id.is_(None))
    row = (await conn.execute(q)).one()
    oldest: Any = row[3]
    if isinstance(oldest, str):  # aggregates bypass the column type on SQLite
        oldest = datetime.fromisoformat(oldest)
    return (
        int(row[0]),
        int(row[1]),
        int(row[2]),
        UtcDateTime().process_result_value(oldest, conn.dialect),
    )

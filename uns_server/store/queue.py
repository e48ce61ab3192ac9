"""Queue statistics: one cheap aggregate over the pending leaders, for the metrics
sampler (``workers.queue_sampler``); and the due work a server cannot deliver
(``workers.undeliverable``)."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from uns_server.domain.enums import Status
from uns_server.store.served import served
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


async def unserved_due(
    conn: AsyncConnection,
    channels: Collection[str],
    *,
    now: datetime,
    due_before: datetime,
    limit: int,
) -> list[tuple[str, list[str], datetime]]:
    """(id, channels, next_attempt) of unleased pending leaders due since before
    ``due_before`` that name a channel outside ``channels``: work that the dispatcher
    holding ``channels`` never claims. Oldest first, at most ``limit``."""
    free = n.c.lease_until.is_(None) | (n.c.lease_until <= now)
    q = (
        select(n.c.id, n.c.notification, n.c.next_attempt)
        .where(n.c.status == Status.PENDING.value, n.c.dedup_owner_id.is_(None))
        .where(n.c.next_attempt <= due_before, free, served(conn.dialect.name, negated=True))
        .order_by(n.c.next_attempt)
        .limit(limit)
    )
    rows = (await conn.execute(q, {"channels": sorted(channels)})).all()
    out: list[tuple[str, list[str], datetime]] = []
    for nid, body, next_attempt in rows:
        named = ((body or {}).get("effective") or {}).get("channels") or []
        out.append((str(nid), [str(c) for c in named], next_attempt))
    return out

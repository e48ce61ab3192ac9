"""The queue port (``store.port.Queue``): one cheap aggregate over the pending leaders,
for the metrics sampler (``workers.queue_sampler``); and the due work a server cannot
deliver (``workers.undeliverable``)."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

from sqlalchemy import case, func, select

from uns_server.domain.enums import Status
from uns_server.store.bound import Bound
from uns_server.store.port.values import Backlog, UnservedLeader
from uns_server.store.served import served
from uns_server.store.tables import UtcDateTime, inline
from uns_server.store.tables import notifications as n


class SqlQueue(Bound):
    __slots__ = ()

    async def backlog(self, now: datetime) -> Backlog:
        """(due, leased, scheduled, oldest due ``next_attempt``) over pending leaders.

        The WHERE clause is the predicate of the partial index ``ix_uns_notifications_due``,
        so this reads only pending leaders (the backlog), never the notification history.
        """
        leased = n.c.lease_until > now
        due = (n.c.next_attempt <= now) & (n.c.lease_until.is_(None) | (n.c.lease_until <= now))
        scheduled = (n.c.next_attempt > now) & (
            n.c.lease_until.is_(None) | (n.c.lease_until <= now)
        )

        def count(cond: Any) -> Any:
            return func.coalesce(func.sum(case((cond, 1), else_=0)), 0)

        q = select(
            count(due),
            count(leased),
            count(scheduled),
            func.min(case((due, n.c.next_attempt), else_=None)),
        ).where(n.c.status == inline(Status.PENDING.value), n.c.dedup_owner_id.is_(None))
        row = (await self._conn.execute(q)).one()
        oldest: Any = row[3]
        if isinstance(oldest, str):  # aggregates bypass the column type on SQLite
            oldest = datetime.fromisoformat(oldest)
        return Backlog(
            int(row[0]),
            int(row[1]),
            int(row[2]),
            UtcDateTime().process_result_value(oldest, self._conn.dialect),
        )

    async def unserved_due(
        self,
        channels: Collection[str],
        *,
        now: datetime,
        due_before: datetime,
        limit: int,
    ) -> list[UnservedLeader]:
        """(id, channels, next_attempt) of unleased pending leaders due since before
        ``due_before`` that name a channel outside ``channels``: work that the dispatcher
        holding ``channels`` never claims. Oldest first, at most ``limit``."""
        free = n.c.lease_until.is_(None) | (n.c.lease_until <= now)
        q = (
            select(n.c.id, n.c.notification, n.c.next_attempt)
            .where(n.c.status == inline(Status.PENDING.value), n.c.dedup_owner_id.is_(None))
            .where(
                n.c.next_attempt <= due_before, free, served(self._conn.dialect.name, negated=True)
            )
            .order_by(n.c.next_attempt)
            .limit(limit)
        )
        rows = (await self._conn.execute(q, {"channels": sorted(channels)})).all()
        out: list[UnservedLeader] = []
        for nid, body, next_attempt in rows:
            named = ((body or {}).get("effective") or {}).get("channels") or []
            out.append(UnservedLeader(str(nid), [str(c) for c in named], next_attempt))
        return out

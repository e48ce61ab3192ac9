"""The queue port (``store.port.Queue``): one cheap aggregate over the pending leaders,
for the metrics sampler (``workers.queue_sampler``); and the due work a server cannot
deliver (``workers.undeliverable``)."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from sqlalchemy import case, func, select

from uns_server.domain.enums import Status
from uns_server.store.bound import Bound
from uns_server.store.delivery_leases import unleased
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
        The rows are grouped by one expression that names the lease once, so each row's
        job is probed once (``delivery_leases.LEASE_UNTIL``): PostgreSQL would copy a derived
        table's column, subquery and all, into every condition that read it.
        """
        state = case(
            (~unleased(now), inline("leased")),
            (n.c.next_attempt <= now, inline("due")),
            else_=inline("scheduled"),
        )
        q = (
            select(state, func.count(), func.min(n.c.next_attempt))
            .where(n.c.status == inline(Status.PENDING.value), n.c.dedup_owner_id.is_(None))
            .group_by(state)
        )
        found = {name: (int(rows), oldest) for name, rows, oldest in await self._conn.execute(q)}
        (due, oldest), (leased, _), (scheduled, _) = (
            found.get(name, (0, None)) for name in ("due", "leased", "scheduled")
        )
        if isinstance(oldest, str):  # aggregates bypass the column type on SQLite
            oldest = datetime.fromisoformat(oldest)
        return Backlog(
            due, leased, scheduled, UtcDateTime().process_result_value(oldest, self._conn.dialect)
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
        q = (
            select(n.c.id, n.c.notification, n.c.next_attempt)
            .where(n.c.status == inline(Status.PENDING.value), n.c.dedup_owner_id.is_(None))
            .where(
                n.c.next_attempt <= due_before,
                unleased(now),
                served(self._conn.dialect.name, negated=True),
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

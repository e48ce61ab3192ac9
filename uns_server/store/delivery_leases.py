"""Reading a delivery's lease (SPEC §7 "One work engine"): whoever asks whether a
notification's delivery is leased, and until when, reads ``LEASE_TOKEN`` and
``LEASE_UNTIL`` (a whole row for a record: ``NOTIFICATION_COLUMNS``; rows to lock:
``locked_records``): the running delivery job's lease (``store.deliveries``), else the
row's own columns, which only a replica of the previous release still writes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, case, func, literal, select
from sqlalchemy.ext.asyncio import AsyncConnection

from uns_server.domain.jobs import JobKind, JobState
from uns_server.domain.records import Notification
from uns_server.store import records
from uns_server.store.deliveries import is_live_delivery
from uns_server.store.tables import UtcDateTime, inline
from uns_server.store.tables import jobs as j
from uns_server.store.tables import notifications as n

_KIND: Any = inline(JobKind.DELIVERY.value)


def _running(lease_column: Any) -> Any:
    """``lease_column`` of the notification's running delivery job, correlated on
    ``uns_notifications.id``: one probe of ``ux_uns_jobs_delivery`` (at most one row)."""
    running = and_(j.c.kind == _KIND, j.c.state == inline(JobState.RUNNING.value))
    q = select(lease_column).where(j.c.notification_id == n.c.id, running)
    return q.correlate(n).scalar_subquery()


# The delivery lease of a ``uns_notifications`` row: its running job's. The row's own
# columns are the fallback: a replica of the previous release, during a rolling upgrade,
# leases the row (and may know no jobs at all).
LEASE_TOKEN: ColumnElement[str | None] = func.coalesce(
    _running(j.c.lease_token), n.c.lease_token, type_=n.c.lease_token.type
)
LEASE_UNTIL: ColumnElement[datetime | None] = func.coalesce(
    _running(j.c.lease_until), n.c.lease_until, type_=UtcDateTime()
)
# An attempt started and not yet counted: its token is still on the live job (running,
# or rescued and not claimed again); the settle, or the claim that recovers it, counts
# it on the row. (A previous release's replica counted its attempt when it leased the row.)
_UNCOUNTED = case(
    (
        n.c.lease_token.is_(None)
        & select(j.c.id)
        .where(j.c.notification_id == n.c.id, is_live_delivery(), j.c.lease_token.is_not(None))
        .correlate(n)
        .exists(),
        1,
    ),
    else_=0,
)
# A notification row as a record reads it (``records.notification``): every column, the
# lease from its job, and the attempts counting the one in flight (or interrupted).
_LEASE: dict[str, ColumnElement[Any]] = {
    "lease_token": LEASE_TOKEN,
    "lease_until": LEASE_UNTIL,
    "attempts": n.c.attempts + _UNCOUNTED,
    "cycle_attempts": n.c.cycle_attempts + _UNCOUNTED,
}
NOTIFICATION_COLUMNS: tuple[ColumnElement[Any], ...] = tuple(
    _LEASE[c.name].label(c.name) if c.name in _LEASE else c for c in n.c
)


async def locked_records(conn: AsyncConnection, lock: Select[Any]) -> list[Notification]:
    """The records of the notifications ``lock`` (``SELECT id ... FOR UPDATE``) locks, in
    its order, read by a statement of their own once the locks are held. In one statement,
    PostgreSQL would lock and return the version a concurrent commit (a settle) left, while
    the job's lease still read as of the statement's start: a lease the settle released."""
    ids = list((await conn.execute(lock)).scalars())
    if not ids:
        return []
    rows = await conn.execute(select(*NOTIFICATION_COLUMNS).where(n.c.id.in_(ids)))
    found = {r.id: r for r in map(records.notification, rows.mappings())}
    return [found[i] for i in ids]


def unleased(now: datetime) -> ColumnElement[bool]:
    """No live delivery lease at ``now``: none, or expired (``LEASE_UNTIL`` named once,
    so the job is probed once per row)."""
    return func.coalesce(LEASE_UNTIL, literal(now, UtcDateTime())) <= now

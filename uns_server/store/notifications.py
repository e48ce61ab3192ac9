"""Queries on ``uns_notifications`` and ``uns_dedup``. One function per query."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, any_, bindparam, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from uns_server.domain.admission import WindowChange, WindowOwner
from uns_server.domain.enums import Status
from uns_server.domain.records import DedupWindow, Notification
from uns_server.store import pg, records
from uns_server.store.db import WriteTx
from uns_server.store.port.values import NOTIFICATION_FILTER_FIELDS
from uns_server.store.tables import dedup, notifications

_BY_KEYS_PG = pg.Statement(
    select(notifications).where(notifications.c.key == any_(bindparam("keys")))
)
_INSERT_PG = pg.Insert(notifications)


async def get(
    conn: AsyncConnection, notification_id: str, *, for_update: bool = False
) -> Notification | None:
    """One notification, optionally locked until commit."""
    q = select(notifications).where(notifications.c.id == notification_id)
    if for_update:
        q = q.with_for_update()
    row = (await conn.execute(q)).mappings().first()
    return None if row is None else records.notification(row)


async def by_key(conn: AsyncConnection, key: str) -> Notification | None:
    """The notification holding this idempotency key."""
    q = select(notifications).where(notifications.c.key == key)
    row = (await conn.execute(q)).mappings().first()
    return None if row is None else records.notification(row)


async def by_keys(conn: AsyncConnection, keys: Collection[str]) -> dict[str, Notification]:
    """The notifications holding any of these idempotency keys, by key."""
    if not keys:
        return {}
    driver = pg.driver(conn)
    if driver is not None:
        rows: Iterable[pg.Row] = await _BY_KEYS_PG.fetch(driver, {"keys": sorted(keys)})
    else:
        q = select(notifications).where(notifications.c.key.in_(sorted(keys)))
        rows = (await conn.execute(q)).mappings()
    found = (records.notification(row) for row in rows)
    return {n.key: n for n in found}


async def insert_notifications(conn: AsyncConnection, rows: Sequence[Mapping[str, Any]]) -> None:
    """One multi-row INSERT. Rows go in key order, so two transactions inserting
    overlapping keys wait on each other in the same order instead of deadlocking."""
    if not rows:
        return
    ordered = sorted(rows, key=lambda r: str(r["key"]))
    driver = pg.driver(conn)
    if driver is not None:
        await _INSERT_PG.executemany(driver, ordered)
    else:
        await conn.execute(insert(notifications), ordered)


async def insert_notifications_before_events(
    tx: WriteTx, rows: Sequence[Mapping[str, Any]]
) -> None:
    """``insert_notifications`` in a transaction whose next write is its events append:
    on PostgreSQL the rows ride in the append's statement (``WriteTx.defer``), one
    round trip less per accept."""
    if pg.driver(tx.conn) is None:
        await insert_notifications(tx.conn, rows)
    else:
        tx.defer(_INSERT_PG, sorted(rows, key=lambda r: str(r["key"])))


async def locked_dedup_window(conn: AsyncConnection, key: str) -> DedupWindow | None:
    """Intake's read of a coalescing window, locked until commit on PostgreSQL."""
    q = select(dedup).where(dedup.c.key == key).with_for_update()
    row = (await conn.execute(q)).mappings().first()
    return None if row is None else records.dedup_window(row)


async def window_owner(conn: AsyncConnection, owner_id: str) -> WindowOwner | None:
    """A dedup window's owner as it stands (None when the row is gone)."""
    q = select(notifications.c.status).where(notifications.c.id == owner_id)
    status = (await conn.execute(q)).scalar()
    return None if status is None else WindowOwner(owner_id, Status(status))


async def insert_dedup_window(
    conn: AsyncConnection, key: str, *, owner_id: str, generation: int, until: datetime
) -> None:
    await conn.execute(
        insert(dedup).values(key=key, owner_id=owner_id, generation=generation, until=until)
    )


async def take_dedup_window(conn: AsyncConnection, change: WindowChange) -> None:
    """A new leader takes the window: a new row (a concurrent first window fails as a
    unique violation), or the row read under lock moves to it."""
    owner_id, generation, until = change.owner_id, change.generation, change.until
    if change.insert:
        await insert_dedup_window(
            conn, change.key, owner_id=owner_id, generation=generation, until=until
        )
    else:
        # The row was read under its lock (``locked_dedup_window``) in this transaction.
        q = update(dedup).where(dedup.c.key == change.key)
        await conn.execute(q.values(owner_id=owner_id, generation=generation, until=until))


# Listing (AIP-158): newest first, keyset-paged on (created_at, id).

_FILTERABLE = {
    "state": notifications.c.status,
    "ack_state": notifications.c.ack_status,
    "dead_letter": notifications.c.dead_letter,
    "notification_type": notifications.c.notification_type,
    "source": notifications.c.source,
    "principal": notifications.c.principal,
    "dedup_owner_id": notifications.c.dedup_owner_id,
}
assert set(_FILTERABLE) == set(NOTIFICATION_FILTER_FIELDS)  # the port names them


async def list_page(
    conn: AsyncConnection,
    *,
    conditions: Sequence[tuple[str, Any]],
    after: tuple[datetime, str] | None,
    limit: int,
) -> list[Notification]:
    q = select(notifications)
    for field, value in conditions:
        q = q.where(_FILTERABLE[field] == value)
    if after is not None:
        created_at, last_id = after
        q = q.where(
            or_(
                notifications.c.created_at < created_at,
                and_(notifications.c.created_at == created_at, notifications.c.id < last_id),
            )
        )
    q = q.order_by(notifications.c.created_at.desc(), notifications.c.id.desc()).limit(limit)
    return [records.notification(row) for row in (await conn.execute(q)).mappings()]

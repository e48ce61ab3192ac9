"""Dispatch queries: claim due leaders under a lease, and fenced settlement.

Every state change after the claim is guarded by ``lease_token`` and
``lease_until > now``: zero rows matched means the lease was lost, a typed
outcome rather than an exception (river's ``JobSetStateIfRunning``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from uns_server.domain.enums import EventKind, Status
from uns_server.store.tables import UtcDateTime, events
from uns_server.store.tables import notifications as n

_due = (n.c.status == Status.PENDING.value) & n.c.dedup_owner_id.is_(None)


async def claim_due(conn: AsyncConnection, *, now: datetime, limit: int) -> list[RowMapping]:
    """Lock up to ``limit`` due, unleased leaders (SKIP LOCKED on PostgreSQL).

    Returns the rows as they were before the claim, so the caller can see an expired
    previous lease (``lease_token`` still set): that attempt's effect is unknown.
    """
    q = (
        select(n)
        .where(_due, n.c.next_attempt <= now)
        .where(n.c.lease_until.is_(None) | (n.c.lease_until <= now))
        .order_by(n.c.priority.desc(), n.c.next_attempt)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return list((await conn.execute(q)).mappings())


async def take_lease(
    conn: AsyncConnection,
    row: RowMapping,
    *,
    token: str,
    now: datetime,
    lease: timedelta,
    recovered: bool,
) -> None:
    await conn.execute(
        update(n)
        .where(n.c.id == row["id"])
        .values(
            lease_token=token,
            lease_until=now + lease,
            attempts=n.c.attempts + 1,
            cycle_attempts=n.c.cycle_attempts + 1,
            provider_effect_may_have_occurred=(n.c.provider_effect_may_have_occurred | recovered),
            updated_at=now,
        )
    )


async def leased(
    conn: AsyncConnection, notification_id: str, token: str, now: datetime
) -> RowMapping | None:
    """The row if ``token`` still holds a valid lease on it, locked for the settlement."""
    q = (
        select(n)
        .where(n.c.id == notification_id, n.c.lease_token == token, n.c.lease_until > now)
        .with_for_update()
    )
    return (await conn.execute(q)).mappings().first()


async def settle(conn: AsyncConnection, notification_id: str, token: str, **values: Any) -> bool:
    result = await conn.execute(
        update(n).where(n.c.id == notification_id, n.c.lease_token == token).values(**values)
    )
    return bool(result.rowcount == 1)


async def pending_followers(conn: AsyncConnection, owner_id: str) -> list[RowMapping]:
    q = (
        select(n)
        .where(n.c.dedup_owner_id == owner_id, n.c.status == Status.PENDING.value)
        .order_by(n.c.created_at, n.c.id)
        .with_for_update()
    )
    return list((await conn.execute(q)).mappings())


async def update_rows(conn: AsyncConnection, ids: Sequence[str], **values: Any) -> None:
    if ids:
        await conn.execute(update(n).where(n.c.id.in_(ids)).values(**values))


async def next_due_at(conn: AsyncConnection) -> datetime | None:
    """When the earliest unleased pending leader becomes due (expired leases are
    found by the idle poll)."""
    q = select(func.min(n.c.next_attempt)).where(_due, n.c.lease_until.is_(None))
    value = (await conn.execute(q)).scalar()
    if isinstance(value, str):  # aggregates bypass the column type on SQLite
        value = datetime.fromisoformat(value)
    return UtcDateTime().process_result_value(value, conn.dialect)


async def results_recorded(conn: AsyncConnection, notification_id: str, token: str) -> bool:
    """Whether the settlement of the attempt holding ``token`` has committed (its
    CHANNEL_ATTEMPT_RESULT events exist)."""
    q = (
        select(events.c.sequence)
        .where(
            events.c.notification_id == notification_id,
            events.c.kind == EventKind.CHANNEL_ATTEMPT_RESULT.value,
            events.c.payload["lease_token"].as_string() == token,
        )
        .limit(1)
    )
    return (await conn.execute(q)).first() is not None

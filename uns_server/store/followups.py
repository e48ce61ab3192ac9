"""Follow-up queries: reminders and escalation steps of PENDING acks (``workers.followups``).

A row is due when its ack is PENDING and ``followup_at`` has passed; a claim leases
it under its own fencing token (``followup_lease_token``), separate from the dispatch
lease, and the settlement is guarded by that token and ``followup_lease_until > now``:
zero rows means the lease was lost (it expired, or a withdrawal fenced it). A row
whose ack ended while a step waited to retry (``followup_step``) is still due once, so
the worker can record that step as STOPPED.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from uns_server.domain.enums import AckStatus
from uns_server.domain.records import Notification
from uns_server.store import records
from uns_server.store.tables import UtcDateTime
from uns_server.store.tables import notifications as n

# A PENDING ack, or one that ended while a step waited to retry (to close that step).
_pending = (
    (n.c.ack_status == AckStatus.PENDING.value) | n.c.followup_step.is_not(None)
) & n.c.followup_at.is_not(None)


async def due(conn: AsyncConnection, now: datetime, limit: int) -> list[Notification]:
    """Lock up to ``limit`` rows whose follow-up is due and not leased (an expired
    lease counts as free: its row is recovered), oldest due first."""
    q = (
        select(n)
        .where(_pending, n.c.followup_at <= now)
        .where(n.c.followup_lease_until.is_(None) | (n.c.followup_lease_until <= now))
        .order_by(n.c.followup_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return [records.notification(row) for row in (await conn.execute(q)).mappings()]


async def update_row(conn: AsyncConnection, notification_id: str, **values: Any) -> None:
    await conn.execute(update(n).where(n.c.id == notification_id).values(**values))


async def leased(
    conn: AsyncConnection, notification_id: str, token: str, now: datetime
) -> Notification | None:
    """The notification while ``token`` still holds its follow-up lease, locked; else None."""
    q = (
        select(n)
        .where(
            n.c.id == notification_id,
            n.c.followup_lease_token == token,
            n.c.followup_lease_until > now,
        )
        .with_for_update()
    )
    row = (await conn.execute(q)).mappings().first()
    return None if row is None else records.notification(row)


async def settle(
    conn: AsyncConnection, notification_id: str, token: str, values: Mapping[str, Any]
) -> bool:
    """Fenced update: False when ``token`` no longer holds the lease."""
    result = await conn.execute(
        update(n)
        .where(n.c.id == notification_id, n.c.followup_lease_token == token)
        .values(**values)
    )
    return bool(result.rowcount == 1)


async def next_due_at(conn: AsyncConnection) -> datetime | None:
    """The earliest follow-up time of a PENDING ack (or of a step to close)."""
    value = (await conn.execute(select(func.min(n.c.followup_at)).where(_pending))).scalar()
    if isinstance(value, str):  # aggregates bypass the column type on SQLite
        value = datetime.fromisoformat(value)
    return UtcDateTime().process_result_value(value, conn.dialect)

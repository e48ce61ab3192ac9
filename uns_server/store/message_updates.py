"""The message-update outbox: claimed with a lease and a fencing token, like deliveries.

Every state change is guarded by the row's current ``lease_token``: a worker whose lease
expired (and whose row another worker has claimed since) changes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from uns_server.domain.records import MessageUpdate
from uns_server.store import records
from uns_server.store.tables import message_updates as mu

PENDING, DONE, FAILED = "PENDING", "DONE", "FAILED"


async def enqueue(conn: AsyncConnection, rows: Sequence[Mapping[str, Any]], now: datetime) -> None:
    """Queue updates: each row has notification_id, channel, reference, outcome."""
    if not rows:
        return
    await conn.execute(
        insert(mu),
        [
            {
                "id": str(uuid.uuid4()),
                **row,
                "status": PENDING,
                "attempts": 0,
                "next_attempt": now,
                "lease_until": None,
                "lease_token": None,
                "last_error": None,
                "created_at": now,
                "updated_at": now,
            }
            for row in rows
        ],
    )


async def claim(
    conn: AsyncConnection, *, now: datetime, limit: int, lease: timedelta
) -> list[tuple[MessageUpdate, str]]:
    """Lease up to ``limit`` due updates (SKIP LOCKED on PostgreSQL): (update as it was
    before the claim, its new fencing token)."""
    q = (
        select(mu)
        .where(
            mu.c.status == PENDING,
            mu.c.next_attempt <= now,
            or_(mu.c.lease_until.is_(None), mu.c.lease_until <= now),
        )
        .order_by(mu.c.next_attempt)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    claimed = []
    for row in (await conn.execute(q)).mappings():
        token = str(uuid.uuid4())
        await conn.execute(
            update(mu)
            .where(mu.c.id == row["id"])
            .values(lease_token=token, lease_until=now + lease, attempts=mu.c.attempts + 1)
        )
        claimed.append((records.message_update(row), token))
    return claimed


async def settle(
    conn: AsyncConnection,
    update_id: str,
    token: str,
    *,
    status: str,
    now: datetime,
    next_attempt: datetime | None = None,
    error: str | None = None,
) -> bool:
    """Record the outcome if the lease is still ours; False when it was lost."""
    values: dict[str, Any] = {
        "status": status,
        "lease_token": None,
        "lease_until": None,
        "last_error": error,
        "updated_at": now,
    }
    if next_attempt is not None:
        values["next_attempt"] = next_attempt
    result = await conn.execute(
        update(mu).where(mu.c.id == update_id, mu.c.lease_token == token).values(values)
    )
    return bool(result.rowcount == 1)


async def next_due_at(conn: AsyncConnection) -> datetime | None:
    q = select(mu.c.next_attempt).where(mu.c.status == PENDING).order_by(mu.c.next_attempt)
    value: datetime | None = (await conn.execute(q.limit(1))).scalar()
    return value

"""The message-update outbox: claimed with a lease and a fencing token, like deliveries.

The lifecycle and its rules are ``domain.message_updates``; this module writes them,
one named query per transition. Every settlement names the state it expects (PENDING)
and the lease token its claim issued in its WHERE clause: a worker whose lease expired
(and whose row another worker has claimed since) changes nothing and is told ``LOST``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from uns_server.domain.message_updates import CLAIMABLE, UpdateStatus
from uns_server.domain.records import MessageUpdate
from uns_server.store import records
from uns_server.store.port.values import Fenced, Queued
from uns_server.store.tables import message_updates as mu


async def enqueue(conn: AsyncConnection, queued: Sequence[Queued], now: datetime) -> None:
    """Queue updates, due now."""
    if not queued:
        return
    await conn.execute(
        insert(mu),
        [
            {
                "id": str(uuid.uuid4()),
                "notification_id": q.notification_id,
                "channel": q.channel,
                "reference": dict(q.reference),
                "outcome": dict(q.outcome),
                "status": UpdateStatus.PENDING.value,
                "attempts": 0,
                "next_attempt": now,
                "lease_until": None,
                "lease_token": None,
                "last_error": None,
                "created_at": now,
                "updated_at": now,
            }
            for q in queued
        ],
    )


def _claimable(now: datetime) -> tuple[Any, ...]:
    # domain.message_updates.claimable, as SQL
    return (
        mu.c.status == CLAIMABLE.value,
        mu.c.next_attempt <= now,
        or_(mu.c.lease_until.is_(None), mu.c.lease_until <= now),
    )


async def claim(
    conn: AsyncConnection, *, now: datetime, limit: int, lease: timedelta
) -> list[tuple[MessageUpdate, str]]:
    """Lease up to ``limit`` due updates (SKIP LOCKED on PostgreSQL): (update as it was
    before the claim, its new fencing token). Each claim counts an attempt."""
    q = (
        select(mu)
        .where(*_claimable(now))
        .order_by(mu.c.next_attempt)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    claimed = []
    for row in (await conn.execute(q)).mappings():
        token = str(uuid.uuid4())
        leased = await conn.execute(
            update(mu)
            .where(mu.c.id == row["id"], *_claimable(now))
            .values(lease_token=token, lease_until=now + lease, attempts=mu.c.attempts + 1)
        )
        if leased.rowcount == 1:
            claimed.append((records.message_update(row), token))
    return claimed


async def _settle_leased(
    conn: AsyncConnection,
    update_id: str,
    token: str,
    *,
    status: UpdateStatus,
    now: datetime,
    error: str | None,
    next_attempt: datetime | None = None,
) -> Fenced:
    """Release the lease into ``status``, if the row is still PENDING under ``token``."""
    q = update(mu).where(
        mu.c.id == update_id,
        mu.c.status == UpdateStatus.PENDING.value,
        mu.c.lease_token == token,
    )
    q = q.values(
        status=status.value, lease_token=None, lease_until=None, last_error=error, updated_at=now
    )
    if next_attempt is not None:
        q = q.values(next_attempt=next_attempt)
    result = await conn.execute(q)
    return Fenced.SETTLED if result.rowcount == 1 else Fenced.LOST


async def mark_done(conn: AsyncConnection, update_id: str, token: str, *, now: datetime) -> Fenced:
    """PENDING (leased) -> DONE."""
    return await _settle_leased(
        conn, update_id, token, status=UpdateStatus.DONE, now=now, error=None
    )


async def retry_at(
    conn: AsyncConnection,
    update_id: str,
    token: str,
    *,
    at: datetime,
    error: str | None,
    now: datetime,
) -> Fenced:
    """PENDING (leased) -> PENDING, claimable again at ``at``."""
    return await _settle_leased(
        conn, update_id, token, status=UpdateStatus.PENDING, now=now, error=error, next_attempt=at
    )


async def give_up(
    conn: AsyncConnection, update_id: str, token: str, *, error: str | None, now: datetime
) -> Fenced:
    """PENDING (leased) -> FAILED, for good."""
    return await _settle_leased(
        conn, update_id, token, status=UpdateStatus.FAILED, now=now, error=error
    )


async def next_due_at(conn: AsyncConnection) -> datetime | None:
    q = (
        select(mu.c.next_attempt)
        .where(mu.c.status == UpdateStatus.PENDING.value)
        .order_by(mu.c.next_attempt)
    )
    value: datetime | None = (await conn.execute(q.limit(1))).scalar()
    return value

"""Operator console sessions: keyed by SHA-256 of the session id (never the id)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from uns_server.domain.records import ConsoleSession
from uns_server.store import records
from uns_server.store.tables import console_sessions


async def insert(
    conn: AsyncConnection,
    *,
    id_hash: str,
    principal: str,
    key_hash: str,
    csrf_token: str,
    now: datetime,
    expires_at: datetime,
) -> None:
    await conn.execute(
        console_sessions.insert().values(
            id_hash=id_hash,
            principal=principal,
            key_hash=key_hash,
            csrf_token=csrf_token,
            created_at=now,
            last_seen_at=now,
            expires_at=expires_at,
        )
    )


async def by_hash(conn: AsyncConnection, id_hash: str) -> ConsoleSession | None:
    q = select(console_sessions).where(console_sessions.c.id_hash == id_hash)
    row = (await conn.execute(q)).mappings().first()
    return None if row is None else records.console_session(row)


async def touch(conn: AsyncConnection, id_hash: str, now: datetime) -> None:
    q = update(console_sessions).where(console_sessions.c.id_hash == id_hash)
    await conn.execute(q.values(last_seen_at=now))


async def remove(conn: AsyncConnection, id_hash: str) -> None:
    await conn.execute(delete(console_sessions).where(console_sessions.c.id_hash == id_hash))


async def purge_expired(conn: AsyncConnection, now: datetime) -> int:
    """Sessions past their absolute expiry (indexed); idle ones go when next seen."""
    result = await conn.execute(
        delete(console_sessions).where(console_sessions.c.expires_at <= now)
    )
    return int(result.rowcount or 0)

"""Revoked action links (by token hash) and accepted provider callbacks (by digest)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, insert, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from uns_server.store.tables import callback_receipts, revoked_links


async def is_revoked(conn: AsyncConnection, token_hash: str) -> bool:
    q = select(revoked_links.c.token_hash).where(revoked_links.c.token_hash == token_hash)
    return (await conn.execute(q)).first() is not None


async def revoke(
    conn: AsyncConnection, token_hash: str, notification_id: str, *, actor: str, now: datetime
) -> None:
    if await is_revoked(conn, token_hash):
        return
    await conn.execute(
        insert(revoked_links).values(
            token_hash=token_hash, notification_id=notification_id, revoked_by=actor, revoked_at=now
        )
    )


async def record_callback(conn: AsyncConnection, digest: str, provider: str, now: datetime) -> bool:
    """Remember an accepted callback; False if it was already there (a replay)."""
    dialect_insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    result = await conn.execute(
        dialect_insert(callback_receipts)
        .values(digest=digest, provider=provider, received_at=now)
        .on_conflict_do_nothing(index_elements=["digest"])
    )
    return bool(result.rowcount == 1)


async def prune_callbacks(conn: AsyncConnection, before: datetime) -> int:
    result = await conn.execute(
        delete(callback_receipts).where(callback_receipts.c.received_at < before)
    )
    return int(result.rowcount or 0)

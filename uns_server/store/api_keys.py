"""API keys, stored as SHA-256 hashes of the secret."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import func, insert, or_, select, update
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from uns_server.store.tables import api_keys


async def insert_key(
    conn: AsyncConnection,
    *,
    key_id: str,
    key_hash: str,
    prefix: str,
    principal: str,
    roles: Sequence[str],
    responds_for: Sequence[str],
    description: str,
    now: datetime,
) -> None:
    await conn.execute(
        insert(api_keys).values(
            id=key_id,
            key_hash=key_hash,
            prefix=prefix,
            principal=principal,
            roles=list(roles),
            responds_for=list(responds_for),
            description=description,
            created_at=now,
            revoked_at=None,
        )
    )


async def active_by_hash(conn: AsyncConnection, key_hash: str) -> RowMapping | None:
    q = select(api_keys).where(api_keys.c.key_hash == key_hash, api_keys.c.revoked_at.is_(None))
    return (await conn.execute(q)).mappings().first()


async def list_keys(conn: AsyncConnection) -> list[RowMapping]:
    return list((await conn.execute(select(api_keys).order_by(api_keys.c.created_at))).mappings())


async def count_active(conn: AsyncConnection) -> int:
    q = select(func.count()).select_from(api_keys).where(api_keys.c.revoked_at.is_(None))
    return int((await conn.execute(q)).scalar() or 0)


async def revoke(conn: AsyncConnection, id_or_prefix: str, now: datetime) -> int:
    result = await conn.execute(
        update(api_keys)
        .where(or_(api_keys.c.id == id_or_prefix, api_keys.c.prefix == id_or_prefix))
        .where(api_keys.c.revoked_at.is_(None))
        .values(revoked_at=now)
    )
    return int(result.rowcount)

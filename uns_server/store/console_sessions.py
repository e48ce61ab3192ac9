"""Operator console sessions (``store.port.ConsoleSessions``, ``tx.console_sessions``):
keyed by SHA-256 of the session id (never the id)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, select, update

from uns_server.domain.records import ConsoleSession
from uns_server.store import records
from uns_server.store.bound import Bound
from uns_server.store.tables import console_sessions as cs


class SqlConsoleSessionReads(Bound):
    __slots__ = ()

    async def by_hash(self, id_hash: str) -> ConsoleSession | None:
        q = select(cs).where(cs.c.id_hash == id_hash)
        row = (await self._conn.execute(q)).mappings().first()
        return None if row is None else records.console_session(row)


class SqlConsoleSessions(SqlConsoleSessionReads):
    __slots__ = ()

    async def insert(
        self,
        *,
        id_hash: str,
        principal: str,
        key_hash: str,
        csrf_token: str,
        now: datetime,
        expires_at: datetime,
    ) -> None:
        await self._conn.execute(
            cs.insert().values(
                id_hash=id_hash,
                principal=principal,
                key_hash=key_hash,
                csrf_token=csrf_token,
                created_at=now,
                last_seen_at=now,
                expires_at=expires_at,
            )
        )

    async def touch(self, id_hash: str, now: datetime) -> None:
        q = update(cs).where(cs.c.id_hash == id_hash)
        await self._conn.execute(q.values(last_seen_at=now))

    async def remove(self, id_hash: str) -> None:
        await self._conn.execute(delete(cs).where(cs.c.id_hash == id_hash))

    async def purge_expired(self, now: datetime) -> int:
        """Sessions past their absolute expiry (indexed); idle ones go when next seen."""
        result = await self._conn.execute(delete(cs).where(cs.c.expires_at <= now))
        return int(result.rowcount or 0)

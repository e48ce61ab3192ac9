"""Two small ports: revoked action links by token hash (``store.port.ActionLinks``) and
accepted provider callbacks by digest (``store.port.Receipts``)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, insert, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from uns_server.store.bound import Bound
from uns_server.store.tables import callback_receipts, revoked_links


class SqlActionLinkReads(Bound):
    __slots__ = ()

    async def is_revoked(self, token_hash: str) -> bool:
        q = select(revoked_links.c.token_hash).where(revoked_links.c.token_hash == token_hash)
        return (await self._conn.execute(q)).first() is not None


class SqlActionLinks(SqlActionLinkReads):
    __slots__ = ()

    async def revoke(
        self, token_hash: str, notification_id: str, *, actor: str, now: datetime
    ) -> None:
        if await self.is_revoked(token_hash):
            return
        await self._conn.execute(
            insert(revoked_links).values(
                token_hash=token_hash,
                notification_id=notification_id,
                revoked_by=actor,
                revoked_at=now,
            )
        )


class SqlReceipts(Bound):
    __slots__ = ()

    async def record(self, digest: str, provider: str, now: datetime) -> bool:
        """Remember an accepted callback; False if it was already there (a replay)."""
        dialect_insert = pg_insert if self._conn.dialect.name == "postgresql" else sqlite_insert
        result = await self._conn.execute(
            dialect_insert(callback_receipts)
            .values(digest=digest, provider=provider, received_at=now)
            .on_conflict_do_nothing(index_elements=["digest"])
        )
        return bool(result.rowcount == 1)

    async def prune(self, before: datetime) -> int:
        result = await self._conn.execute(
            delete(callback_receipts).where(callback_receipts.c.received_at < before)
        )
        return int(result.rowcount or 0)

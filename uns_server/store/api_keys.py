"""The API keys port (``store.port.ApiKeys``): keys stored as SHA-256 hashes of the
secret."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import func, insert, or_, select, text, update

from uns_server.domain.records import ApiKey
from uns_server.store import records
from uns_server.store.bound import Bound
from uns_server.store.tables import api_keys

# Taken by a server about to mint the quickstart's dev key (``app.readiness``), so that
# processes starting together on one database mint one key, not one each.
_DEV_KEY_LOCK_ID = 0x554E53_0004  # "UNS" + 4


class SqlApiKeyReads(Bound):
    __slots__ = ()

    async def active_by_hash(self, key_hash: str) -> ApiKey | None:
        q = select(api_keys).where(api_keys.c.key_hash == key_hash, api_keys.c.revoked_at.is_(None))
        row = (await self._conn.execute(q)).mappings().first()
        return None if row is None else records.api_key(row)

    async def list_keys(self) -> list[ApiKey]:
        rows = (
            await self._conn.execute(select(api_keys).order_by(api_keys.c.created_at))
        ).mappings()
        return [records.api_key(row) for row in rows]

    async def count_active(self) -> int:
        q = select(func.count()).select_from(api_keys).where(api_keys.c.revoked_at.is_(None))
        return int((await self._conn.execute(q)).scalar() or 0)


class SqlApiKeys(SqlApiKeyReads):
    __slots__ = ()

    async def insert(
        self,
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
        await self._conn.execute(
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

    async def revoke(self, id_or_prefix: str, now: datetime) -> int:
        result = await self._conn.execute(
            update(api_keys)
            .where(or_(api_keys.c.id == id_or_prefix, api_keys.c.prefix == id_or_prefix))
            .where(api_keys.c.revoked_at.is_(None))
            .values(revoked_at=now)
        )
        return int(result.rowcount)

    async def lock_dev_key(self) -> None:
        """Serialise dev-key minting until this transaction ends (SQLite's single writer
        does this already)."""
        if self._conn.dialect.name == "postgresql":
            await self._conn.execute(
                text("SELECT pg_advisory_xact_lock(:id)"), {"id": _DEV_KEY_LOCK_ID}
            )

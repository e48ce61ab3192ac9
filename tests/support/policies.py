"""Test setup: write and activate a policy revision straight into the store."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from uns_server.domain.policy import PolicySpec
from uns_server.store.db import Database
from uns_server.store.sql_store import SqlStore


async def activate_policy(db_url: str, notification_type: str, **spec: Any) -> None:
    db = Database(db_url)
    try:
        async with SqlStore(db).write() as tx:
            now = datetime.now(UTC)
            revision = await tx.policies.put_revision(
                notification_type, PolicySpec.build(**spec), actor="test", now=now
            )
            await tx.policies.activate(notification_type, revision.revision, now=now)
    finally:
        await db.dispose()

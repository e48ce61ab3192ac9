"""The store's tests talk to a ``Database`` on each dialect (``db_url``), and through it
to the store port (``SqlStore``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import insert, inspect

from tests.conftest import PostgresDatabases
from uns_server.store import migrate, records
from uns_server.store.db import Database
from uns_server.store.sql_store import SqlStore
from uns_server.store.tables import notifications


@pytest.fixture
async def db(db_url: str) -> AsyncIterator[Database]:
    database = Database(db_url)
    try:
        yield database
    finally:
        await database.dispose()


@pytest.fixture
def store(db: Database) -> SqlStore:
    """The store port over ``db``: what services and workers are handed."""
    return SqlStore(db)


@pytest.fixture(params=["sqlite", "postgres"])
async def empty_db_url(
    request: pytest.FixtureRequest, tmp_path: Path, postgres: PostgresDatabases
) -> str:
    """A database with no schema at all, once per dialect (migration tests)."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}"
    return await postgres.new(migrated=False)


def revision_before(doc_word: str) -> str:
    """The parent of the one migration whose docstring names ``doc_word`` (ids may be
    re-chained, so tests find a migration by what it does)."""
    scripts = ScriptDirectory.from_config(migrate.alembic_config("sqlite://"))
    (script,) = [s for s in scripts.walk_revisions() if doc_word in (s.doc or "")]
    assert isinstance(script.down_revision, str)
    return script.down_revision


async def insert_under_old_schema(db: Database, *rows: dict[str, Any]) -> list[str]:
    """Insert ``row``s (``tests.store.test_conformance.row``) into a database migrated
    to an earlier revision, with only the columns it has: what that release wrote."""
    async with db.write() as tx:
        have = set(await tx.conn.run_sync(_notification_columns))
        values = [
            {
                k: v
                for k, v in records.notification_row(records.notification(r)).items()
                if k in have
            }
            for r in rows
        ]
        await tx.conn.execute(insert(notifications), values)
    return [r["id"] for r in rows]


def _notification_columns(sync_conn: Any) -> list[str]:
    return [c["name"] for c in inspect(sync_conn).get_columns("uns_notifications")]

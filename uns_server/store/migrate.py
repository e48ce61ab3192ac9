"""Alembic, driven from inside the server and the admin CLI.

``upgrade`` holds a PostgreSQL advisory lock for its transaction so that several
replicas starting at once migrate one after another instead of racing.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection

from uns_server.store.db import Database

# ``uns_server/migrations`` links to the repository's ``migrations/`` (the layout the
# spec names); through the link, package data puts the scripts in the wheel.
MIGRATIONS_DIR = Path(__file__).resolve().parents[1] / "migrations"
_MIGRATION_LOCK_ID = 0x554E53_0001  # "UNS" + 1


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert head is not None
    return head


async def upgrade(db: Database, revision: str = "head") -> None:
    cfg = alembic_config(db.url)

    def run(conn: Connection) -> None:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _MIGRATION_LOCK_ID})
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)

    if db.command_timeout is None:
        async with db.write() as tx:
            await tx.conn.run_sync(run)
        return
    # A migration may legitimately run longer than any per-statement bound.
    unbounded = Database(db.url)
    try:
        async with unbounded.write() as tx:
            await tx.conn.run_sync(run)
    finally:
        await unbounded.dispose()


async def current_revision(db: Database) -> str | None:
    def read(conn: Connection) -> str | None:
        return MigrationContext.configure(conn).get_current_revision()

    async with db.read() as conn:
        return await conn.run_sync(read)


async def is_migrated(db: Database) -> bool:
    return await current_revision(db) == head_revision()

"""Alembic, driven from inside the server and the admin CLI.

On PostgreSQL the migrations run on a connection of their own (``application_name``
``uns-migrate``, no statement timeout: an index build may take minutes), one
transaction per migration, so that a migration may leave its transaction for
``CREATE INDEX CONCURRENTLY`` (``store.online_ddl``). Several replicas starting at once
take turns through a session-level advisory lock, held across those commits. A
replica waiting for its turn polls (``pg_try_advisory_lock``) instead of blocking in a
statement: a blocked statement holds a snapshot, which the running migration's
concurrent index build would wait for while the waiter waits for the migration.

SQLite runs every pending migration in one write transaction (its single writer
serialises processes anyway).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine
from sqlalchemy.pool import NullPool

from uns_server.store.db import Database

log = logging.getLogger("uns.migrate")

# ``uns_server/migrations`` links to the repository's ``migrations/`` (the layout the
# spec names); through the link, package data puts the scripts in the wheel.
MIGRATIONS_DIR = Path(__file__).resolve().parents[1] / "migrations"
_MIGRATION_LOCK_ID = 0x554E53_0001  # "UNS" + 1
# Names the migrating session in pg_stat_activity (and to the tests that watch it).
MIGRATION_APPLICATION_NAME = "uns-migrate"
LOCK_POLL_SECONDS = 0.5


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
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)

    if not db.is_postgres:
        async with db.write() as tx:
            await tx.conn.run_sync(run)
        return
    engine = create_async_engine(
        db.session_url,  # the lock is the session's: never through a transaction pooler
        poolclass=NullPool,
        connect_args=db.pg_connect_args(
            bound_statements=False, session=True, application_name=MIGRATION_APPLICATION_NAME
        ),
    )
    try:
        async with engine.connect() as conn:
            await _take_turn(conn)
            try:
                # Not in a transaction: env.py gives each migration its own.
                await conn.run_sync(run)
                await conn.commit()
            finally:
                with contextlib.suppress(Exception):
                    await conn.rollback()
                    await conn.execute(text("SELECT pg_advisory_unlock(:id)"), _LOCK)
                    await conn.commit()
    finally:
        await engine.dispose()


_LOCK = {"id": _MIGRATION_LOCK_ID}


async def _take_turn(conn: AsyncConnection) -> None:
    """Take the migration lock (for the session), polling while another process has it."""
    waiting = False
    while True:
        taken = (await conn.execute(text("SELECT pg_try_advisory_lock(:id)"), _LOCK)).scalar_one()
        await conn.commit()  # end the polling statement's transaction (and its snapshot)
        if taken:
            return
        if not waiting:
            log.info("another process is migrating the database; waiting for it")
            waiting = True
        await asyncio.sleep(LOCK_POLL_SECONDS)


async def current_revision(db: Database) -> str | None:
    def read(conn: Connection) -> str | None:
        return MigrationContext.configure(conn).get_current_revision()

    async with db.read() as conn:
        return await conn.run_sync(read)


async def is_migrated(db: Database) -> bool:
    return await current_revision(db) == head_revision()

"""Start-up's database half: connect, migrate, check the key setup, retrying until ready.

Start-up never crashes on a database that is down: the server listens at once with
health NOT_SERVING while ``connect_and_migrate`` retries the connection (and the
migration) every ``db_retry_seconds``; it returns when the schema is at head. Only a
setting that can never work (``SettingsError``, e.g. no API key on a non-loopback
address, or a LISTEN connection that cannot hear the pool's NOTIFY) ends the retries.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from uns_server.domain.enums import Role
from uns_server.services import auth
from uns_server.settings import Settings, SettingsError
from uns_server.store import durability, listen, migrate
from uns_server.store.clock import DatabaseClock
from uns_server.store.db import Database
from uns_server.store.sql_store import SqlStore

log = logging.getLogger("uns.server")
# Refusing is the choice (not polling, slower and silent on every replica): a LISTEN
# that hears nothing is a configuration error, and one setting fixes it.
LISTEN_DEAF = (
    "LISTEN/NOTIFY self-test failed: a NOTIFY committed through the pool (database_url) "
    f"did not reach the LISTEN connection within {listen.SELF_TEST_SECONDS:g} s. The LISTEN "
    "connection is probably behind a transaction-pooling PgBouncer: set "
    "--listen-database-url / UNS_LISTEN_DATABASE_URL to PostgreSQL itself or to a "
    "session-pooling PgBouncer (docs/deployment.md, PgBouncer)"
)


async def connect_and_migrate(
    db: Database,
    settings: Settings,
    clock: Callable[[], datetime],
    *,
    db_clock: DatabaseClock | None,
    has_key_file: bool,
) -> None:
    """Until the database is reachable, migrated and has an API key (or a key file
    is configured); raises ``SettingsError`` when it never can be."""
    s = settings
    while True:
        try:
            if db_clock is not None and not db_clock.synced:
                await db_clock.sync(db)  # before anything is written
            if s.auto_migrate:
                await migrate.upgrade(db)
            if not await migrate.is_migrated(db):
                log.error("database schema is not at head; run `uns-admin migrate`")
            else:
                await ensure_api_key(db, settings, clock, has_key_file=has_key_file)
                risk = await durability.failover_risk(db)
                if risk:
                    log.warning("database failover may lose data: %s", risk)
                if db.is_postgres:
                    await _listen_self_test(db)
                return
        except SettingsError:
            raise
        except Exception as exc:
            log.error(
                "database unavailable; retrying",
                extra={
                    "error": f"{type(exc).__name__}: {exc}",
                    "retry_seconds": s.db_retry_seconds,
                },
            )
        await asyncio.sleep(s.db_retry_seconds)


async def _listen_self_test(db: Database) -> None:
    """Refuse a LISTEN connection that cannot hear the pool (``LISTEN_DEAF``). A test
    that could not run (its host is a standby now, where LISTEN and NOTIFY are refused;
    the database went away meanwhile) proves nothing either way: the server starts, as
    it would have without the test, and says so."""
    try:
        heard = await listen.notify_reaches_listen(db)
    except Exception as exc:
        log.warning(
            "LISTEN/NOTIFY self-test could not run; starting without it",
            extra={"error": f"{type(exc).__name__}: {exc}"},
        )
        return
    if not heard:
        raise SettingsError(LISTEN_DEAF)


async def ensure_api_key(
    db: Database, settings: Settings, clock: Callable[[], datetime], *, has_key_file: bool
) -> None:
    """Some key must exist: on loopback, mint a dev key once; elsewhere refuse to serve."""
    store = SqlStore(db)
    async with store.read() as reads:
        keys = await reads.api_keys.count_active()
    if keys or has_key_file:
        return
    s = settings
    if not s.is_loopback:
        # --allow-insecure waives TLS only: never mint an all-roles key for a
        # network-reachable address, and serving with no key at all is useless.
        raise SettingsError(
            f"refusing to serve {s.listen} with no API key configured: create one with "
            "`uns-admin keys create` or pass --api-keys-file (a dev key is created "
            "automatically only on a loopback address)"
        )
    # Zero-ceremony quickstart on loopback: mint a key for every role, once. The file
    # is written inside the transaction (created 0600, never readable by others even
    # briefly); if it cannot be written, no key is stored and start-up fails clearly.
    secret, digest, prefix = auth.new_key()
    path = Path(s.dev_key_file)
    async with store.write() as tx:
        # Processes started together (--processes N, replicas) mint one key between them.
        await tx.api_keys.lock_dev_key()
        if await tx.api_keys.count_active():
            return
        await tx.api_keys.insert(
            key_id=str(uuid.uuid4()),
            key_hash=digest,
            prefix=prefix,
            principal="dev",
            roles=sorted(r.value for r in Role),
            responds_for=[],
            description="quickstart key",
            now=clock(),
        )
        try:
            path.unlink(missing_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secret + "\n")
        except OSError as exc:
            raise SettingsError(f"cannot write the dev key file {path}: {exc}") from exc
    log.warning(
        "no API keys existed: created a dev key with all roles. Authenticate with "
        f"'authorization: Bearer <key>', the key is in {s.dev_key_file}",
        extra={"dev_key_file": s.dev_key_file},
    )

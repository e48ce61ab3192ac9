"""Every migration runs on a live PostgreSQL without holding off its writers.

Each step (``down_revision`` -> ``revision``) runs while writers keep inserting and
updating notifications, the way a replica starting under ``auto_migrate`` meets the
database. A sampler watches the migration's backend (``application_name``
``uns-migrate``): the check is on locks, not on timing, so a loaded machine cannot make
it flake. While the migration builds or drops an index of the writers' table it must
hold no lock on it that conflicts with a writer's (``CONCURRENTLY``), and no writer may
be seen waiting on a lock it holds then, nor for a second or more on any of its locks
(a brief ``ADD COLUMN`` lock is fine). The longest write latency and lock wait are
reported; the only bound asserted is on a lock wait.

A build interrupted half-way leaves an invalid index behind; the rerun must clean it up.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import pytest
from alembic.operations import Operations
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import create_async_engine

from tests.conftest import PostgresDatabases
from uns_server.store import migrate, online_ddl
from uns_server.store.connect import normalize_url
from uns_server.store.db import Database

PREFILL_ROWS = 30_000
WRITERS = 3
WARM_UP_WRITES = 20
SAMPLE_SECONDS = 0.005
# Table locks a writer's RowExclusiveLock conflicts with.
BLOCKS_WRITERS = frozenset(
    {"ShareLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock"}
)
WRITER_APP = "uns-test-writer"
WATCHED = "uns_notifications"
INDEX_STATEMENT = ("CREATE INDEX", "CREATE UNIQUE INDEX", "DROP INDEX", "REINDEX")


def _steps() -> list[tuple[str, str]]:
    scripts = ScriptDirectory.from_config(migrate.alembic_config("sqlite://"))
    steps = []
    for script in scripts.walk_revisions():
        down = script.down_revision
        # The first migration creates the tables: there is nothing to write to before it.
        if isinstance(down, str):
            steps.append((down, script.revision))
    return sorted(steps, key=lambda s: s[1])


# The columns of the first schema: a replica still running the old code inserts exactly
# these, so every later column must be nullable or have a server default (expand).
_INSERT = """
INSERT INTO uns_notifications (id, key, fingerprint, principal, notification_type, source,
    notification, status, priority, delivery_mode, require_ack, max_attempts, outcome,
    attempts, cycle, cycle_attempts, next_attempt, provider_effect_may_have_occurred,
    dead_letter, created_at, updated_at, dedup_owner_id, dedup_successor_id)
SELECT gen_random_uuid()::text, md5(random()::text || i), md5(i::text), 'p' || (i % 50),
    'load', 'load', '{}'::jsonb, CASE WHEN i % 3 = 0 THEN 'PENDING' ELSE 'DELIVERED' END,
    i % 5, 'GUARANTEED', false, 3, '{}'::jsonb, 0, 1, 0, now(), false, false, now(), now(),
    CASE WHEN i % 10 = 0 THEN gen_random_uuid()::text END,
    CASE WHEN i % 20 = 0 THEN gen_random_uuid()::text END
FROM generate_series(1, $1) AS i
RETURNING id
"""


def _dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@dataclass
class Observed:
    writes: int = 0
    warmed_up: asyncio.Event = field(default_factory=asyncio.Event)
    longest_write: float = 0.0
    longest_lock_wait: float = 0.0
    samples: int = 0
    sampling: asyncio.Event = field(default_factory=asyncio.Event)  # the first sample is in
    # (migration statement, lock modes it held on the table) while it ran an index statement
    strong_locks_during_index_ddl: list[tuple[str, list[str]]] = field(default_factory=list)
    # (migration statement, seconds the writer had waited) for each writer seen blocked
    writers_blocked: list[tuple[str, float]] = field(default_factory=list)


async def _writer(dsn: str, stop: asyncio.Event, seen: Observed) -> None:
    conn = await asyncpg.connect(dsn, server_settings={"application_name": WRITER_APP})
    try:
        while not stop.is_set():
            started = time.monotonic()
            (row,) = await conn.fetch(_INSERT, 1)
            await conn.execute(
                "UPDATE uns_notifications SET status = 'DELIVERED', updated_at = now()"
                " WHERE id = $1",
                row["id"],
            )
            seen.longest_write = max(seen.longest_write, time.monotonic() - started)
            seen.writes += 1
            if seen.writes >= WARM_UP_WRITES:
                seen.warmed_up.set()
    finally:
        await conn.close()


async def _sampler(dsn: str, stop: asyncio.Event, seen: Observed) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        while not stop.is_set():
            rows = await conn.fetch(
                """
                SELECT m.query,
                       ARRAY(SELECT l.mode FROM pg_locks l
                             WHERE l.pid = m.pid AND l.granted AND l.locktype = 'relation'
                               AND l.relation = 'uns_notifications'::regclass) AS modes,
                       ARRAY(SELECT extract(epoch FROM now() - w.query_start)::float8
                             FROM pg_stat_activity w
                             WHERE w.application_name = $1
                               AND m.pid = ANY(pg_blocking_pids(w.pid))) AS waits
                FROM pg_stat_activity m
                WHERE m.application_name = $2 AND m.state = 'active'
                """,
                WRITER_APP,
                migrate.MIGRATION_APPLICATION_NAME,
            )
            seen.samples += 1
            seen.sampling.set()
            for row in rows:
                query = " ".join(row["query"].split())
                # Index statements on the writers' table (by name or by the naming
                # convention of its indexes); those on a table just created are free.
                index_ddl = query.upper().startswith(INDEX_STATEMENT) and WATCHED in query
                strong = sorted(set(row["modes"]) & BLOCKS_WRITERS)
                if index_ddl and strong:
                    seen.strong_locks_during_index_ddl.append((query[:80], strong))
                for waited in row["waits"]:
                    seen.longest_lock_wait = max(seen.longest_lock_wait, waited)
                    seen.writers_blocked.append(
                        (("index: " if index_ddl else "") + query[:80], waited)
                    )
            await asyncio.sleep(SAMPLE_SECONDS)
    finally:
        await conn.close()


async def _new_database(postgres: PostgresDatabases, revision: str) -> str:
    url = await postgres.new(migrated=False)
    db = Database(url)
    try:
        await migrate.upgrade(db, revision)
    finally:
        await db.dispose()
    return url


@pytest.mark.parametrize(("before", "revision"), _steps(), ids=lambda s: str(s))
async def test_migration_does_not_hold_off_writers(
    postgres: PostgresDatabases, before: str, revision: str
) -> None:
    url = await _new_database(postgres, before)
    dsn = _dsn(url)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.fetch(_INSERT, PREFILL_ROWS)
        await conn.execute("ANALYZE uns_notifications")
    finally:
        await conn.close()

    seen = Observed()
    stop = asyncio.Event()
    tasks = [asyncio.create_task(_writer(dsn, stop, seen)) for _ in range(WRITERS)]
    tasks.append(asyncio.create_task(_sampler(dsn, stop, seen)))
    db = Database(url)
    try:
        await asyncio.wait_for(seen.warmed_up.wait(), 30)  # the writers are in full swing
        # A quick migration may end before a slow sampler connects: start it only once the
        # sampler is watching.
        await asyncio.wait_for(seen.sampling.wait(), 30)
        writes_before = seen.writes
        started = time.monotonic()
        await migrate.upgrade(db, revision)
        took = time.monotonic() - started
        writes_during = seen.writes - writes_before
        assert await migrate.current_revision(db) == revision
    finally:
        stop.set()
        await asyncio.gather(*tasks)
        await db.dispose()

    print(
        f"\n[migration {before}->{revision}] {took:.2f}s under load: {writes_during} writes "
        f"meanwhile, longest write {seen.longest_write * 1000:.0f} ms, longest lock wait on "
        f"the migration {seen.longest_lock_wait * 1000:.0f} ms, {seen.samples} samples"
    )
    assert seen.samples > 0
    assert not seen.strong_locks_during_index_ddl, seen.strong_locks_during_index_ddl[:5]
    index_waits = [w for w in seen.writers_blocked if w[0].startswith("index: ")]
    assert not index_waits, index_waits[:5]
    assert seen.longest_lock_wait < 1.0, max(seen.writers_blocked, key=lambda w: w[1])


async def _invalid_indexes(dsn: str) -> list[str]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " WHERE i.indrelid = 'uns_notifications'::regclass AND NOT i.indisvalid"
        )
    finally:
        await conn.close()
    return sorted(r["relname"] for r in rows)


async def _index_definitions(dsn: str) -> dict[str, str]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'uns_notifications'"
        )
    finally:
        await conn.close()
    return {r["indexname"]: r["indexdef"] for r in rows}


@pytest.mark.parametrize(("before", "revision"), [("0002", "0003"), ("0003", "0004")])
async def test_an_interrupted_index_build_is_finished_by_the_rerun(
    postgres: PostgresDatabases, before: str, revision: str
) -> None:
    """The migration is cancelled in the middle of ``CREATE INDEX CONCURRENTLY`` (it waits
    there for an open write transaction), which leaves an invalid index. Running it again
    reaches the revision with every index valid and as the schema declares it."""
    url = await _new_database(postgres, before)
    dsn = _dsn(url)
    expected = await _index_definitions(_dsn(await _new_database(postgres, revision)))
    holder = await asyncpg.connect(dsn)
    watcher = await asyncpg.connect(dsn)
    db = Database(url)
    try:
        open_tx = holder.transaction()
        await open_tx.start()
        await holder.fetch(_INSERT, 10)  # holds RowExclusiveLock: the build waits for it
        upgrade = asyncio.create_task(migrate.upgrade(db, revision))
        pid = None
        deadline = time.monotonic() + 30
        while pid is None:
            assert time.monotonic() < deadline, "the migration never started an index build"
            assert not upgrade.done(), upgrade
            pid = await watcher.fetchval(
                "SELECT pid FROM pg_stat_activity WHERE application_name = $1"
                " AND query ILIKE 'CREATE INDEX CONCURRENTLY%' AND wait_event_type = 'Lock'",
                migrate.MIGRATION_APPLICATION_NAME,
            )
            await asyncio.sleep(0.02)
        assert await watcher.fetchval("SELECT pg_cancel_backend($1)", pid)
        with pytest.raises(Exception, match="cancel"):
            await upgrade
        await open_tx.rollback()
        assert await _invalid_indexes(dsn), "the cancelled build left no invalid index"
        assert await migrate.current_revision(db) == before

        await migrate.upgrade(db, revision)
        assert await migrate.current_revision(db) == revision
        assert await _invalid_indexes(dsn) == []
        assert await _index_definitions(dsn) == expected
    finally:
        with contextlib.suppress(Exception):
            await holder.close()
        await watcher.close()
        await db.dispose()


async def test_replicas_migrating_at_once_take_turns(postgres: PostgresDatabases) -> None:
    """Three replicas start on an empty database together. They take turns (an advisory
    lock) and none deadlocks with another's concurrent index build: a replica waiting
    for its turn inside a statement would hold a snapshot the build waits for."""
    url = await postgres.new(migrated=False)
    dbs = [Database(url) for _ in range(3)]
    try:
        await asyncio.wait_for(asyncio.gather(*(migrate.upgrade(db) for db in dbs)), 60)
        assert await migrate.is_migrated(dbs[0])
        assert await _invalid_indexes(_dsn(url)) == []
    finally:
        for db in dbs:
            await db.dispose()


async def test_a_leftover_index_of_another_definition_is_not_installed(
    postgres: PostgresDatabases,
) -> None:
    """A valid index already sits under the temporary name while the old one still
    exists (another run interrupted between its build and its swap, e.g. a downgrade):
    it may be any definition, so the migration rebuilds instead of renaming it in."""
    url = await _new_database(postgres, "0002")
    dsn = _dsn(url)
    expected = await _index_definitions(_dsn(await _new_database(postgres, "0003")))
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "CREATE INDEX ix_uns_notifications_due_new ON uns_notifications (created_at)"
        )
    finally:
        await conn.close()
    db = Database(url)
    try:
        await migrate.upgrade(db, "0003")
    finally:
        await db.dispose()
    assert await _index_definitions(dsn) == expected


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
async def test_expand_and_contract_helpers_add_and_drop_an_index(
    postgres: PostgresDatabases, tmp_path: Path, dialect: str
) -> None:
    """``online_ddl.create_index`` / ``drop_index``, as a later migration would call them,
    on both dialects (concurrently on PostgreSQL), and again (idempotent)."""
    if dialect == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'uns.db'}"
        db = Database(url)
        await migrate.upgrade(db)
        await db.dispose()
    else:
        url = await postgres.new()
    engine = create_async_engine(normalize_url(url))

    def migrate_with(change: Callable[[], None]) -> Callable[[Connection], None]:
        def run(conn: Connection) -> None:
            context = MigrationContext.configure(conn, opts={"transaction_per_migration": True})
            with Operations.context(context), context.begin_transaction(_per_migration=True):
                change()

        return run

    def names(conn: Connection) -> set[str]:
        return {i["name"] for i in inspect(conn).get_indexes("uns_notifications")}

    try:
        for _ in range(2):
            async with engine.connect() as conn:
                await conn.run_sync(
                    migrate_with(
                        lambda: online_ddl.create_index(
                            "ix_uns_notifications_source", "uns_notifications", ["source"]
                        )
                    )
                )
                await conn.commit()
            async with engine.connect() as conn:
                assert "ix_uns_notifications_source" in await conn.run_sync(names)
        for _ in range(2):
            async with engine.connect() as conn:
                await conn.run_sync(
                    migrate_with(
                        lambda: online_ddl.drop_index(
                            "ix_uns_notifications_source", "uns_notifications"
                        )
                    )
                )
                await conn.commit()
            async with engine.connect() as conn:
                assert "ix_uns_notifications_source" not in await conn.run_sync(names)
    finally:
        await engine.dispose()

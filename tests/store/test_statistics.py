"""A new PostgreSQL database gets planner statistics from the server once its
notifications table holds enough rows to matter, not a minute later from autovacuum.

Autovacuum is switched off for the test's tables, so only the server can analyze them.
(SQLite has no cached generic plans to correct: nothing runs there.)
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
from sqlalchemy.engine import make_url

from tests.conftest import PostgresDatabases
from tests.support.server import send_request, start_server
from uns_server.store import statistics
from uns_server.store.db import Database
from uns_server.store.port import Statistics
from uns_server.store.sql_store import SqlStore
from uns_server.workers.statistics import MIN_ROWS, FirstAnalyze

WITHIN = 20.0
PARALLEL = 100


def dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def new_database(postgres: PostgresDatabases) -> tuple[str, asyncpg.Connection]:
    url = await postgres.new()
    conn = await asyncpg.connect(dsn(url))
    for table in statistics.HOT_TABLES:
        await conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
    return url, conn


async def last_analyzed(conn: asyncpg.Connection) -> dict[str, bool]:
    rows = await conn.fetch(
        "SELECT relname, last_analyze IS NOT NULL AS done FROM pg_stat_user_tables"
        " WHERE relname = ANY($1::text[])",
        list(statistics.HOT_TABLES),
    )
    return {r["relname"]: r["done"] for r in rows}


async def test_the_server_analyzes_a_new_database_once_it_has_enough_rows(
    postgres: PostgresDatabases, tmp_path: Path
) -> None:
    url, conn = await new_database(postgres)
    server = await start_server(url, tmp_path, dispatch_enabled=False)
    try:
        alice = server.stub("alice")
        for start in range(0, MIN_ROWS, PARALLEL):
            await asyncio.gather(
                *(
                    alice.SendNotification(send_request(idempotency_key=f"k-{i}"))
                    for i in range(start, start + PARALLEL)
                )
            )
        deadline = asyncio.get_running_loop().time() + WITHIN
        while not all((await last_analyzed(conn)).values()):
            assert asyncio.get_running_loop().time() < deadline, await last_analyzed(conn)
            await asyncio.sleep(0.2)
        # The planner now knows the table's size.
        reltuples = await conn.fetchval(
            "SELECT reltuples FROM pg_class WHERE relname = 'uns_notifications'"
        )
        assert reltuples >= MIN_ROWS
    finally:
        await server.stop()
        await conn.close()


async def test_first_analyze_waits_for_rows_and_runs_once(
    postgres: PostgresDatabases, tmp_path: Path
) -> None:
    url, conn = await new_database(postgres)
    server = await start_server(url, tmp_path, dispatch_enabled=False)  # writes the row
    db = Database(url)
    try:
        worker = FirstAnalyze(SqlStore(db), min_rows=1)
        assert await worker.run_once() is Statistics.TOO_FEW_ROWS
        assert await last_analyzed(conn) == dict.fromkeys(statistics.HOT_TABLES, False)

        await server.stub("alice").SendNotification(send_request(idempotency_key="one"))
        assert await worker.run_once() is Statistics.MISSING  # found missing, analyzed
        assert await last_analyzed(conn) == dict.fromkeys(statistics.HOT_TABLES, True)
        assert await worker.run_once() is Statistics.ANALYZED
        # The loop ends by itself once anyone has analyzed.
        await asyncio.wait_for(worker.run(), WITHIN)
    finally:
        await server.stop()
        await db.dispose()
        await conn.close()

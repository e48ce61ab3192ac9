"""The server's clock is the database's: on PostgreSQL it follows ``clock_timestamp()``
whatever this host's clock says; on SQLite (one host) it is the host clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import text

from tests.conftest import PostgresDatabases
from uns_server.store.clock import DatabaseClock, host_clock
from uns_server.store.db import Database

SKEW = timedelta(minutes=10)
# Far below the skew, far above a loopback round trip: which clock is followed.
TOLERANCE = timedelta(seconds=30)


async def test_the_clock_follows_the_database_not_this_host(db_url: str) -> None:
    db = Database(db_url)
    try:
        clock = DatabaseClock(host_clock({"UNS_TEST_CLOCK_SKEW_SECONDS": str(SKEW.seconds)}))
        assert abs(clock() - datetime.now(UTC) - SKEW) < TOLERANCE  # not synced yet
        await clock.sync(db)
        if db.is_postgres:
            assert clock.synced
            async with db.read() as conn:
                database_now = (await conn.execute(text("SELECT clock_timestamp()"))).scalar_one()
            assert abs(clock() - database_now) < TOLERANCE
        else:
            assert not clock.synced
            assert abs(clock() - datetime.now(UTC) - SKEW) < TOLERANCE
    finally:
        await db.dispose()


async def test_between_syncs_time_moves_with_the_monotonic_clock(
    postgres: PostgresDatabases,
) -> None:
    ticks = [100.0]
    db = Database(await postgres.new())
    try:
        clock = DatabaseClock(monotonic=lambda: ticks[0])
        await clock.sync(db)
        before = clock()
        ticks[0] += 42.5
        assert clock() - before == timedelta(seconds=42.5)
    finally:
        await db.dispose()

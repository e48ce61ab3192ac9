"""The database's clock: the ``now`` every replica judges leases, due times and ack
deadlines by.

Leases (``lease_until``), retries (``next_attempt``) and ack deadlines are written by
one replica and compared by another. Judged on each replica's own clock, a replica
whose clock runs minutes ahead would take over live leases and repeat provider calls;
one running behind would write leases that others see as already expired. So on
PostgreSQL the server's clock is the database's: ``clock_timestamp()``, read every
``SYNC_SECONDS`` and advanced in between by this process's monotonic clock (which
steps of the wall clock do not move). Every query still gets ``now`` as a bound
parameter, computed from it.

Accuracy: half the round trip of the sample (sub-millisecond on a LAN) plus the drift
of the monotonic clock between samples (parts per million): far below any lease.

SQLite is one file on one host, opened by the process itself: its clock and the
server's are the same host clock, so there is nothing to follow (SQLite is
single-host; see docs/deployment.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta

from sqlalchemy import text

from uns_server.store.db import Database

log = logging.getLogger("uns.clock")
Clock = Callable[[], datetime]

SYNC_SECONDS = 10.0
# A sample whose round trip took longer says little about when the database read its
# clock; keep the previous anchor instead.
SYNC_MAX_ROUND_TRIP_SECONDS = 1.0
# A host clock further than this from the database's is logged as a warning.
SKEW_WARNING_SECONDS = 1.0
# Test hook: shifts this process's wall clock, to show that leases do not depend on it.
TEST_SKEW_ENV = "UNS_TEST_CLOCK_SKEW_SECONDS"


def system_now() -> datetime:
    return datetime.now(UTC)


def host_clock(environ: Mapping[str, str] | None = None) -> Clock:
    """This host's wall clock (shifted by ``UNS_TEST_CLOCK_SKEW_SECONDS`` if set: tests
    run replicas whose clocks disagree)."""
    skew = float((environ or {}).get(TEST_SKEW_ENV) or 0)
    if not skew:
        return system_now
    shift = timedelta(seconds=skew)
    return lambda: datetime.now(UTC) + shift


class DatabaseClock:
    """Callable like any clock; follows the database's once ``sync`` has run (before
    that, and on SQLite, it is the host clock)."""

    def __init__(
        self, host: Clock = system_now, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self._host = host
        self._monotonic = monotonic
        self._anchor: tuple[datetime, float] | None = None  # (database time, monotonic)

    def __call__(self) -> datetime:
        if self._anchor is None:
            return self._host()
        at, mono = self._anchor
        return at + timedelta(seconds=self._monotonic() - mono)

    @property
    def synced(self) -> bool:
        return self._anchor is not None

    async def sync(self, db: Database) -> None:
        """Read the database's clock once and follow it (PostgreSQL only)."""
        if not db.is_postgres:
            return
        async with db.read() as conn:
            before = self._monotonic()
            value: datetime = (await conn.execute(text("SELECT clock_timestamp()"))).scalar_one()
            after = self._monotonic()
        if after - before > SYNC_MAX_ROUND_TRIP_SECONDS and self._anchor is not None:
            return
        first = self._anchor is None
        self._anchor = (value.astimezone(UTC), (before + after) / 2)
        if first:
            skew = (self._host() - self()).total_seconds()
            level = logging.WARNING if abs(skew) > SKEW_WARNING_SECONDS else logging.INFO
            log.log(
                level,
                "following the database's clock (this host's is %+.3f s off it)",
                skew,
                extra={"host_clock_skew_seconds": round(skew, 3)},
            )

    async def run(self, db: Database, period: float = SYNC_SECONDS) -> None:
        """Re-sync every ``period`` seconds; an unreachable database keeps the last
        anchor (the monotonic clock carries on from it)."""
        while True:
            await asyncio.sleep(period)
            try:
                await self.sync(db)
            except Exception as exc:
                log.debug("clock sync failed", extra={"error": f"{type(exc).__name__}: {exc}"})

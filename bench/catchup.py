"""catchup: WatchEvents catch-up for one principal among many other tenants' events.

``python -m bench.catchup [--events N] [--url URL]``: a fresh migrated database (SQLite
in a temporary directory unless ``--url`` names an empty PostgreSQL database) gets N
events of other tenants and a few of the reader's, then the catch-up read WatchEvents
makes (``store.events.SqlEventReads.read_after``: sequence > 0, filtered, one page) is timed by
principal and by notification_type, with migration 0014's indexes and without them.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import text

from uns_server.store import migrate
from uns_server.store.db import Database
from uns_server.store.events import SqlEventReads
from uns_server.store.tables import events

PAGE = 500
MINE = 50
REPEATS = 15
INDEXES = ("ix_uns_events_principal_sequence", "ix_uns_events_type_sequence")


async def _populate(db: Database, n: int) -> None:
    now = datetime.now(UTC)
    batch = 20_000
    for start in range(0, n + MINE, batch):
        rows = []
        for i in range(start, min(start + batch, n + MINE)):
            mine = i >= n - MINE and i < n  # the reader's events sit near the end
            rows.append(
                {
                    "id": str(uuid.uuid4()),
                    "notification_id": str(uuid.uuid4()),
                    "principal": "reader" if mine else f"tenant-{i % 97}",
                    "notification_type": "reader.type" if mine else f"other.{i % 13}",
                    "kind": "ACCEPTED",
                    "at": now,
                    "payload": {},
                }
            )
        async with db.write() as tx:
            await tx.conn.execute(events.insert(), rows)
    async with db.write() as tx:
        await tx.conn.execute(text("ANALYZE"))


async def _time(db: Database, **filters: object) -> float:
    samples = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        async with db.read() as conn:
            got = await SqlEventReads(conn).read_after(0, limit=PAGE, **filters)  # type: ignore[arg-type]
        samples.append((time.perf_counter() - started) * 1000)
        assert len(got) == MINE
    return statistics.median(samples)


async def main(n: int, url: str | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(url or f"sqlite:///{Path(tmp) / 'catchup.db'}")
        await migrate.upgrade(db)
        t0 = time.perf_counter()
        await _populate(db, n)
        print(
            f"{db.dialect}: {n:,} other tenants' events + {MINE} of the reader's "
            f"in {time.perf_counter() - t0:.0f} s"
        )
        for label in ("with 0014 indexes", "without them"):
            by_principal = await _time(db, principals={"reader"})
            by_type = await _time(db, notification_type="reader.type")
            print(
                f"  {label}: catch-up p50 by principal {by_principal:.2f} ms, "
                f"by notification_type {by_type:.2f} ms"
            )
            if label == "without them":
                break
            async with db.write() as tx:
                for name in INDEXES:
                    await tx.conn.execute(text(f"DROP INDEX {name}"))
        await db.dispose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.catchup")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--url", default=None)
    args = parser.parse_args()
    asyncio.run(main(args.events, args.url))

"""CPU per statement: SQLAlchemy Core (asyncpg dialect) against raw asyncpg.

The same two hot statements (a select by idempotency key, a one-row event insert),
3,000 times each in one transaction, on a throwaway PostgreSQL; prints the client
process's CPU microseconds per statement. It sized the move of the hot statements
to asyncpg (``uns_server/store/pg.py``, docs/PERFORMANCE.md)::

    .venv/bin/python -m bench.sqlalchemy_overhead
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import UTC, datetime

import asyncpg
from sqlalchemy import insert, select

from tests.support.postgres import PostgresProcess
from uns_server.store import migrate
from uns_server.store.db import Database
from uns_server.store.tables import events, notifications

N = 3000


def _event(i: int) -> dict[str, object]:
    return {
        "id": str(uuid.uuid4()),
        "notification_id": "n",
        "principal": "p",
        "notification_type": "t",
        "kind": "ACCEPTED",
        "at": datetime.now(UTC),
        "payload": {"i": i},
    }


async def _sqlalchemy(url: str, keys: list[str]) -> tuple[float, float]:
    db = Database(url)
    try:
        async with db.writer.connect() as conn, conn.begin():
            start = time.process_time()
            for key in keys:
                await conn.execute(select(notifications).where(notifications.c.key.in_([key])))
            selected = time.process_time() - start
            start = time.process_time()
            for i in range(N):
                await conn.execute(insert(events), [_event(i)])
            inserted = time.process_time() - start
    finally:
        await db.dispose()
    return selected, inserted


async def _asyncpg(url: str, keys: list[str]) -> tuple[float, float]:
    conn = await asyncpg.connect(url.replace("+asyncpg", ""))
    try:
        async with conn.transaction():
            start = time.process_time()
            for key in keys:
                await conn.fetch(
                    "SELECT * FROM uns_notifications WHERE key = ANY($1::varchar[])", [key]
                )
            selected = time.process_time() - start
            start = time.process_time()
            for i in range(N):
                e = _event(i)
                await conn.execute(
                    "INSERT INTO uns_events (id, notification_id, principal, notification_type,"
                    " kind, at, payload) VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb)",
                    *list(e.values())[:6],
                    json.dumps(e["payload"]),
                )
            inserted = time.process_time() - start
    finally:
        await conn.close()
    return selected, inserted


async def main() -> None:
    pg = PostgresProcess()
    pg.start()
    try:
        url = pg.url()
        db = Database(url)
        await migrate.upgrade(db)
        await db.dispose()
        keys = [uuid.uuid4().hex for _ in range(N)]
        sa = await _sqlalchemy(url, keys)
        raw = await _asyncpg(url, keys)
        for label, a, b in (("select by key", sa[0], raw[0]), ("insert event", sa[1], raw[1])):
            print(
                f"{label:14} SQLAlchemy Core {a / N * 1e6:5.0f} us CPU/statement, "
                f"asyncpg {b / N * 1e6:5.0f} us ({a / b:.1f}x)"
            )
    finally:
        pg.stop()


if __name__ == "__main__":
    asyncio.run(main())

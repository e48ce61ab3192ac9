"""One kept autocommit connection for a reader that queries on every wake-up.

The event hub reads after every commit it hears of. On PostgreSQL a pooled read
would add a ping, BEGIN and COMMIT to each; a kept autocommit connection costs one
round trip. A connection that broke since the last read (e.g. PostgreSQL restarted)
is replaced at once, as the pool's idle ping would have.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from uns_server.store.db import Connection, Database

log = logging.getLogger("uns.watch")

T = TypeVar("T")


class KeptReader:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._conn: Connection | None = None

    async def run(self, query: Callable[[Connection], Awaitable[T]]) -> T:
        """``query`` on the kept connection, reconnecting once if it broke."""
        if self._conn is not None:
            try:
                return await self._query(self._conn, query)
            except Exception as exc:
                log.info("event hub connection lost (%s); reconnecting", type(exc).__name__)
        return await self._query(await self._connect(), query)

    async def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with contextlib.suppress(Exception):
                await conn.close()

    async def _query(self, conn: Connection, query: Callable[[Connection], Awaitable[T]]) -> T:
        try:
            return await query(conn)
        except BaseException:
            self._conn = None
            with contextlib.suppress(Exception):
                await conn.invalidate()
            with contextlib.suppress(Exception):
                await conn.close()
            raise

    async def _connect(self) -> Connection:
        conn = await self._db.reader.connect()
        try:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
        except BaseException:
            with contextlib.suppress(Exception):
                await conn.close()
            raise
        self._conn = conn
        return conn

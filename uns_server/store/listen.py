"""Cross-process wake-ups on PostgreSQL: one LISTEN connection per server process.

Writers ``NOTIFY`` in their transaction (``store.db``); PostgreSQL delivers at commit.
The listener turns each notification into the same in-process signal a local commit
fires, so subscribers and idle workers on every replica wake without polling.
The connection is re-established with backoff if it drops; callers keep a slow
fallback poll for the moments in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url

from uns_server.store.db import Database

log = logging.getLogger("uns.listen")
RECONNECT_SECONDS_MAX = 10.0


def asyncpg_dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def listen_forever(db: Database, topics: Sequence[str]) -> None:
    delay = 0.5
    while True:
        conn: Any = None
        try:
            conn = await asyncpg.connect(asyncpg_dsn(db.url))
            lost = asyncio.Event()
            conn.add_termination_listener(lambda _c, lost=lost: lost.set())

            def notified(_conn: Any, _pid: int, channel: str, origin: str) -> None:
                if origin != db.origin:  # our own commits fired in-process already
                    db.fire(channel)

            for topic in topics:
                await conn.add_listener(topic, notified)
            delay = 0.5
            # Anything committed while we were not listening: wake everyone once.
            for topic in topics:
                db.fire(topic)
            await lost.wait()
            log.warning("LISTEN connection lost; reconnecting")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("LISTEN connection failed: %s", type(exc).__name__)
        finally:
            if conn is not None:
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(2):
                        await conn.close()
        await asyncio.sleep(delay)
        delay = min(delay * 2, RECONNECT_SECONDS_MAX)

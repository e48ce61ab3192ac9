"""Cross-process wake-ups on PostgreSQL: one LISTEN connection per server process.

Writers ``NOTIFY`` in their transaction (``store.db``); PostgreSQL delivers at commit.
The listener turns each notification into the same in-process signal a local commit
fires, so subscribers and idle workers on every replica wake without polling.

The connection is re-established with backoff if it drops, to whichever host of a
multi-host URL is writable now (after a failover: the promoted standby; NOTIFY is sent
only on the primary, and LISTEN is refused on a standby). A connection whose server
vanished without closing it (a crashed host, a partition) is found by a periodic
round trip. Callers keep a slow fallback poll for the moments in between.

Whatever a connection attempt fails with (every host refused, a standby not promoted
yet answering ``TargetServerAttributeNotMatched``, a timeout, a protocol error), the
next attempt tries every host again after a backoff that tops out at
``RECONNECT_SECONDS_MAX``; the loop never gives up. Once connected again, every topic
fires once: what was committed meanwhile is caught up. The connection names itself
``LISTEN_APPLICATION_NAME`` (``pg_stat_activity.application_name``), so an operator (or a
test) sees which host each process listens on.

A LISTEN behind a transaction-pooling pgbouncer hears nothing (its server connection goes
back to the pool between statements, and notifications to it are dropped), silently.
``notify_reaches_listen`` is the start-up self-test that finds it: LISTEN on a private
channel over ``session_url``, NOTIFY through the pool, and wait for the delivery.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Sequence
from typing import Any

from uns_server.store.db import Database

log = logging.getLogger("uns.listen")
RECONNECT_SECONDS_MIN = 0.5
RECONNECT_SECONDS_MAX = 10.0
# How often an otherwise silent LISTEN connection proves it is alive, and how long the
# proof may take.
KEEPALIVE_SECONDS = 5.0
KEEPALIVE_TIMEOUT_SECONDS = 5.0
LISTEN_APPLICATION_NAME = "uns-listen"
# How long the start-up self-test waits for its NOTIFY: PostgreSQL delivers at commit,
# in milliseconds; only a LISTEN that can never hear it (a transaction pooler) waits
# this long.
SELF_TEST_SECONDS = 15.0
SELF_TEST_APPLICATION_NAME = "uns-listen-self-test"


async def notify_reaches_listen(db: Database, within: float = SELF_TEST_SECONDS) -> bool:
    """Whether a NOTIFY committed through the pool reaches a LISTEN on ``session_url``
    within ``within`` seconds. Raises what connecting or the statements raise (the
    database is unavailable: try again later); False only when both worked and the
    notification never came."""
    channel = f"uns_self_test_{uuid.uuid4().hex}"
    heard = asyncio.Event()
    conn = await db.connect_driver(application_name=SELF_TEST_APPLICATION_NAME)
    try:
        await conn.add_listener(channel, lambda *_args: heard.set())
        async with db.write() as tx:
            tx.signal(channel)  # NOTIFY at commit, through the pool
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                await heard.wait()
        return heard.is_set()
    finally:
        try:
            async with asyncio.timeout(2):
                await conn.close()
        except Exception:
            conn.terminate()


async def listen_forever(db: Database, topics: Sequence[str]) -> None:
    delay = RECONNECT_SECONDS_MIN
    while True:
        conn: Any = None
        try:
            conn = await db.connect_driver(application_name=LISTEN_APPLICATION_NAME)
            lost = asyncio.Event()
            conn.add_termination_listener(lambda _c, lost=lost: lost.set())

            def notified(_conn: Any, _pid: int, channel: str, origin: str) -> None:
                if origin != db.origin:  # our own commits fired in-process already
                    db.fire(channel)

            for topic in topics:
                await conn.add_listener(topic, notified)
            delay = RECONNECT_SECONDS_MIN
            # Anything committed while we were not listening: wake everyone once.
            for topic in topics:
                db.fire(topic)
            while not lost.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(lost.wait(), KEEPALIVE_SECONDS)
                if not lost.is_set():
                    await conn.fetchval("SELECT 1", timeout=KEEPALIVE_TIMEOUT_SECONDS)
            log.warning("LISTEN connection lost; reconnecting")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("LISTEN connection failed: %s; retrying", type(exc).__name__)
        finally:
            if conn is not None:
                try:
                    async with asyncio.timeout(2):
                        await conn.close()
                except Exception:  # a vanished server does not answer the goodbye
                    conn.terminate()
        await asyncio.sleep(delay)
        delay = min(delay * 2, RECONNECT_SECONDS_MAX)

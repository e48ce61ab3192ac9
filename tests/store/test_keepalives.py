"""PostgreSQL TCP keepalives on every session UNS opens (``db_keepalive_seconds``): a
server cut off by the network loses its sessions, their connection slots and locks,
within about twice the setting instead of holding them for the kernel's hours.

Read back from PostgreSQL itself: ``SHOW`` in UNS's own sessions (the pool's, and a
driver connection like LISTEN's) reports what the server applies to their sockets.
"""

from __future__ import annotations

from pathlib import Path

import asyncpg
from sqlalchemy import text
from sqlalchemy.engine import make_url

from tests.conftest import PostgresDatabases
from tests.support.server import start_server
from uns_server.settings import Settings
from uns_server.store.db import Database

KEEPALIVES = ("tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count")


async def test_the_setting_reaches_every_session_the_server_opens(
    postgres: PostgresDatabases, tmp_path: Path
) -> None:
    server = await start_server(await postgres.new(), tmp_path, db_keepalive_seconds=20)
    try:
        async with server.app.db.read() as conn:
            pooled = [
                (await conn.execute(text(f"SHOW {name}"))).scalar_one() for name in KEEPALIVES
            ]
            user_timeout = (await conn.execute(text("SHOW tcp_user_timeout"))).scalar_one()
        assert pooled == ["20", "5", "4"]
        assert user_timeout == "40000"
        driver = await server.app.db.connect_driver(application_name="uns-keepalive-test")
        try:
            alone = [await driver.fetchval(f"SHOW {name}") for name in KEEPALIVES]
        finally:
            await driver.close()
        assert alone == pooled
    finally:
        await server.stop()


async def test_on_by_default_and_zero_leaves_the_servers_own(postgres: PostgresDatabases) -> None:
    assert Settings().db_keepalive_seconds > 0
    url = await postgres.new()
    off = Database(url, keepalive_seconds=0)
    try:
        async with off.read() as conn:
            idle = (await conn.execute(text("SHOW tcp_keepalives_idle"))).scalar_one()
    finally:
        await off.dispose()
    bare = await asyncpg.connect(make_url(url).set(drivername="postgresql").render_as_string(False))
    try:
        assert idle == await bare.fetchval("SHOW tcp_keepalives_idle")  # the server's own
    finally:
        await bare.close()
    # Through a transaction pooler (another URL for LISTEN) nothing is sent: PgBouncer
    # refuses startup parameters it does not know.
    pooled = Database(url, listen_url=url + "?application_name=x", keepalive_seconds=20)
    try:
        assert pooled.keepalives == {}
    finally:
        await pooled.dispose()

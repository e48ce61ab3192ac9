"""A pooled transaction cannot outlive ``transaction_timeout`` (PostgreSQL 17+).

``idle_in_transaction_session_timeout`` misses a process frozen between asyncpg's
Parse/Describe/Flush and its Bind (the session is then "active"); a SIGSTOPped server
there kept its claimed rows locked until it thawed. ``transaction_timeout`` ends such
a transaction whatever state its session is in.
"""

from __future__ import annotations

import pytest
from sqlalchemy import text

from tests.conftest import PostgresDatabases
from uns_server.store import db as store_db
from uns_server.store.db import Database


async def test_pool_connections_bound_their_transactions(postgres: PostgresDatabases) -> None:
    db = Database(await postgres.new())
    try:
        async with db.read() as conn:
            version = (await conn.execute(text("SHOW server_version_num"))).scalar_one()
            setting = (await conn.execute(text("SHOW transaction_timeout"))).scalar_one()
            idle = (
                await conn.execute(text("SHOW idle_in_transaction_session_timeout"))
            ).scalar_one()
    finally:
        await db.dispose()
    if int(version) < 170000:
        pytest.skip("transaction_timeout needs PostgreSQL 17")
    assert setting == "30s"
    assert idle == "5s"


async def test_a_transaction_past_the_bound_is_ended(
    postgres: PostgresDatabases, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Well below the idle-in-transaction bound (5 s): only transaction_timeout can end it.
    monkeypatch.setattr(store_db, "PG_TRANSACTION_TIMEOUT_MS", 300)
    db = Database(await postgres.new())
    try:
        async with db.read() as conn:
            version = (await conn.execute(text("SHOW server_version_num"))).scalar_one()
        if int(version) < 170000:
            pytest.skip("transaction_timeout needs PostgreSQL 17")
        # A statement that runs past the bound inside a pool transaction: the session
        # is active, not idle, the whole time, and PostgreSQL ends it.
        with pytest.raises(Exception) as ended:
            async with db.write() as w:
                await w.conn.execute(text("SELECT pg_sleep(2)"))
        assert "transaction timeout" in str(ended.value) or "transaction_timeout" in str(
            ended.value
        ), repr(ended.value)
    finally:
        await db.dispose()

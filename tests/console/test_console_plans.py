"""Every console page query can run on an index (PostgreSQL's EXPLAIN with sequential
scans priced out): none reads a whole table, whatever its size."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from uns_server.domain.enums import EventKind
from uns_server.store import console
from uns_server.store.db import Database

pytestmark = pytest.mark.parametrize("db_url", ["postgres"], indirect=True)


async def plan(db: Database, query: Any) -> str:
    async with db.write() as tx:
        await tx.conn.execute(text("SET LOCAL enable_seqscan = off"))
        compiled = query.compile(
            dialect=tx.conn.dialect, compile_kwargs={"render_postcompile": True}
        )
        params = [compiled.params[name] for name in compiled.positiontup]
        raw = await tx.conn.get_raw_connection()
        rows = await raw.driver_connection.fetch(f"EXPLAIN {compiled}", *params)
    return "\n".join(r[0] for r in rows)


async def test_overview_and_triage_queries_use_indexes(db_url: str) -> None:
    db = Database(db_url)
    now = datetime.now(UTC)
    try:
        conditions = console.state_conditions(now, now + timedelta(hours=1), now - timedelta(1))
        queries = {
            name: console.capped_count_query(where, 10) for name, where in conditions.items()
        }
        queries["queue pass"] = console.queue_counts_query(now, 10)
        queries["needs action bucket"] = console.failed_query(True, 500)
        queries["resolved bucket"] = console.failed_query(False, 500)
        queries["recent events"] = console.recent_events_query(
            [EventKind.CHANNEL_ATTEMPT_RESULT], now - timedelta(hours=1), 0
        )
        plans = {name: await plan(db, q) for name, q in queries.items()}
    finally:
        await db.dispose()
    for name, text_ in plans.items():
        assert "Seq Scan" not in text_, f"{name}:\n{text_}"
    assert "ix_uns_notifications_dead_letters" in plans["needs_action"]
    assert "ix_uns_notifications_resolved_failures" in plans["resolved"]
    assert "ix_uns_notifications_status_created_at" in plans["queue pass"]
    assert "ix_uns_notifications_ack_deadline" in plans["acks_due_1h"]

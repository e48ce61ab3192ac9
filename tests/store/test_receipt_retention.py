"""Provider-callback receipts are kept for a week, then pruned by their own worker
(``workers.receipts``), on both dialects."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from uns_server.store.db import Database
from uns_server.store.sql_store import SqlStore
from uns_server.workers.receipts import CALLBACK_RECEIPT_DAYS, ReceiptPruner

NOW = datetime(2026, 3, 1, tzinfo=UTC)
KEEP = timedelta(days=CALLBACK_RECEIPT_DAYS)


async def test_receipts_older_than_a_week_are_pruned(db_url: str) -> None:
    db = Database(db_url)
    store = SqlStore(db)
    try:
        async with store.write() as tx:
            assert await tx.receipts.record("old", "slack", NOW - KEEP - timedelta(1))
            assert await tx.receipts.record("recent", "slack", NOW - KEEP / 2)
        pruner = ReceiptPruner(store, lambda: NOW)
        assert (await pruner.run_once()).receipts == 1
        assert (await pruner.run_once()).receipts == 0
        async with store.write() as tx:
            assert await tx.receipts.record("old", "slack", NOW)  # forgotten
            assert not await tx.receipts.record("recent", "slack", NOW)  # a replay
    finally:
        await db.dispose()

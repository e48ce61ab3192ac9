"""Fixtures for the worker tests: a store on the test's database (both dialects)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from uns_server.store.db import Database
from uns_server.store.sql_store import SqlStore


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[SqlStore]:
    db = Database(db_url)
    try:
        yield SqlStore(db)
    finally:
        await db.dispose()

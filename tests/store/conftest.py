"""The store's tests talk to a ``Database`` on each dialect (``db_url``), and through it
to the store port (``SqlStore``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from uns_server.store.db import Database
from uns_server.store.sql_store import SqlStore


@pytest.fixture
async def db(db_url: str) -> AsyncIterator[Database]:
    database = Database(db_url)
    try:
        yield database
    finally:
        await database.dispose()


@pytest.fixture
def store(db: Database) -> SqlStore:
    """The store port over ``db``: what services and workers are handed."""
    return SqlStore(db)

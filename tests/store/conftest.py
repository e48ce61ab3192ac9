"""The store's tests talk to a ``Database`` on each dialect (``db_url``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from uns_server.store.db import Database


@pytest.fixture
async def db(db_url: str) -> AsyncIterator[Database]:
    database = Database(db_url)
    try:
        yield database
    finally:
        await database.dispose()

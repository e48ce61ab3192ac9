"""Which storage failures answer UNAVAILABLE (retry) rather than INTERNAL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.exc import DisconnectionError, InvalidRequestError
from sqlalchemy.ext.asyncio import create_async_engine

from uns_server.services.availability import storage_unavailable


async def test_a_checkout_that_finds_every_connection_dead_is_unavailable(
    tmp_path: Path,
) -> None:
    """Connections reset over and over (seen under load in the reliability suite): the
    pool's checkout check fails for the pooled connection and for each fresh one, and
    SQLAlchemy gives up with an InvalidRequestError, which is the database being away,
    not a bug."""
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'x.db'}")

    @event.listens_for(engine.sync_engine.pool, "checkout")
    def _dead(*_args: Any) -> None:
        raise DisconnectionError("the server closed it")

    try:
        with pytest.raises(InvalidRequestError) as caught:
            async with engine.connect():
                pass
    finally:
        await engine.dispose()
    assert storage_unavailable(caught.value)
    assert not storage_unavailable(InvalidRequestError("a query that makes no sense"))

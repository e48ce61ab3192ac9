"""Fixtures for the client tests: clients bound to the shared ``server`` fixture."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

import pytest

from tests.clients.helpers import config_for
from tests.support.server import RunningServer
from uns_clients import AsyncClient, Client


@pytest.fixture
async def async_client(server: RunningServer) -> AsyncIterator[Callable[[str], AsyncClient]]:
    """``async_client("alice")``: an AsyncClient for that key, closed after the test."""
    clients: list[AsyncClient] = []

    def make(who: str = "alice") -> AsyncClient:
        clients.append(AsyncClient(config_for(server.target, who)))
        return clients[-1]

    yield make
    for client in clients:
        await client.close()


@pytest.fixture
def sync_client(server: RunningServer) -> Iterator[Callable[[str], Client]]:
    """``sync_client("alice")``: a blocking Client; call it from a thread
    (``asyncio.to_thread``), since the server runs on the test's event loop."""
    clients: list[Client] = []

    def make(who: str = "alice") -> Client:
        clients.append(Client(config_for(server.target, who)))
        return clients[-1]

    yield make
    for client in clients:
        client.close()

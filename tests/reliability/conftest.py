"""Each reliability module owns its PostgreSQL server (so tests may stop, restart or
partition it without touching anyone else's) and gets a fresh database per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import PostgresDatabases
from tests.reliability.report import pytest_runtest_logreport  # noqa: F401 (report hook)
from tests.support.postgres import PostgresProcess


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresProcess]:
    server = PostgresProcess()
    server.start()
    try:
        yield server
    finally:
        server.destroy()


@pytest.fixture(scope="module")
def databases(pg: PostgresProcess) -> PostgresDatabases:
    return PostgresDatabases(pg.url("postgres"))


@pytest.fixture
async def database_url(databases: PostgresDatabases) -> str:
    return await databases.new()

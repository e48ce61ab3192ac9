"""Database URLs: libpq's several-hosts form reaches asyncpg as every host, in order."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import make_url

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

"""Where and how to connect: database URLs and the multi-host connector.

``normalize_url`` turns what an operator writes (plain ``postgresql://`` or
``sqlite://``, libpq's several-hosts form) into the URL SQLAlchemy's async drivers
read; ``WritableHostConnector`` finds the writable host of a multi-host URL.
"""

from __future__ import annotations

import os
import re
import uuid
from typing import Any

from sqlalchemy.engine import make_url

# libpq's several-hosts form: ``scheme://[user[:password]@]host1:port1,host2:port2/db``.
_MULTI_HOST = re.compile(
    r"^(?P<scheme>[A-Za-z0-9+.-]+)://(?P<userinfo>[^@/?]*@)?(?P<hosts>[^/?@]*,[^/?@]*)"
    r"(?P<path>/[^?]*)?(?:\?(?P<query>.*))?$"
)
_HOST_PORT = re.compile(r"^(?P<name>\[[^\]]*\]|[^:\[\]]+)(?::(?P<port>\d+))?$")
PG_DEFAULT_PORT = 5432


def _multi_host_query(url: str) -> str:
    """Rewrite libpq's ``host1:port1,host2:port2`` into the ``?host=h:p&host=h:p`` query
    SQLAlchemy's asyncpg dialect reads (it needs every port spelled out)."""
    m = _MULTI_HOST.match(url)
    if m is None:
        return url
    hosts = []
    for host in m["hosts"].split(","):
        spec = _HOST_PORT.match(host)
        if spec is None:
            raise ValueError(f"cannot read host {host!r} in the database URL")
        hosts.append(f"host={spec['name']}:{spec['port'] or PG_DEFAULT_PORT}")
    query = "&".join([*hosts, *([m["query"]] if m["query"] else [])])
    return f"{m['scheme']}://{m['userinfo'] or ''}{m['path'] or '/'}?{query}"


def normalize_url(url: str) -> str:
    """Accept plain ``postgresql://`` / ``sqlite://`` URLs and pick the async drivers;
    several PostgreSQL hosts may be listed libpq's way (``h1:p1,h2:p2``), and then only
    the current primary is used (``target_session_attrs=read-write`` unless the URL
    says otherwise)."""
    u = make_url(_multi_host_query(url))
    hosts = u.query.get("host")
    if isinstance(hosts, tuple) and len(hosts) > 1 and "target_session_attrs" not in u.query:
        # UNS writes on every connection: of several hosts, only the primary will do.
        u = u.update_query_dict({"target_session_attrs": "read-write"})
    if u.drivername in ("postgresql", "postgres", "postgresql+psycopg2"):
        u = u.set(drivername="postgresql+asyncpg")
    elif u.drivername in ("sqlite", "sqlite+pysqlite"):
        u = u.set(drivername="sqlite+aiosqlite")
    return u.render_as_string(hide_password=False)


# asyncpg's own default bound on connecting.
PG_CONNECT_TIMEOUT_DEFAULT = 60.0


class WritableHostConnector:
    """``asyncpg.connect`` for a URL that lists several hosts (a primary and its
    standbys), in SQLAlchemy's adapter as its ``async_creator_fn``.

    asyncpg tries the hosts in order under *one* connect timeout: a host that vanished
    without a trace (a crashed machine, a partition: nothing refuses the connection)
    used all of it, so the next host was never tried and UNS stayed down after a
    failover. Here each host gets the whole timeout, and the host that accepted last
    (the current primary) is tried first, so only the first connections after a
    failover wait for the vanished one.
    """

    def __init__(self) -> None:
        self.preferred: tuple[str, int] | None = None

    async def __call__(
        self,
        *,
        host: Any = None,
        port: Any = None,
        timeout: float | None = None,  # noqa: ASYNC109 (asyncpg.connect's own parameter)
        **kw: Any,
    ) -> Any:
        import asyncpg

        timeout = timeout or PG_CONNECT_TIMEOUT_DEFAULT
        if not isinstance(host, list):
            return await asyncpg.connect(host=host, port=port, timeout=timeout, **kw)
        addresses = list(zip(host, port, strict=True))
        if self.preferred in addresses:
            addresses.remove(self.preferred)
            addresses.insert(0, self.preferred)
        failure: BaseException | None = None
        for address in addresses:
            try:
                conn = await asyncpg.connect(
                    host=address[0], port=address[1], timeout=timeout, **kw
                )
            except Exception as exc:  # this host will not do now: try the next
                # Refused, unreachable, timed out (OSError); a standby for read-write
                # (TargetServerAttributeNotMatched); starting up, shutting down
                # (CannotConnectNowError); or anything else a host going away mid
                # handshake answers. One host's failure never hides the others.
                failure = exc
                continue
            self.preferred = address
            return conn
        assert failure is not None
        raise failure


def transaction_pooler_args() -> dict[str, Any]:
    """``connect_args`` for a pool behind a transaction-pooling pgbouncer, where each
    transaction may run on another server connection: no statement is kept prepared
    across transactions. asyncpg's cache off sends unnamed statements (Parse, Bind and
    Execute before one Sync: one server connection); SQLAlchemy's off prepares each
    statement again, under a unique name (two clients' statements may meet on one
    server connection, and a name asyncpg numbers per connection would collide).
    pgbouncer 1.18 (Debian 12) keeps no prepared statements; 1.21+ could, with
    ``max_prepared_statements``, but this needs none."""
    return {
        "statement_cache_size": 0,
        "prepared_statement_cache_size": 0,
        "prepared_statement_name_func": _unique_statement_name,
    }


# Unanswered keepalive probes after which PostgreSQL ends a session.
PG_KEEPALIVE_PROBES = 4


def keepalive_settings(seconds: float) -> dict[str, str]:
    """PostgreSQL's TCP keepalives for one of our sessions, as startup settings: the
    server probes a connection silent for ``seconds``, then every ``seconds / 4``, and
    ends the session after ``PG_KEEPALIVE_PROBES`` unanswered probes; data it sent that
    goes unacknowledged as long (``tcp_user_timeout``, PostgreSQL 12+) ends it too. A
    network cut then frees the session's connection slot (and its locks) within about
    twice ``seconds``, not the kernel's default of two hours and more. 0: the
    server's own settings."""
    if seconds <= 0:
        return {}
    idle = max(1, round(seconds))
    return {
        "tcp_keepalives_idle": str(idle),
        "tcp_keepalives_interval": str(max(1, idle // PG_KEEPALIVE_PROBES)),
        "tcp_keepalives_count": str(PG_KEEPALIVE_PROBES),
        "tcp_user_timeout": str(2 * idle * 1000),  # milliseconds
    }


def _unique_statement_name() -> str:
    return f"__uns_{uuid.uuid4().hex}__"


def describe_url(url: str) -> tuple[str, str | None]:
    """How to show ``url`` to an operator (password hidden; a SQLite file as its absolute
    path), and the SQLite file it names (None for PostgreSQL or an in-memory database)."""
    u = make_url(normalize_url(url))
    if u.get_backend_name() == "sqlite":
        path = u.database
        if not path or path == ":memory:" or path.startswith("file:"):
            return u.render_as_string(), None
        absolute = os.path.abspath(path)
        return f"SQLite file {absolute}", absolute
    return u.render_as_string(hide_password=True), None

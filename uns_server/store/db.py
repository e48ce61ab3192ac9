"""The database handle: engines, transactions and the commit signal.

SQLite is single-writer: write transactions go through one connection with
``BEGIN IMMEDIATE`` (so a second process waits on ``busy_timeout`` instead of
failing on lock upgrade), reads use a separate pool of WAL readers. PostgreSQL uses
one pool for both, and begins and ends each transaction on the asyncpg connection
itself (SQLAlchemy's view of it is in autocommit): the statements every accept and
delivery runs then go straight to asyncpg (``store.pg``) inside the same transaction
as the SQLAlchemy Core statements around them.

After every committed write that appended events or made work due, the handle
fires ``on_commit`` callbacks in-process; on PostgreSQL the same transaction also
issues ``NOTIFY`` so that other server processes wake too (``store.listen``).
Connecting (URLs, the multi-host connector) is ``store.connect``.

Size: over 400 lines because the handle, both dialects' transactions and the
lost-connection rules those transactions apply (``_lost_connection``, ``_Losses``,
the pool's checkout checks) are one mechanism, each rule beside the code that uses it.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import (
    DBAPIError,
    DisconnectionError,
    IntegrityError,
    InterfaceError,
    InvalidRequestError,
    OperationalError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from uns_server.store import jsontext, pg
from uns_server.store.connect import (
    PG_CONNECT_TIMEOUT_DEFAULT,
    WritableHostConnector,
    keepalive_settings,
    normalize_url,
    transaction_pooler_args,
)
from uns_server.store.port.values import TOPIC_EVENTS, TOPIC_WORK, FenceMoved
from uns_server.store.space import (
    MIN_FREE_BYTES,
    MIN_FREE_PAGES,
    StorageSpace,
    free_bytes,
    is_storage_full,
)

__all__ = ["TOPIC_EVENTS", "TOPIC_WORK", "Database", "FenceMoved", "WriteTx", "is_storage_full"]

SQLITE_BUSY_TIMEOUT_MS = 30_000
PG_POOL_SIZE_DEFAULT = 10
# Our transactions never wait on anything but their own statements. A session idle inside
# one this long belongs to a frozen or partitioned process: PostgreSQL ends it, so its row
# locks and the event-order lock cannot stall every other server forever. (Sessions of
# that process queued behind the lock are ended one after another, so the stall is a
# small multiple of this.)
PG_IDLE_IN_TRANSACTION_MS = 5_000
# That timeout does not see every frozen process. asyncpg prepares a statement new to its
# connection with Parse, Describe and Flush but no Sync, so until the Bind arrives the
# session is "active", reading from its client, not idle in a transaction: a server
# frozen in that gap (SIGSTOP, a paused VM) kept its claimed rows locked until it thawed.
# ``transaction_timeout`` (PostgreSQL 17+) ends a transaction this old in any state.
# Pool transactions take milliseconds; each statement is also bounded by
# ``command_timeout``. Migrations run on their own connection, without it.
PG_TRANSACTION_TIMEOUT_MS = 30_000
# A pooled PostgreSQL connection is pinged at checkout only after idling this long. One
# in steady use proves itself alive on every transaction; pinging it too (SQLAlchemy's
# pool_pre_ping) cost a round trip per transaction. A connection that breaks while in
# use still fails its statement, which is marked a disconnect (UNAVAILABLE, retry).
PG_PING_AFTER_IDLE_SECONDS = 1.0

# URL options SQLAlchemy's asyncpg adapter consumes itself (asyncpg.connect refuses them).
_SQLALCHEMY_ONLY_PARAMS = (
    "prepared_statement_cache_size",
    "prepared_statement_name_func",
    "async_fallback",
    "async_creator_fn",
)

# The connection the layers above hold: they only hand it back to store functions
# (never call SQLAlchemy on it), so only ``store`` imports SQLAlchemy (pyproject's
# import-linter contracts).
Connection = AsyncConnection


@dataclass
class WriteTx:
    """A write transaction: the connection plus the topics to signal after commit."""

    conn: AsyncConnection
    origin: str  # the NOTIFY payload (``Database.origin``)
    topics: set[str] = field(default_factory=set)
    notified: set[str] = field(default_factory=set)  # NOTIFY already issued (PostgreSQL)
    # PostgreSQL: writes that ride in the events append's statement (``defer``).
    riders: list[tuple[pg.Rider, list[Mapping[str, Any]]]] = field(default_factory=list)
    # ``Database.one_statement``: no BEGIN; the events append is the whole write.
    single: bool = False

    def signal(self, topic: str) -> None:
        self.topics.add(topic)

    def defer(self, rider: pg.Rider, rows: Sequence[Mapping[str, Any]]) -> None:
        """PostgreSQL: write ``rows`` with this transaction's events append, in its
        statement (no round trip of their own), or at commit if nothing is appended.
        For writes that nothing later in the transaction reads back. A rider that must
        change every row (``pg.FencedUpdate``) makes the append raise ``FenceMoved``
        when one did not."""
        if rows:
            self.riders.append((rider, list(rows)))


def notify_calls(topics: Iterable[str], origin: str, first: int = 1) -> tuple[str, list[str]]:
    """``pg_notify(...)`` select items for ``topics`` and their asyncpg parameters
    (numbered from ``$first``): joined into another statement they cost no round trip
    of their own. PostgreSQL delivers the notifications at COMMIT, whenever in the
    transaction they were issued. The payload names the sending process
    (``Database.origin``), whose listener skips them."""
    ordered = sorted(topics)
    calls = ", ".join(f"pg_notify(${first + 1 + i}, ${first})" for i in range(len(ordered)))
    return calls, [origin, *ordered]


# Errors that mean "the database is unreachable right now" (not a bug, not a refusal):
# callers answer UNAVAILABLE or retry the write.
_UNREACHABLE = (OperationalError, InterfaceError, PoolTimeout, ConnectionError, OSError)


def is_unreachable(exc: BaseException) -> bool:
    return (
        isinstance(exc, _UNREACHABLE)
        or (isinstance(exc, DBAPIError) and exc.connection_invalidated)
        or _lost_connection(exc)  # raised by asyncpg itself (``store.pg``, transactions)
        or _checkout_exhausted(exc)
    )


def _checkout_exhausted(exc: BaseException) -> bool:
    """The pool gave up checking out a live connection: every connection it tried, the
    pooled one and the fresh ones after it, was found dead at checkout (connections
    reset over and over). SQLAlchemy says so with this one InvalidRequestError."""
    return isinstance(exc, InvalidRequestError) and str(exc).startswith("This connection is closed")


def is_lost_race(exc: BaseException) -> bool:
    """A unique-index race (two first writers of one key) or a deadlock between two
    transactions locking in different orders: rolled back, and retrying resolves it.
    (asyncpg's errors carry the SQLSTATE; SQLAlchemy's wrap the driver's as ``orig``.)"""
    if isinstance(exc, IntegrityError):
        return True
    sqlstate = getattr(exc, "sqlstate", None) or getattr(getattr(exc, "orig", None), "sqlstate", "")
    return isinstance(sqlstate, str) and (sqlstate.startswith("23") or sqlstate == "40P01")


class Database:
    def __init__(
        self,
        url: str,
        *,
        pool_size: int = PG_POOL_SIZE_DEFAULT,
        command_timeout: float | None = None,
        listen_url: str | None = None,
        keepalive_seconds: float = 0,
    ) -> None:
        """``command_timeout`` bounds every PostgreSQL statement and connection attempt
        client-side, so a silently blackholed database makes calls fail (UNAVAILABLE)
        instead of hanging; None (migrations, maintenance) means no bound.

        ``listen_url`` (PostgreSQL) is where the session-long work connects: the LISTEN
        connection and migrations (a session advisory lock). Another URL than ``url``
        says ``url`` goes through a transaction pooler (pgbouncer ``pool_mode =
        transaction``): the pool then keeps no prepared statements and sends no
        session settings (``connect.transaction_pooler_args``).

        ``keepalive_seconds`` (PostgreSQL, not through a pooler: a pooler refuses the
        settings) turns on the server's TCP keepalives for every session this
        handle opens (``connect.keepalive_settings``); 0 leaves the server's own."""
        self.url = normalize_url(url)
        self.session_url = normalize_url(listen_url) if listen_url else self.url
        self.transaction_pooled = self.session_url != self.url
        self.keepalives = {} if self.transaction_pooled else keepalive_settings(keepalive_seconds)
        self.command_timeout = command_timeout
        self.dialect = make_url(self.url).get_backend_name()
        # Names this process in its NOTIFY payloads. Its own commits already fired their
        # topics in-process; the echo through LISTEN came ~1 ms later and woke the
        # dispatcher and the hub a second time, for nothing.
        self.origin = uuid.uuid4().hex
        self._listeners: dict[str, list[Callable[[], None]]] = {}
        self.connector = WritableHostConnector()  # PostgreSQL: shared by every connection
        self.session_connector = (
            WritableHostConnector() if self.transaction_pooled else self.connector
        )
        # Whether writes fail for want of space (``store.space``): health reads it.
        self.space = StorageSpace(_sqlite_file(self.url), self.dialect)
        if self.dialect == "sqlite":
            self.writer = _sqlite_engine(self.url, immediate=True, pool_size=1)
            self.reader = _sqlite_engine(self.url, immediate=False, pool_size=4)
            # One writer connection; the lock makes waiting explicit (and fair).
            self._write_lock: asyncio.Lock | None = asyncio.Lock()
        elif self.dialect == "postgresql":
            self.writer = create_async_engine(
                self.url,
                pool_size=pool_size,
                max_overflow=pool_size,
                # Multi-row inserts go through asyncpg's executemany: one prepared
                # statement, pipelined. SQLAlchemy's default renders one VALUES list per
                # row count, a new statement for asyncpg to prepare (a round trip) at
                # every group size. Measured: 4.3 instead of 6.1 ms of CPU per accept
                # at 1 producer (docs/PERFORMANCE.md). Nothing here inserts RETURNING.
                use_insertmanyvalues=False,
                json_serializer=jsontext.dumps,
                connect_args=self._pool_connect_args(),
            )
            self._losses = _Losses()
            event.listen(
                self.writer.sync_engine, "handle_error", _classify_lost_connection(self._losses)
            )
            _check_at_checkout(self.writer, PG_PING_AFTER_IDLE_SECONDS, self._losses)
            if not self.transaction_pooled:  # a session setting would land on one
                _bound_transactions(self.writer, PG_TRANSACTION_TIMEOUT_MS)
            self.reader = self.writer
            self._write_lock = None
            # The same pool; SQLAlchemy leaves BEGIN/COMMIT to ``_pg_transaction``.
            self._transactional = self.writer.execution_options(isolation_level="AUTOCOMMIT")
        else:
            raise ValueError(f"unsupported database dialect: {self.dialect}")

    @property
    def is_postgres(self) -> bool:
        return self.dialect == "postgresql"

    def _pool_connect_args(self) -> dict[str, Any]:
        if self.transaction_pooled:
            # pgbouncer refuses startup parameters it does not know; its own
            # ``idle_transaction_timeout`` bounds an idle transaction instead.
            return {**self.pg_connect_args(), **transaction_pooler_args()}
        return self.pg_connect_args(
            idle_in_transaction_session_timeout=str(PG_IDLE_IN_TRANSACTION_MS)
        )

    def pg_connect_args(
        self, *, bound_statements: bool = True, session: bool = False, **server_settings: str
    ) -> dict[str, Any]:
        """``connect_args`` for a SQLAlchemy engine on this database: the connect bound,
        the statement bound unless ``bound_statements`` is off (migrations: an index
        build may take minutes), ``server_settings``, and the connector that finds the
        writable host of a multi-host URL (of ``session_url`` when ``session``)."""
        args: dict[str, Any] = {
            "server_settings": {**self.keepalives, **server_settings},
            # SQLAlchemy's asyncpg adapter calls this instead of asyncpg.connect, with
            # the URL's parameters (what its public ``async_creator`` would not pass).
            "async_creator_fn": self.session_connector if session else self.connector,
            "timeout": self.command_timeout or PG_CONNECT_TIMEOUT_DEFAULT,
        }
        if self.command_timeout and bound_statements:
            args["command_timeout"] = self.command_timeout
        return args

    def driver_params(self) -> dict[str, Any]:
        """``asyncpg.connect`` keywords for ``session_url``: every host of a multi-host
        URL, ``target_session_attrs`` and the other URL options, read the way
        SQLAlchemy's dialect reads them."""
        _args, params = self.writer.dialect.create_connect_args(make_url(self.session_url))
        for name in _SQLALCHEMY_ONLY_PARAMS:
            params.pop(name, None)
        params["timeout"] = self.command_timeout or PG_CONNECT_TIMEOUT_DEFAULT
        return dict(params)

    async def connect_driver(self, **server_settings: str) -> Any:
        """A bare asyncpg connection of its own (LISTEN) on ``session_url``: the
        writable host, the one the pool uses."""
        params = self.driver_params()
        settings = {**self.keepalives, **server_settings}
        if settings:
            params["server_settings"] = {**params.get("server_settings", {}), **settings}
        return await self.session_connector(**params)

    def on_commit(self, topic: str, callback: Callable[[], None]) -> None:
        """Run ``callback`` (must not block) after commits that signalled ``topic``."""
        self._listeners.setdefault(topic, []).append(callback)

    def fire(self, topic: str) -> None:
        for callback in self._listeners.get(topic, ()):
            callback()

    @asynccontextmanager
    async def write(self) -> AsyncIterator[WriteTx]:
        """A write transaction; commits on success, rolls back on any exception. A
        failure for want of space marks the storage full (``space``; inline, not one
        more context manager: every accept and delivery runs this)."""
        try:
            if self.is_postgres:
                async with (
                    self._transactional.connect() as conn,
                    _pg_transaction(conn, self._losses) as driver,
                ):
                    tx = WriteTx(conn, self.origin)
                    yield tx
                    for insert, rows in tx.riders:  # no events append took them
                        await insert.executemany(driver, rows)
                    unsent = tx.topics - tx.notified
                    if unsent:
                        calls, params = notify_calls(unsent, self.origin)
                        await driver.execute(f"SELECT {calls}", *params)
            else:
                lock: AbstractAsyncContextManager[Any] = self._write_lock or nullcontext()
                async with lock, self.writer.connect() as conn:
                    tx = WriteTx(conn, self.origin)
                    async with conn.begin():
                        yield tx
        except Exception as exc:
            self.space.failed(exc)
            raise
        if self.space.full and self.is_postgres:
            self.space.room_again("a write committed")
        for topic in tx.topics:
            self.fire(topic)

    async def check_room(self) -> None:
        """While the storage is full: has space been freed? SQLite: the file's
        filesystem has ``MIN_FREE_BYTES`` free and the file may grow by
        ``MIN_FREE_PAGES`` (``max_page_count``). PostgreSQL's disk is not ours to
        see: there the next write that commits says so (``write``)."""
        path = self.space.path
        if not self.space.full or path is None:
            return
        free = free_bytes(path)
        if free < MIN_FREE_BYTES:
            return
        async with self.write() as tx:
            pragmas = [
                (await tx.conn.exec_driver_sql(f"PRAGMA {name}")).scalar_one()
                for name in ("page_count", "max_page_count", "freelist_count")
            ]
        pages, most, unused = (int(v) for v in pragmas)
        if most - pages + unused >= MIN_FREE_PAGES:
            self.space.room_again(f"SQLite file {path}: {free} bytes free on its filesystem")

    @asynccontextmanager
    async def one_statement(self) -> AsyncIterator[WriteTx]:
        """PostgreSQL: a write that is one statement, its events append with every
        other write riding in it (``WriteTx.defer``), sent without BEGIN or COMMIT.
        PostgreSQL runs a statement outside a transaction block as a transaction of its
        own, committed once it has run (its advisory lock held and its NOTIFYs sent
        until then): atomic, in one round trip. The caller sends nothing else on
        ``tx.conn`` (it would commit on its own), and its riders must write all or
        nothing (``store.events.SqlEvents.append`` checks; a gate that held the rows back wrote
        nothing and raises ``FenceMoved``)."""
        if not self.is_postgres:
            raise RuntimeError("one-statement writes are PostgreSQL's")
        try:
            async with self._transactional.connect() as conn:
                driver: Any = (await conn.get_raw_connection()).driver_connection
                tx = WriteTx(conn, self.origin, single=True)
                try:
                    yield tx
                    if tx.riders or tx.topics - tx.notified:
                        raise RuntimeError("a one-statement write ends with its events append")
                except BaseException as exc:
                    if driver.is_closed() or _lost_connection(exc) or isinstance(exc, TimeoutError):
                        self._losses.mark()
                        await conn.invalidate()
                    raise
        except Exception as exc:
            self.space.failed(exc)
            raise
        if self.space.full:
            self.space.room_again("a write committed")
        for topic in tx.topics:
            self.fire(topic)

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        if self.is_postgres:
            async with self._transactional.connect() as conn, _pg_transaction(conn, self._losses):
                yield conn
        else:
            async with self.reader.connect() as conn, conn.begin():
                yield conn

    async def ping(self) -> None:
        async with self.read() as conn:
            await conn.execute(text("SELECT 1"))

    async def dispose(self) -> None:
        await self.writer.dispose()
        if self.reader is not self.writer:
            await self.reader.dispose()


def _lost_connection(exc: BaseException | None) -> bool:
    """Does this asyncpg failure mean the connection (or the server) is gone?

    SQLAlchemy's asyncpg dialect only recognises "connection is closed"; a server that is
    shutting down (57P01/57P02/57P03), a session it ended (25P03), a connection dropped
    mid-operation (class 08) or a host that is no longer the primary (25006) surfaced as
    a plain DBAPIError, which callers could not tell from a bug.
    """
    import asyncpg.exceptions as pg

    lost = (
        pg.PostgresConnectionError,  # class 08, and "closed in the middle of operation"
        pg.AdminShutdownError,
        pg.CrashShutdownError,
        pg.CannotConnectNowError,
        pg.IdleInTransactionSessionTimeoutError,  # 25P03: the server ended our session
        # 25006 on a write: this host is a standby (now). Nothing was written; the
        # connection is dropped so the next one may reach the primary (a DNS name that
        # a failover moves, a promoted standby).
        pg.ReadOnlySQLTransactionError,
        # The protocol in a state it cannot leave: seen when the server's termination
        # notice arrives between two statements. The connection is unusable either way.
        pg.InternalClientError,
        ConnectionError,
    )
    seen = 0
    while exc is not None and seen < 10:  # the driver error is the adapter error's cause
        if isinstance(exc, lost):
            return True
        if isinstance(exc, pg.InterfaceError) and "connection is closed" in str(exc):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


@dataclass
class _Losses:
    """When a pooled connection was last found dead. Its siblings, opened before, most
    likely went with it: to a server that vanished without closing them (a crashed
    host, a partition), each would hold one more request for the whole statement
    timeout. So they are replaced at their next checkout instead. (A statement that
    merely ran past the timeout on a live server costs the pool a round of
    reconnects: rare, and cheap next to the alternative.)"""

    at: float = float("-inf")

    def mark(self) -> None:
        self.at = time.monotonic()


@asynccontextmanager
async def _pg_transaction(conn: AsyncConnection, losses: _Losses) -> AsyncIterator[Any]:
    """A transaction begun on ``conn``'s asyncpg connection, which it yields. Committed
    on success, rolled back on any exception; a connection that broke (or whose
    rollback failed) is invalidated, so the pool replaces it. One whose statement ran
    past the client-side timeout is not asked to roll back (the server may be gone:
    that would wait for the timeout again); closing it ends the transaction as well."""
    driver: Any = (await conn.get_raw_connection()).driver_connection
    transaction = driver.transaction()
    try:
        await transaction.start()
        yield driver
    except BaseException as exc:
        broken = driver.is_closed() or _lost_connection(exc) or isinstance(exc, TimeoutError)
        if not broken:
            try:
                await transaction.rollback()
            except BaseException:
                broken = True
        if broken:
            losses.mark()
            await conn.invalidate()
        raise
    try:
        await transaction.commit()
    except BaseException:
        losses.mark()
        await conn.invalidate()
        raise


def _classify_lost_connection(losses: _Losses) -> Callable[[Any], None]:
    def classify(context: Any) -> None:
        # A disconnect invalidates the pooled connection and marks the raised DBAPIError
        # ``connection_invalidated``: the API answers UNAVAILABLE (retry), not UNKNOWN.
        if not context.is_disconnect and _lost_connection(context.original_exception):
            context.is_disconnect = True
        if context.is_disconnect:
            losses.mark()

    return classify


def _bound_transactions(engine: AsyncEngine, timeout_ms: int) -> None:
    """``transaction_timeout`` on every pooled connection of a server that has it (17+;
    an older server would refuse the setting at connect). Set outside any transaction,
    on the driver connection, so no rollback undoes it."""

    @event.listens_for(engine.sync_engine.pool, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        driver = dbapi_connection.driver_connection
        if driver.get_server_version().major >= 17:
            dbapi_connection.run_async(
                lambda conn: conn.execute(f"SET transaction_timeout = {timeout_ms}")
            )


def _check_at_checkout(engine: AsyncEngine, idle_seconds: float, losses: _Losses) -> None:
    """Free checks of a pooled connection at checkout (its socket state; whether it is
    older than a connection found dead), then SQLAlchemy's documented pessimistic ping
    only for connections that sat idle. A failed check raises DisconnectionError, so the
    pool drops that connection and checks out another (a fresh one after a database
    restart or failover)."""
    pool = engine.sync_engine.pool

    @event.listens_for(pool, "connect")
    def _on_connect(_dbapi_connection: Any, record: Any) -> None:
        record.info["opened_at"] = time.monotonic()

    @event.listens_for(pool, "checkin")
    def _on_checkin(_dbapi_connection: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(pool, "checkout")
    def _on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        # A connection whose server already closed it (a restart, a failover: the old
        # primary's sessions all end at once) is known dead without a round trip.
        if dbapi_connection.driver_connection.is_closed():
            raise DisconnectionError("pooled connection was closed by the server")
        if record.info.get("opened_at", float("-inf")) < losses.at:
            raise DisconnectionError("pooled connection is older than one found dead")
        idle_since = record.info.get("idle_since")
        if idle_since is None or time.monotonic() - idle_since < idle_seconds:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:
            raise DisconnectionError(f"idle connection failed its ping: {exc}") from exc


def _sqlite_file(url: str) -> str | None:
    """The SQLite database file ``url`` names (None: PostgreSQL, in memory, a URI)."""
    u = make_url(url)
    path = u.database
    if u.get_backend_name() != "sqlite" or not path or path == ":memory:":
        return None
    return None if path.startswith("file:") else os.path.abspath(path)


def _private_sqlite_file(url: str) -> None:
    """Create a missing database file 0600 before SQLite does (it would follow the
    umask, usually 0644: world-readable). SQLite gives the ``-wal`` and ``-shm`` files
    the database file's own mode, so they are private too. An existing file keeps its
    mode (the operator's choice)."""
    path = make_url(url).database
    if not path or path == ":memory:" or path.startswith("file:"):
        return
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    except OSError:
        return  # SQLite reports the unusable path itself, in its own words
    os.fchmod(fd, 0o600)  # whatever the umask
    os.close(fd)


def _sqlite_engine(url: str, *, immediate: bool, pool_size: int) -> AsyncEngine:
    _private_sqlite_file(url)
    engine = create_async_engine(
        url, pool_size=pool_size, max_overflow=0, json_serializer=jsontext.dumps
    )

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let us emit BEGIN ourselves (pysqlite's implicit BEGIN is DEFERRED).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine

"""``SqlStore``: the store port (``store.port.Store``) on the SQL database
(``store.db.Database``, SQLite or PostgreSQL). Its transactions are the database's,
their executors the SQL ports bound to them: one class per port (``store.bound``), in
the query module that holds its statements (``dispatch.SqlDispatch``,
``jobs.SqlJobs``, ``people.SqlPeople``...)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection

from uns_server.domain.records import Event
from uns_server.store import db as database
from uns_server.store.acks import SqlAcks
from uns_server.store.api_keys import SqlApiKeyReads, SqlApiKeys
from uns_server.store.audit import SqlAudit, SqlAuditReads
from uns_server.store.console import SqlConsoleReads
from uns_server.store.console_sessions import SqlConsoleSessionReads, SqlConsoleSessions
from uns_server.store.db import Database, WriteTx
from uns_server.store.dispatch import SqlDispatch, SqlDispatchReads
from uns_server.store.events import SqlEventReads, SqlEvents
from uns_server.store.followups import SqlFollowUpReads, SqlFollowUps
from uns_server.store.heartbeats import SqlHeartbeatReads, SqlHeartbeats
from uns_server.store.jobs import SqlJobReads, SqlJobs
from uns_server.store.kept_reader import KeptReader
from uns_server.store.links import SqlActionLinkReads, SqlActionLinks, SqlReceipts
from uns_server.store.maintenance import SqlMaintenance, SqlMaintenanceReads
from uns_server.store.moves import SqlMoves
from uns_server.store.notifications import SqlNotificationReads, SqlNotifications
from uns_server.store.people import SqlPeople, SqlPeopleReads
from uns_server.store.policies import SqlPolicies, SqlPolicyReads
from uns_server.store.queue import SqlQueue
from uns_server.store.retention import SqlRetention, SqlRetentionReads
from uns_server.store.statistics import SqlPlannerStatistics

T = TypeVar("T")


# A port is built when the caller reaches for it (a slotted object holding the
# connection): a transaction pays for the two or three it uses, not for all of them.


class SqlReadTransaction:
    __slots__ = ("_conn",)

    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    @property
    def dispatch(self) -> SqlDispatchReads:
        return SqlDispatchReads(self._conn)

    @property
    def follow_ups(self) -> SqlFollowUpReads:
        return SqlFollowUpReads(self._conn)

    @property
    def jobs(self) -> SqlJobReads:
        return SqlJobReads(self._conn)

    @property
    def events(self) -> SqlEventReads:
        return SqlEventReads(self._conn)

    @property
    def notifications(self) -> SqlNotificationReads:
        return SqlNotificationReads(self._conn)

    @property
    def retention(self) -> SqlRetentionReads:
        return SqlRetentionReads(self._conn)

    @property
    def queue(self) -> SqlQueue:
        return SqlQueue(self._conn)

    @property
    def statistics(self) -> SqlPlannerStatistics:
        return SqlPlannerStatistics(self._conn)

    @property
    def audit(self) -> SqlAuditReads:
        return SqlAuditReads(self._conn)

    @property
    def people(self) -> SqlPeopleReads:
        return SqlPeopleReads(self._conn)

    @property
    def policies(self) -> SqlPolicyReads:
        return SqlPolicyReads(self._conn)

    @property
    def api_keys(self) -> SqlApiKeyReads:
        return SqlApiKeyReads(self._conn)

    @property
    def action_links(self) -> SqlActionLinkReads:
        return SqlActionLinkReads(self._conn)

    @property
    def maintenance(self) -> SqlMaintenanceReads:
        return SqlMaintenanceReads(self._conn)

    @property
    def heartbeats(self) -> SqlHeartbeatReads:
        return SqlHeartbeatReads(self._conn)

    @property
    def console(self) -> SqlConsoleReads:
        return SqlConsoleReads(self._conn)

    @property
    def console_sessions(self) -> SqlConsoleSessionReads:
        return SqlConsoleSessionReads(self._conn)


class SqlWriteTransaction:
    __slots__ = ("_conn", "_tx")

    def __init__(self, tx: WriteTx) -> None:
        self._tx = tx
        self._conn = tx.conn

    @property
    def dispatch(self) -> SqlDispatch:
        return SqlDispatch(self._tx)

    @property
    def moves(self) -> SqlMoves:
        return SqlMoves(self._conn)

    @property
    def follow_ups(self) -> SqlFollowUps:
        return SqlFollowUps(self._conn)

    @property
    def jobs(self) -> SqlJobs:
        return SqlJobs(self._conn)

    @property
    def acks(self) -> SqlAcks:
        return SqlAcks(self._conn)

    @property
    def events(self) -> SqlEvents:
        return SqlEvents(self._tx)

    @property
    def audit(self) -> SqlAudit:
        return SqlAudit(self._tx)

    @property
    def notifications(self) -> SqlNotifications:
        return SqlNotifications(self._tx)

    @property
    def retention(self) -> SqlRetention:
        return SqlRetention(self._conn)

    @property
    def receipts(self) -> SqlReceipts:
        return SqlReceipts(self._conn)

    @property
    def queue(self) -> SqlQueue:
        return SqlQueue(self._conn)

    @property
    def statistics(self) -> SqlPlannerStatistics:
        return SqlPlannerStatistics(self._conn)

    @property
    def people(self) -> SqlPeople:
        return SqlPeople(self._conn)

    @property
    def policies(self) -> SqlPolicies:
        return SqlPolicies(self._conn)

    @property
    def api_keys(self) -> SqlApiKeys:
        return SqlApiKeys(self._conn)

    @property
    def action_links(self) -> SqlActionLinks:
        return SqlActionLinks(self._conn)

    @property
    def maintenance(self) -> SqlMaintenance:
        return SqlMaintenance(self._conn)

    @property
    def heartbeats(self) -> SqlHeartbeats:
        return SqlHeartbeats(self._conn)

    @property
    def console(self) -> SqlConsoleReads:
        return SqlConsoleReads(self._conn)

    @property
    def console_sessions(self) -> SqlConsoleSessions:
        return SqlConsoleSessions(self._conn)

    def signal(self, topic: str) -> None:
        self._tx.signal(topic)


class SqlEventTail:
    """On PostgreSQL one kept autocommit connection (``kept_reader``); on SQLite a read
    transaction from the small in-process reader pool per read."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._kept = KeptReader(db) if db.is_postgres else None

    async def _read(self, query: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        if self._kept is None:
            async with self._db.read() as conn:
                return await query(conn)
        return await self._kept.run(query)

    async def high_water(self) -> int:
        return await self._read(lambda conn: SqlEventReads(conn).high_water())

    async def read_after(self, after_sequence: int, *, limit: int) -> Sequence[Event]:
        return await self._read(
            lambda conn: SqlEventReads(conn).read_after(after_sequence, limit=limit)
        )

    async def close(self) -> None:
        if self._kept is not None:
            await self._kept.close()


class SqlStore:
    """The port over one ``Database`` (which the composition root also keeps for
    start-up, health and LISTEN)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    @asynccontextmanager
    async def read(self) -> AsyncIterator[SqlReadTransaction]:
        async with self.db.read() as conn:
            yield SqlReadTransaction(conn)

    @asynccontextmanager
    async def write(self) -> AsyncIterator[SqlWriteTransaction]:
        async with self.db.write() as tx:
            yield SqlWriteTransaction(tx)

    @asynccontextmanager
    async def one_statement(self) -> AsyncIterator[SqlWriteTransaction]:
        async with self.db.one_statement() as tx:
            yield SqlWriteTransaction(tx)

    @property
    def writes_in_one_statement(self) -> bool:
        return self.db.is_postgres

    def on_commit(self, topic: str, callback: Callable[[], None]) -> None:
        self.db.on_commit(topic, callback)

    def event_tail(self) -> SqlEventTail:
        return SqlEventTail(self.db)

    @property
    def settles_with_events(self) -> bool:
        return self.db.is_postgres

    def is_unreachable(self, exc: BaseException) -> bool:
        return database.is_unreachable(exc)

    def is_lost_race(self, exc: BaseException) -> bool:
        return database.is_lost_race(exc)


if TYPE_CHECKING:  # mypy checks that the SQL store implements the port
    from uns_server.store import port

    def _conforms(store: SqlStore) -> port.Store:
        return store

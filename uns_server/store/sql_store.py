"""``SqlStore``: the store port (``store.port.Store``) on the SQL database
(``store.db.Database``, SQLite or PostgreSQL). Its transactions are the database's,
their executors the SQL ports (``sql_ports``, ``sql_upkeep``) bound to them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection

from uns_server.domain.records import Event
from uns_server.store import db as database
from uns_server.store import events
from uns_server.store.db import Database, WriteTx
from uns_server.store.kept_reader import KeptReader
from uns_server.store.sql_directory import (
    SqlActionLinkReads,
    SqlActionLinks,
    SqlApiKeyReads,
    SqlApiKeys,
    SqlPeople,
    SqlPeopleReads,
    SqlPolicies,
    SqlPolicyReads,
)
from uns_server.store.sql_ports import (
    SqlAcks,
    SqlAudit,
    SqlAuditReads,
    SqlDispatch,
    SqlDispatchReads,
    SqlEventReads,
    SqlEvents,
    SqlFollowUpReads,
    SqlFollowUps,
    SqlMessageUpdateReads,
    SqlMessageUpdates,
    SqlMoves,
    SqlNotificationReads,
    SqlNotifications,
)
from uns_server.store.sql_upkeep import (
    SqlPlannerStatistics,
    SqlQueue,
    SqlReceipts,
    SqlRetention,
    SqlRetentionReads,
)

T = TypeVar("T")


class SqlReadTransaction:
    __slots__ = (
        "action_links",
        "api_keys",
        "audit",
        "dispatch",
        "events",
        "follow_ups",
        "message_updates",
        "notifications",
        "people",
        "policies",
        "queue",
        "retention",
        "statistics",
    )

    def __init__(self, conn: AsyncConnection) -> None:
        self.dispatch = SqlDispatchReads(conn)
        self.follow_ups = SqlFollowUpReads(conn)
        self.message_updates = SqlMessageUpdateReads(conn)
        self.events = SqlEventReads(conn)
        self.notifications = SqlNotificationReads(conn)
        self.retention = SqlRetentionReads(conn)
        self.queue = SqlQueue(conn)
        self.statistics = SqlPlannerStatistics(conn)
        self.audit = SqlAuditReads(conn)
        self.people = SqlPeopleReads(conn)
        self.policies = SqlPolicyReads(conn)
        self.api_keys = SqlApiKeyReads(conn)
        self.action_links = SqlActionLinkReads(conn)


class SqlWriteTransaction:
    __slots__ = (
        "_tx",
        "acks",
        "action_links",
        "api_keys",
        "audit",
        "dispatch",
        "events",
        "follow_ups",
        "message_updates",
        "moves",
        "notifications",
        "people",
        "policies",
        "queue",
        "receipts",
        "retention",
        "statistics",
    )

    def __init__(self, tx: WriteTx) -> None:
        conn = tx.conn
        self._tx = tx
        self.dispatch = SqlDispatch(tx)
        self.moves = SqlMoves(conn)
        self.follow_ups = SqlFollowUps(conn)
        self.message_updates = SqlMessageUpdates(conn)
        self.acks = SqlAcks(conn)
        self.events = SqlEvents(tx)
        self.audit = SqlAudit(tx)
        self.notifications = SqlNotifications(tx)
        self.retention = SqlRetention(conn)
        self.receipts = SqlReceipts(conn)
        self.queue = SqlQueue(conn)
        self.statistics = SqlPlannerStatistics(conn)
        self.people = SqlPeople(conn)
        self.policies = SqlPolicies(conn)
        self.api_keys = SqlApiKeys(conn)
        self.action_links = SqlActionLinks(conn)

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
        return await self._read(events.high_water)

    async def read_after(self, after_sequence: int, *, limit: int) -> Sequence[Event]:
        return await self._read(lambda conn: events.read_after(conn, after_sequence, limit=limit))

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

"""``SqlStore``: the store port (``store.port.Store``) on the SQL database
(``store.db.Database``, SQLite or PostgreSQL). Its transactions are the database's,
their executors the SQL ports (``sql_ports``, ``sql_upkeep``) bound to them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from sqlalchemy.ext.asyncio import AsyncConnection

from uns_server.store import db as database
from uns_server.store.db import Database, WriteTx
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
    SqlPeopleReads,
    SqlPlannerStatistics,
    SqlQueue,
    SqlReceiptReads,
    SqlReceipts,
    SqlRetention,
    SqlRetentionReads,
)


class SqlReadTransaction:
    __slots__ = (
        "audit",
        "dispatch",
        "events",
        "follow_ups",
        "message_updates",
        "notifications",
        "people",
        "queue",
        "receipts",
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
        self.receipts = SqlReceiptReads(conn)
        self.people = SqlPeopleReads(conn)


class SqlWriteTransaction:
    __slots__ = (
        "_tx",
        "acks",
        "audit",
        "dispatch",
        "events",
        "follow_ups",
        "message_updates",
        "moves",
        "notifications",
        "people",
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
        self.people = SqlPeopleReads(conn)

    def signal(self, topic: str) -> None:
        self._tx.signal(topic)


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

"""The store as the layers above see it: transactions whose executor has one typed
port per concern (``tx.dispatch.claim(...)``, ``tx.events.append(...)``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from uns_server.domain.records import Event
from uns_server.store.port.console import ConsoleReads, ConsoleSessionReads, ConsoleSessions
from uns_server.store.port.delivery import (
    Acks,
    Dispatch,
    DispatchReads,
    FollowUpReads,
    FollowUps,
    Moves,
)
from uns_server.store.port.directory import (
    ActionLinkReads,
    ActionLinks,
    ApiKeyReads,
    ApiKeys,
    People,
    PeopleReads,
    Policies,
    PolicyReads,
)
from uns_server.store.port.heartbeats import HeartbeatReads, Heartbeats
from uns_server.store.port.jobs import JobReads, Jobs
from uns_server.store.port.maintenance import Maintenance, MaintenanceReads
from uns_server.store.port.notifications import NotificationReads, Notifications
from uns_server.store.port.timeline import Audit, AuditReads, EventReads, Events
from uns_server.store.port.upkeep import (
    PlannerStatistics,
    Queue,
    Receipts,
    Retention,
    RetentionReads,
)


class ReadTransaction(Protocol):
    """A read transaction: one consistent snapshot (read-only ports)."""

    @property
    def dispatch(self) -> DispatchReads: ...
    @property
    def follow_ups(self) -> FollowUpReads: ...
    @property
    def jobs(self) -> JobReads: ...
    @property
    def events(self) -> EventReads: ...
    @property
    def notifications(self) -> NotificationReads: ...
    @property
    def retention(self) -> RetentionReads: ...
    @property
    def queue(self) -> Queue: ...
    @property
    def statistics(self) -> PlannerStatistics: ...
    @property
    def audit(self) -> AuditReads: ...
    @property
    def people(self) -> PeopleReads: ...
    @property
    def policies(self) -> PolicyReads: ...
    @property
    def api_keys(self) -> ApiKeyReads: ...
    @property
    def action_links(self) -> ActionLinkReads: ...
    @property
    def maintenance(self) -> MaintenanceReads: ...
    @property
    def heartbeats(self) -> HeartbeatReads: ...
    @property
    def console(self) -> ConsoleReads: ...
    @property
    def console_sessions(self) -> ConsoleSessionReads: ...


class WriteTransaction(ReadTransaction, Protocol):
    """A write transaction: committed when its block ends, rolled back on any
    exception; the topics it signals fire after the commit."""

    @property
    def dispatch(self) -> Dispatch: ...
    @property
    def moves(self) -> Moves: ...
    @property
    def follow_ups(self) -> FollowUps: ...
    @property
    def jobs(self) -> Jobs: ...
    @property
    def acks(self) -> Acks: ...
    @property
    def events(self) -> Events: ...
    @property
    def audit(self) -> Audit: ...
    @property
    def notifications(self) -> Notifications: ...
    @property
    def retention(self) -> Retention: ...
    @property
    def receipts(self) -> Receipts: ...
    @property
    def people(self) -> People: ...
    @property
    def policies(self) -> Policies: ...
    @property
    def api_keys(self) -> ApiKeys: ...
    @property
    def action_links(self) -> ActionLinks: ...
    @property
    def maintenance(self) -> Maintenance: ...
    @property
    def heartbeats(self) -> Heartbeats: ...
    @property
    def console_sessions(self) -> ConsoleSessions: ...

    def signal(self, topic: str) -> None:
        """Fire ``topic`` after commit (in process; NOTIFY on PostgreSQL)."""
        ...


class EventTail(Protocol):
    """Reads of the event timeline outside any transaction, for the one reader that
    reads after every commit it hears of (the watch hub): on PostgreSQL over one kept
    connection, so a wake-up costs one round trip."""

    async def high_water(self) -> int:
        """The greatest committed sequence (0 for an empty timeline)."""
        ...

    async def read_after(self, after_sequence: int, *, limit: int) -> Sequence[Event]:
        """Events with sequence > ``after_sequence``, oldest first."""
        ...

    async def close(self) -> None:
        """Release the kept connection."""
        ...


class Store(Protocol):
    """Where services and workers get their transactions; built once by the
    composition root and handed to each."""

    def read(self) -> AbstractAsyncContextManager[ReadTransaction]: ...
    def write(self) -> AbstractAsyncContextManager[WriteTransaction]: ...

    def on_commit(self, topic: str, callback: Callable[[], None]) -> None:
        """Run ``callback`` (must not block) after commits that signalled ``topic``."""
        ...

    def event_tail(self) -> EventTail:
        """A reader of the newest events, for the watch hub."""
        ...

    @property
    def writes_in_one_statement(self) -> bool:
        """Does ``one_statement`` work here (PostgreSQL)?"""
        ...

    def one_statement(self) -> AbstractAsyncContextManager[WriteTransaction]:
        """A write sent as one statement, without BEGIN or COMMIT: its events append,
        with every other write riding in it (``Notifications.insert_new_before_events``),
        is the whole write, atomic in one round trip. Nothing else may be sent in it,
        and its riders write all or nothing (a gate that held them back wrote nothing
        and raises ``FenceMoved``). Only where ``writes_in_one_statement``."""
        ...

    @property
    def settles_with_events(self) -> bool:
        """Can ``Dispatch.settle_leased_with_events`` be used (one statement: the
        settlement rides in the events append)?"""
        ...

    def is_unreachable(self, exc: BaseException) -> bool:
        """Does ``exc`` mean the database is unreachable right now (retry, UNAVAILABLE)?"""
        ...

    def is_lost_race(self, exc: BaseException) -> bool:
        """Does ``exc`` mean the transaction lost a race (a unique key, a deadlock) and
        retrying resolves it?"""
        ...

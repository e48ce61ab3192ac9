"""The notification rows and their dedup windows: what the send path writes and
everything reads."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Protocol

from uns_server.domain.admission import DedupWindowTake, WindowOwner
from uns_server.domain.policy import PolicyRevision
from uns_server.domain.records import DedupWindow, Notification


class NotificationReads(Protocol):
    async def get(self, notification_id: str) -> Notification | None:
        """One notification as it stands."""
        ...

    async def by_key(self, key: str) -> Notification | None:
        """The notification holding this idempotency key."""
        ...

    async def list_page(
        self,
        *,
        conditions: Sequence[tuple[str, str | bool]],
        after: tuple[datetime, str] | None,
        limit: int,
    ) -> Sequence[Notification]:
        """Newest first (keyset on (created_at, id), after ``after``), each condition a
        field of ``NOTIFICATION_FILTER_FIELDS`` equal to a value as stored (a status
        name, ``dead_letter``'s bool, a string)."""
        ...

    async def locked_dedup_window(self, key: str) -> DedupWindow | None:
        """Intake's read of the window of ``key``, locked until commit."""
        ...

    async def window_owner(self, owner_id: str) -> WindowOwner | None:
        """The status of a window's owner (None when the row is gone)."""
        ...


class Notifications(NotificationReads, Protocol):
    """One row per idempotency key, one dedup window per key (a concurrent duplicate
    fails as a unique violation: ``Store.is_lost_race``); the window is locked while
    read, so concurrent new generations of one key serialise."""

    async def get_locked(self, notification_id: str) -> Notification | None:
        """One notification, locked until commit."""
        ...

    async def by_keys(self, keys: Collection[str]) -> Mapping[str, Notification]:
        """The notifications holding any of these idempotency keys, by key."""
        ...

    # The records intake builds (``services.intake_record``), each written whole.
    async def insert(self, new: Sequence[Notification]) -> None:
        """Insert new notifications, in key order (a leader may come leased: intake's
        first attempt)."""
        ...

    async def insert_before_events(self, new: Sequence[Notification]) -> None:
        """``insert`` in a transaction whose next write is its events append: on
        PostgreSQL the rows ride in the append's statement."""
        ...

    def insert_new_before_events(
        self, new: Sequence[Notification], active: Mapping[str, PolicyRevision | None]
    ) -> None:
        """In a ``Store.one_statement`` write, rows admitted without reading the keys or
        the policies: they ride in the events append and go in only if no notification
        holds one of their keys and ``active`` (a row's type to the ACTIVE revision it
        was admitted under, None for none) still holds; else the append writes nothing
        and raises ``FenceMoved``."""
        ...

    async def take_dedup_window(self, change: DedupWindowTake) -> None:
        """A new leader takes the window (``domain.admission``): insert, or move it."""
        ...

"""The store port: the outbox operations the workers and services rely on, as Protocols.

Each Protocol is the contract of one SQL module (the module itself is the
implementation; mypy checks that it conforms, at the bottom of this file). One
suite, ``tests/store/test_conformance.py``, runs every operation directly on SQLite
and on PostgreSQL, so a second implementation (or a rewrite of a query) has one
place that says what it must do:

- ``Dispatch.claim``: due, unleased (or lease-expired) PENDING leaders whose channels
  the caller serves, highest priority first, then earliest ``next_attempt``; each
  leased under a new token, ``attempts``/``cycle_attempts`` counted, a recovered
  lease flagged ``provider_effect_may_have_occurred``; concurrent claimers never
  share a row.
- ``Dispatch.settle_many``: settlement is fenced by the lease token; a stale token
  changes nothing, and ``settle_many`` says so by its count.
  ``Dispatch.settle_leased`` locks and settles in one statement per row, fenced by the
  token and an unexpired lease, and names the (id, token) pairs it changed.
- ``Dispatch.window_owner``: the dedup window, locked, with its owner (the hand-off).
- ``FollowUps``: a row is due while its ack is PENDING (or a step waits to be closed)
  and ``followup_at`` has passed, oldest first, unless its follow-up lease holds; the
  follow-up lease is separate from the dispatch lease, and ``leased``/``settle`` are
  fenced by its token (a stale one sees nothing and changes nothing).
- ``MessageUpdates``: due PENDING updates are claimed oldest first under a new token
  (``attempts`` counted), not again until the lease expires; ``mark_done``,
  ``retry_at`` and ``give_up`` are fenced by the PENDING state and the token, and a
  stale one is told ``Fenced.LOST``.
- ``Acks.settle_pending``: only a PENDING ack settles; a second settle reports False.
- ``Retention``: every query that asks "is this row settled?" (candidates, the
  guarded delete, old events, expired windows, idempotency keys) agrees with
  ``domain.retention.holds_work``.
- ``Events.append``/``read_after``: sequences ascend in commit order; read-after is
  exclusive of its cursor and oldest first.
- ``Moves``: a lifecycle move changes only rows still in the state it expects, and
  says which changed (``tests/store/test_moves.py``).
- ``Notifications``: one row per idempotency key and one dedup window per key (a
  concurrent duplicate fails as a unique violation); the window is locked while read,
  so concurrent new generations of one key serialise.

Reads return typed records (``domain.records``, built by ``store.records``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy.ext.asyncio import AsyncConnection

from uns_server.domain import moves as m
from uns_server.domain.admission import WindowChange, WindowOwner
from uns_server.domain.enums import AckStatus, Status
from uns_server.domain.records import (
    Attempt,
    DedupWindow,
    Event,
    MessageUpdate,
    Notification,
    RetentionCandidate,
)
from uns_server.domain.withdrawal import WithdrawRows
from uns_server.store.db import WriteTx
from uns_server.store.events import NewEvent
from uns_server.store.message_updates import Fenced, Queued


class Dispatch(Protocol):
    """Claim, lease and fenced settlement of deliveries (``store.dispatch``)."""

    async def claim(
        self,
        conn: AsyncConnection,
        *,
        now: datetime,
        limit: int,
        lease: timedelta,
        channels: Collection[str],
    ) -> Sequence[Attempt]:
        """Lease up to ``limit`` due leaders (each as before the claim, its new token)."""
        ...

    async def settle_many(
        self, conn: AsyncConnection, moves: Sequence[m.LeasedMove], now: datetime
    ) -> int:
        """Apply each move where its token still holds the row; how many did."""
        ...

    async def settle_leased(
        self, conn: AsyncConnection, moves: Sequence[m.LeasedMove], now: datetime
    ) -> set[tuple[str, str]]:
        """Lock and apply each move where its token still holds an unexpired lease, in
        one statement per row; the (id, token) pairs that did."""
        ...

    async def settle_leased_with_events(
        self, tx: WriteTx, moves: Sequence[m.LeasedMove], now: datetime
    ) -> None:
        """``settle_leased`` expecting every lease to hold, done by the transaction's
        events append (PostgreSQL), which raises ``FenceMoved`` if one did not."""
        ...

    async def next_due_at(
        self, conn: AsyncConnection, channels: Collection[str]
    ) -> datetime | None:
        """When the earliest unleased leader ``claim`` would take becomes due."""
        ...

    async def results_recorded_for(
        self, conn: AsyncConnection, tokens: Collection[tuple[str, str]]
    ) -> set[str]:
        """Of these (id, token), the tokens whose settlement has committed."""
        ...

    async def pending_followers(
        self, conn: AsyncConnection, owner_id: str
    ) -> Sequence[Notification]:
        """The owner's PENDING followers in promotion order (oldest first), locked."""
        ...

    async def window_owner(
        self, conn: AsyncConnection, dedup_key: str
    ) -> tuple[DedupWindow, Notification] | None:
        """The key's dedup window, locked, and its current owner (hand-off)."""
        ...

    async def status_of(self, conn: AsyncConnection, notification_id: str) -> Status | None:
        """The notification's current status (None: no such notification)."""
        ...


class FollowUps(Protocol):
    """Reminders and escalation steps of PENDING acks, under their own lease
    (``store.followups``)."""

    async def due(self, conn: AsyncConnection, now: datetime, limit: int) -> Sequence[Notification]:
        """Up to ``limit`` rows with a follow-up due and not leased, oldest due first,
        locked (SKIP LOCKED)."""
        ...

    async def reschedule(self, conn: AsyncConnection, move: m.RescheduleFollowUp) -> m.Applied:
        """Look again later at a row ``due`` locked, its lease still as read."""
        ...

    async def lease(self, conn: AsyncConnection, move: m.LeaseFollowUp) -> m.Applied:
        """Lease the follow-up of a row ``due`` locked, its lease still as read."""
        ...

    async def leased(
        self, conn: AsyncConnection, notification_id: str, token: str, now: datetime
    ) -> Notification | None:
        """The row while ``token`` holds its unexpired follow-up lease, locked."""
        ...

    async def retry_step(self, conn: AsyncConnection, move: m.RetryFollowUpStep) -> m.Applied:
        """Store the step's progress and its retry where ``move.token`` holds the lease."""
        ...

    async def settle_step(self, conn: AsyncConnection, move: m.SettleFollowUpStep) -> m.Applied:
        """Count the decided step, the next one due, where the lease is as expected."""
        ...

    async def next_due_at(self, conn: AsyncConnection) -> datetime | None:
        """The earliest follow-up time of a row ``due`` would take."""
        ...


class MessageUpdates(Protocol):
    """The message-update outbox (``store.message_updates``)."""

    async def enqueue(self, conn: AsyncConnection, queued: Sequence[Queued], now: datetime) -> None:
        """Queue updates, due now."""
        ...

    async def claim(
        self, conn: AsyncConnection, *, now: datetime, limit: int, lease: timedelta
    ) -> Sequence[tuple[MessageUpdate, str]]:
        """Lease up to ``limit`` due updates: (update as before the claim, new token)."""
        ...

    async def mark_done(
        self, conn: AsyncConnection, update_id: str, token: str, *, now: datetime
    ) -> Fenced:
        """DONE, where the update is PENDING and ``token`` still holds the lease."""
        ...

    async def retry_at(
        self,
        conn: AsyncConnection,
        update_id: str,
        token: str,
        *,
        at: datetime,
        error: str | None,
        now: datetime,
    ) -> Fenced:
        """PENDING again, unleased, due ``at``: fenced like ``mark_done``."""
        ...

    async def give_up(
        self, conn: AsyncConnection, update_id: str, token: str, *, error: str | None, now: datetime
    ) -> Fenced:
        """FAILED for good: fenced like ``mark_done``."""
        ...

    async def next_due_at(self, conn: AsyncConnection) -> datetime | None:
        """The earliest ``next_attempt`` of a PENDING update."""
        ...


class Acks(Protocol):
    """Acknowledgement settlement, guarded on the current ``ack_status`` (``store.acks``)."""

    async def settle_pending(
        self,
        conn: AsyncConnection,
        notification_id: str,
        *,
        status: AckStatus,
        actor: str,
        metadata: dict[str, Any] | None,
        now: datetime,
    ) -> bool:
        """PENDING -> ``status``; False (and nothing changed) when it was not PENDING."""
        ...

    async def due_deadlines(
        self, conn: AsyncConnection, now: datetime, limit: int
    ) -> Sequence[Notification]:
        """PENDING acks whose deadline has passed, earliest first, locked (SKIP LOCKED)."""
        ...


class Events(Protocol):
    """The append-only timeline (``store.events``)."""

    async def append(self, tx: WriteTx, items: Iterable[NewEvent], now: datetime) -> None:
        """Append in commit order (the last write of the transaction)."""
        ...

    async def read_after(
        self,
        conn: AsyncConnection,
        after_sequence: int,
        *,
        limit: int,
        principals: Collection[str] | None = None,
        notification_ids: Sequence[str] = (),
        kinds: Sequence[str] = (),
        notification_type: str = "",
    ) -> Sequence[Event]:
        """Matching events with sequence > ``after_sequence``, oldest first."""
        ...

    async def high_water(self, conn: AsyncConnection) -> int:
        """The greatest committed sequence (0 for an empty timeline)."""
        ...

    async def for_notification(
        self, conn: AsyncConnection, notification_id: str
    ) -> Sequence[Event]:
        """One notification's events, oldest first."""
        ...


class Retention(Protocol):
    """Candidate selection and guarded deletion of settled history (``store.retention``)."""

    async def settled_before(
        self, conn: AsyncConnection, cutoff: datetime, limit: int
    ) -> Sequence[RetentionCandidate]:
        """Rows holding no work, quiet (no update, no event) since ``cutoff``."""
        ...

    async def linked_to(
        self, conn: AsyncConnection, ids: Sequence[str]
    ) -> Sequence[tuple[str, str]]:
        """(row, target) for every row whose dedup owner or successor is in ``ids``."""
        ...

    async def live_window_owners(
        self, conn: AsyncConnection, ids: Sequence[str], now: datetime
    ) -> set[str]:
        """Those of ``ids`` owning a dedup window that can still coalesce."""
        ...

    async def delete_notifications(self, conn: AsyncConnection, ids: Sequence[str]) -> int:
        """Delete those of ``ids`` that still hold no work; how many went."""
        ...

    async def existing_ids(self, conn: AsyncConnection, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` that exist."""
        ...

    async def stale_events(
        self, conn: AsyncConnection, cutoff: datetime, exclude: Sequence[str]
    ) -> tuple[int, int]:
        """(count, highest sequence) of events before ``cutoff`` of rows holding no work."""
        ...

    async def expired_windows(self, conn: AsyncConnection, cutoff: datetime) -> Sequence[str]:
        """Keys of dedup windows ended before ``cutoff`` whose owner holds no work (or
        is gone)."""
        ...

    async def expire_keys(self, conn: AsyncConnection, cutoff: datetime) -> int:
        """Tombstone the idempotency keys of rows created before ``cutoff`` that hold
        no work; how many."""
        ...


class Notifications(Protocol):
    """The rows the send path writes and everything reads (``store.notifications``)."""

    async def insert_notifications(
        self, conn: AsyncConnection, rows: Sequence[Mapping[str, Any]]
    ) -> None:
        """Insert complete rows (a leader may come leased: intake's first attempt)."""
        ...

    async def get(
        self, conn: AsyncConnection, notification_id: str, *, for_update: bool = False
    ) -> Notification | None:
        """One notification, optionally locked."""
        ...

    async def by_keys(
        self, conn: AsyncConnection, keys: Collection[str]
    ) -> Mapping[str, Notification]:
        """The notifications holding any of these idempotency keys (unique), by key."""
        ...

    async def insert_dedup_window(
        self, conn: AsyncConnection, key: str, *, owner_id: str, generation: int, until: datetime
    ) -> None:
        """Open the first window of ``key``; a concurrent first window fails (unique)."""
        ...

    async def locked_dedup_window(self, conn: AsyncConnection, key: str) -> DedupWindow | None:
        """Intake's read of the window of ``key``, locked until commit."""
        ...

    async def window_owner(self, conn: AsyncConnection, owner_id: str) -> WindowOwner | None:
        """The status of a window's owner (None when the row is gone)."""
        ...

    async def take_dedup_window(self, conn: AsyncConnection, change: WindowChange) -> None:
        """A new leader takes the window (``domain.admission``): insert, or move it."""
        ...


class Moves(Protocol):
    """The typed lifecycle moves (``domain.moves``), one named query each."""

    async def replay(self, conn: AsyncConnection, move: m.Replay) -> m.Applied: ...
    async def resolve_failure(self, conn: AsyncConnection, move: m.ResolveFailure) -> m.Applied: ...
    async def withdraw(self, conn: AsyncConnection, move: WithdrawRows) -> m.Applied: ...
    async def satisfy_followers(
        self, conn: AsyncConnection, move: m.SatisfyFollowers
    ) -> m.Applied: ...
    async def extend_window(self, conn: AsyncConnection, move: m.ExtendWindow) -> m.Applied: ...
    async def record_successor(
        self, conn: AsyncConnection, move: m.RecordSuccessor
    ) -> m.Applied: ...
    async def promote(self, conn: AsyncConnection, move: m.Promote) -> m.Applied: ...
    async def relink(self, conn: AsyncConnection, move: m.Relink) -> m.Applied: ...
    async def move_window(self, conn: AsyncConnection, move: m.MoveWindow) -> m.Applied: ...


if TYPE_CHECKING:  # the SQL modules implement the port (checked by mypy, not imported)
    from uns_server.store import (
        acks,
        dispatch,
        events,
        followups,
        message_updates,
        moves,
        notifications,
        retention,
    )

    _dispatch: Dispatch = dispatch
    _followups: FollowUps = followups
    _message_updates: MessageUpdates = message_updates
    _acks: Acks = acks
    _events: Events = events
    _retention: Retention = retention
    _notifications: Notifications = notifications
    _moves: Moves = moves

"""The retention port (``store.port.Retention``; rules in ``uns_server.domain.retention``):
one method per query.

Every DELETE/UPDATE repeats the "settled" guard of its SELECT, so a row that changed
state between the plan and the write is left alone. Id lists are sent in chunks to
stay under both drivers' bound-parameter limits.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    and_,
    delete,
    exists,
    func,
    insert,
    literal,
    not_,
    or_,
    select,
    text,
    update,
)

from uns_server.domain.enums import ACK_OWED, EventKind, Status
from uns_server.domain.records import RetentionCandidate
from uns_server.domain.retention import TOMBSTONE_PREFIX
from uns_server.store import records
from uns_server.store.bound import Bound
from uns_server.store.tables import dedup, events, maintenance
from uns_server.store.tables import notifications as n

CHUNK = 500
EVENTS_HORIZON = "uns_events"  # the ``uns_maintenance`` row of the WatchEvents horizon
_MAINTENANCE_LOCK_ID = 0x554E53_0003  # "UNS" + 3: one maintenance run at a time


def _chunks(ids: Sequence[str]) -> Iterable[Sequence[str]]:
    for start in range(0, len(ids), CHUNK):
        yield ids[start : start + CHUNK]


def _settled(row: Any = n) -> ColumnElement[bool]:
    """SQL of ``not domain.retention.holds_work`` for a ``uns_notifications`` alias."""
    return and_(
        or_(
            row.c.status.in_(
                [Status.DELIVERED.value, Status.DEDUPLICATED.value, Status.WITHDRAWN.value]
            ),
            and_(row.c.status == Status.FAILED.value, row.c.dead_letter.is_(False)),
        ),
        or_(row.c.ack_status.is_(None), row.c.ack_status.not_in([s.value for s in ACK_OWED])),
    )


def _not_receipt() -> ColumnElement[bool]:
    return events.c.kind != EventKind.RETENTION_APPLIED.value


# --- notifications ------------------------------------------------------------------


# --- events -------------------------------------------------------------------------


def _stale_events(cutoff: datetime, exclude: Sequence[str]) -> ColumnElement[bool]:
    owner = n.alias("owner")
    conditions = [
        events.c.at < cutoff,
        _not_receipt(),
        exists().where(owner.c.id == events.c.notification_id, _settled(owner)),
    ]
    if exclude:
        conditions.append(events.c.notification_id.not_in(exclude))
    return and_(*conditions)


# --- dedup windows ------------------------------------------------------------------


def _expired_window(cutoff: datetime) -> ColumnElement[bool]:
    busy_owner = exists().where(n.c.id == dedup.c.owner_id, not_(_settled()))
    return and_(dedup.c.until < cutoff, ~busy_owner)


# --- idempotency keys ---------------------------------------------------------------


def _expirable_key(cutoff: datetime) -> ColumnElement[bool]:
    return and_(
        n.c.created_at < cutoff,
        not_(n.c.key.startswith(TOMBSTONE_PREFIX, autoescape=True)),
        _settled(),
    )


# --- the WatchEvents horizon --------------------------------------------------------


class SqlRetentionReads(Bound):
    __slots__ = ()

    async def settled_before(self, cutoff: datetime, limit: int) -> list[RetentionCandidate]:
        """Settled rows last updated, and last given an event, before ``cutoff``; oldest first."""
        late_event = exists().where(events.c.notification_id == n.c.id, events.c.at >= cutoff)
        q = (
            select(n.c.id, n.c.dedup_owner_id, n.c.dedup_successor_id)
            # created_at <= updated_at: the redundant bound lets the (status, created_at)
            # index do the first cut.
            .where(_settled(), n.c.created_at < cutoff, n.c.updated_at < cutoff, ~late_event)
            .order_by(n.c.updated_at, n.c.id)
            .limit(limit)
        )
        return [
            records.retention_candidate(row) for row in (await self._conn.execute(q)).mappings()
        ]

    async def existing_ids(self, ids: Sequence[str]) -> set[str]:
        found: set[str] = set()
        for chunk in _chunks(ids):
            found.update(
                (await self._conn.execute(select(n.c.id).where(n.c.id.in_(chunk)))).scalars()
            )
        return found

    async def linked_to(self, ids: Sequence[str]) -> list[tuple[str, str]]:
        """(row, target) for every row whose owner or successor is one of ``ids``."""
        pairs: list[tuple[str, str]] = []
        for chunk in _chunks(ids):
            q = select(n.c.id, n.c.dedup_owner_id, n.c.dedup_successor_id).where(
                or_(n.c.dedup_owner_id.in_(chunk), n.c.dedup_successor_id.in_(chunk))
            )
            for row in (await self._conn.execute(q)).mappings():
                for target in (row["dedup_owner_id"], row["dedup_successor_id"]):
                    if target in chunk:
                        pairs.append((row["id"], target))
        return pairs

    async def live_window_owners(self, ids: Sequence[str], now: datetime) -> set[str]:
        """Those of ``ids`` that own a dedup window that can still coalesce."""
        owners: set[str] = set()
        for chunk in _chunks(ids):
            q = select(dedup.c.owner_id).where(dedup.c.owner_id.in_(chunk), dedup.c.until >= now)
            owners.update((await self._conn.execute(q)).scalars())
        return owners

    async def events_of(self, ids: Sequence[str]) -> tuple[int, int]:
        """(count, highest sequence) of the events of ``ids``; receipts never count."""
        count, highest = 0, 0
        for chunk in _chunks(ids):
            q = select(func.count(), func.max(events.c.sequence)).where(
                events.c.notification_id.in_(chunk), _not_receipt()
            )
            c, m = (await self._conn.execute(q)).one()
            count, highest = count + int(c), max(highest, int(m or 0))
        return count, highest

    async def stale_events(self, cutoff: datetime, exclude: Sequence[str]) -> tuple[int, int]:
        """(count, highest sequence) of events older than ``cutoff`` of settled rows that
        stay (``exclude``: the rows deleted in this run, counted by ``events_of``)."""
        q = select(func.count(), func.max(events.c.sequence)).where(_stale_events(cutoff, exclude))
        c, m = (await self._conn.execute(q)).one()
        return int(c), int(m or 0)

    async def expired_windows(self, cutoff: datetime) -> list[str]:
        """Windows past ``cutoff`` whose owner is gone or settled."""
        q = select(dedup.c.key).where(_expired_window(cutoff)).order_by(dedup.c.key)
        return list((await self._conn.execute(q)).scalars())

    async def expirable_keys(self, cutoff: datetime, exclude: Sequence[str]) -> int:
        q = select(func.count()).where(_expirable_key(cutoff))
        if exclude:
            q = q.where(n.c.id.not_in(exclude))
        return int((await self._conn.execute(q)).scalar_one())

    async def compacted_sequence(self) -> int:
        """Events up to this sequence may have been deleted (0: nothing ever was)."""
        q = select(maintenance.c.compacted_sequence).where(maintenance.c.name == EVENTS_HORIZON)
        return int((await self._conn.execute(q)).scalar() or 0)


class SqlRetention(SqlRetentionReads):
    __slots__ = ()

    async def lock(self) -> None:
        """Serialise maintenance runs (SQLite's single writer does this already)."""
        if self._conn.dialect.name == "postgresql":
            await self._conn.execute(
                text("SELECT pg_advisory_xact_lock(:id)"), {"id": _MAINTENANCE_LOCK_ID}
            )

    async def delete_notifications(self, ids: Sequence[str]) -> int:
        deleted = 0
        for chunk in _chunks(ids):
            result = await self._conn.execute(delete(n).where(n.c.id.in_(chunk), _settled()))
            deleted += result.rowcount
        return deleted

    async def delete_events_of(self, ids: Sequence[str]) -> int:
        deleted = 0
        for chunk in _chunks(ids):
            q = delete(events).where(events.c.notification_id.in_(chunk), _not_receipt())
            deleted += (await self._conn.execute(q)).rowcount
        return deleted

    async def delete_stale_events(self, cutoff: datetime, *, up_to_sequence: int) -> int:
        """Deletes what ``stale_events`` counted, never above the sequence it reported."""
        q = delete(events).where(_stale_events(cutoff, ()), events.c.sequence <= up_to_sequence)
        return (await self._conn.execute(q)).rowcount

    async def delete_windows(self, keys: Sequence[str], cutoff: datetime) -> int:
        deleted = 0
        for chunk in _chunks(keys):
            q = delete(dedup).where(dedup.c.key.in_(chunk), _expired_window(cutoff))
            deleted += (await self._conn.execute(q)).rowcount
        return deleted

    async def expire_keys(self, cutoff: datetime) -> int:
        """Rewrites ``key`` to ``expired:<id>``: the row stays, the digest no longer matches.

        ``updated_at`` is left alone: this is bookkeeping, not a state change, and it must
        not restart the row's own retention clock.
        """
        q = update(n).where(_expirable_key(cutoff)).values(key=literal(TOMBSTONE_PREFIX) + n.c.id)
        return (await self._conn.execute(q)).rowcount

    async def raise_compacted_sequence(self, sequence: int, now: datetime) -> int:
        """Moves the horizon up to ``sequence`` (never down); returns the horizon."""
        current = (
            await self._conn.execute(
                select(maintenance.c.compacted_sequence)
                .where(maintenance.c.name == EVENTS_HORIZON)
                .with_for_update()
            )
        ).scalar()
        if current is None:
            await self._conn.execute(
                insert(maintenance).values(
                    name=EVENTS_HORIZON, compacted_sequence=sequence, updated_at=now
                )
            )
            return sequence
        if sequence <= current:
            return int(current)
        await self._conn.execute(
            update(maintenance)
            .where(maintenance.c.name == EVENTS_HORIZON)
            .values(compacted_sequence=sequence, updated_at=now)
        )
        return sequence

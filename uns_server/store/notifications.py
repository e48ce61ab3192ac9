"""The notifications port (``store.port.Notifications``): its statements on
``uns_notifications`` and ``uns_dedup``, one method per query."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, any_, bindparam, insert, or_, select, update

from uns_server.domain.admission import DedupWindowTake, WindowOwner
from uns_server.domain.enums import Status
from uns_server.domain.policy import PolicyRevision
from uns_server.domain.records import DedupWindow, Notification
from uns_server.store import deliveries, delivery_leases, jobs, pg, records
from uns_server.store.bound import Bound, BoundTx
from uns_server.store.port.values import NOTIFICATION_FILTER_FIELDS
from uns_server.store.tables import dedup, notifications, policies

# Every read of a record selects ``_ROW``: the delivery lease as its job holds it.
_ROW = delivery_leases.NOTIFICATION_COLUMNS
_BY_KEYS_PG = pg.Statement(select(*_ROW).where(notifications.c.key == any_(bindparam("keys"))))
_INSERT_PG = pg.Insert(notifications)
_ADMITTED_UNDER = "admitted_under"  # the guard's value beside each row (``_NewOnly``)


class _NewOnly:
    """The accept's notification rows as an all-or-nothing rider of a one-statement
    write (``insert_new_before_events``): inserted only while no notification holds
    any of their idempotency keys and each type's ACTIVE revision is still the one a
    row was admitted under ("policy_id:revision", "" for none); otherwise none is, and
    the append's gate (an exact count) holds back the rest. The guard reads what
    intake's long path reads (``by_keys``, ``policies.active_many``), in the same
    statement as the write. A concurrent first send of a key, not yet committed, is
    still waited for and fails as a unique violation (a lost race, retried)."""

    width = _INSERT_PG.width + 1

    def unnest_sql(self, first: int, when: str = "") -> str:
        keys = _INSERT_PG.param(first, "key")
        types = _INSERT_PG.param(first, "notification_type")
        under = f"${first + _INSERT_PG.width}::text[]"
        active = (
            f"SELECT p.id || ':' || p.active_revision FROM {policies.name} AS p "
            "WHERE p.notification_type = w.notification_type"
        )
        guard = (
            f"NOT EXISTS (SELECT 1 FROM {notifications.name} AS held "
            f"WHERE held.key = ANY({keys})) AND NOT EXISTS (SELECT 1 FROM (SELECT DISTINCT * "
            f"FROM unnest({types}, {under})) AS w(notification_type, policy) "
            f"WHERE w.policy <> coalesce(({active}), ''))"
        )
        return _INSERT_PG.unnest_sql(first, f"{guard} AND {when}" if when else guard)

    def arrays(self, rows: Sequence[Mapping[str, Any]]) -> list[list[Any]]:
        return [*_INSERT_PG.arrays(rows), [r[_ADMITTED_UNDER] for r in rows]]

    def exact_sql(self, first: int) -> str | None:
        return f"cardinality({_INSERT_PG.param(first, 'id')})"

    def partial(self, rows: int) -> bool:
        return False  # one guard for every row

    async def executemany(self, driver: Any, rows: Iterable[Mapping[str, Any]]) -> None:
        raise RuntimeError("new-only rows ride in an events append, which checks their count")


_NEW_ONLY = _NewOnly()


def _rows(new: Sequence[Notification]) -> list[dict[str, Any]]:
    """The records' rows in key order, so two transactions inserting overlapping keys
    wait on each other in the same order instead of deadlocking. A leader intake
    leases (``lease_new``) has its lease on its delivery job (``deliveries.new_rows``),
    not on its row: the job is the fence."""
    rows = [records.notification_row(n) for n in sorted(new, key=lambda n: n.key)]
    for row in rows:
        row["lease_token"] = row["lease_until"] = None
    return rows


# Listing (AIP-158): newest first, keyset-paged on (created_at, id).

_FILTERABLE = {
    "state": notifications.c.status,
    "ack_state": notifications.c.ack_status,
    "dead_letter": notifications.c.dead_letter,
    "notification_type": notifications.c.notification_type,
    "source": notifications.c.source,
    "principal": notifications.c.principal,
    "dedup_owner_id": notifications.c.dedup_owner_id,
}
assert set(_FILTERABLE) == set(NOTIFICATION_FILTER_FIELDS)  # the port names them


class SqlNotificationReads(Bound):
    __slots__ = ()

    async def get(self, notification_id: str, *, for_update: bool = False) -> Notification | None:
        """One notification, optionally locked until commit."""
        if for_update:
            lock = select(notifications.c.id).where(notifications.c.id == notification_id)
            found = await delivery_leases.locked_records(self._conn, lock.with_for_update())
            return found[0] if found else None
        q = select(*_ROW).where(notifications.c.id == notification_id)
        row = (await self._conn.execute(q)).mappings().first()
        return None if row is None else records.notification(row)

    async def by_key(self, key: str) -> Notification | None:
        """The notification holding this idempotency key."""
        q = select(*_ROW).where(notifications.c.key == key)
        row = (await self._conn.execute(q)).mappings().first()
        return None if row is None else records.notification(row)

    async def list_page(
        self,
        *,
        conditions: Sequence[tuple[str, Any]],
        after: tuple[datetime, str] | None,
        limit: int,
    ) -> list[Notification]:
        q = select(*_ROW)
        for field, value in conditions:
            q = q.where(_FILTERABLE[field] == value)
        if after is not None:
            created_at, last_id = after
            q = q.where(
                or_(
                    notifications.c.created_at < created_at,
                    and_(notifications.c.created_at == created_at, notifications.c.id < last_id),
                )
            )
        q = q.order_by(notifications.c.created_at.desc(), notifications.c.id.desc()).limit(limit)
        return [records.notification(row) for row in (await self._conn.execute(q)).mappings()]

    async def locked_dedup_window(self, key: str) -> DedupWindow | None:
        """Intake's read of a coalescing window, locked until commit on PostgreSQL."""
        q = select(dedup).where(dedup.c.key == key).with_for_update()
        row = (await self._conn.execute(q)).mappings().first()
        return None if row is None else records.dedup_window(row)

    async def window_owner(self, owner_id: str) -> WindowOwner | None:
        """A dedup window's owner as it stands (None when the row is gone)."""
        q = select(notifications.c.status).where(notifications.c.id == owner_id)
        status = (await self._conn.execute(q)).scalar()
        return None if status is None else WindowOwner(owner_id, Status(status))


class SqlNotifications(BoundTx, SqlNotificationReads):
    __slots__ = ()

    async def get_locked(self, notification_id: str) -> Notification | None:
        return await self.get(notification_id, for_update=True)

    async def by_keys(self, keys: Collection[str]) -> dict[str, Notification]:
        """The notifications holding any of these idempotency keys, by key."""
        if not keys:
            return {}
        driver = pg.driver(self._conn)
        if driver is not None:
            rows: Iterable[pg.Row] = await _BY_KEYS_PG.fetch(driver, {"keys": sorted(keys)})
        else:
            q = select(*_ROW).where(notifications.c.key.in_(sorted(keys)))
            rows = (await self._conn.execute(q)).mappings()
        found = (records.notification(row) for row in rows)
        return {n.key: n for n in found}

    async def insert(self, new: Sequence[Notification]) -> None:
        """One multi-row INSERT, in key order (``_rows``), and one of the due leaders'
        delivery jobs (``store.deliveries.new_rows``)."""
        if not new:
            return
        rows = _rows(new)
        driver = pg.driver(self._conn)
        if driver is not None:
            await _INSERT_PG.executemany(driver, rows)
        else:
            await self._conn.execute(insert(notifications), rows)
        await jobs.insert_rows(self._conn, deliveries.new_rows(new))

    async def insert_before_events(self, new: Sequence[Notification]) -> None:
        """``insert`` in a transaction whose next write is its events append:
        on PostgreSQL the rows ride in the append's statement (``WriteTx.defer``), one
        round trip less per accept."""
        if pg.driver(self._conn) is None:
            await self.insert(new)
        else:
            self._tx.defer(_INSERT_PG, _rows(new))
            self._tx.defer(jobs.INSERT_PG, deliveries.new_rows(new))

    def insert_new_before_events(
        self,
        new: Sequence[Notification],
        active: Mapping[str, PolicyRevision | None],
    ) -> None:
        """PostgreSQL: ``insert_before_events`` for rows admitted without
        reading the keys or the policies (``Database.one_statement``): they go in only if
        no notification holds one of their keys and ``active`` (a row's type to the ACTIVE
        revision it was admitted under, None for none) still holds, and the append
        raises ``FenceMoved`` (nothing written) if not."""
        under = {
            t: "" if rev is None else f"{rev.policy_id}:{rev.revision}" for t, rev in active.items()
        }
        rows = _rows(new)
        for row in rows:
            row[_ADMITTED_UNDER] = under[row["notification_type"]]
        self._tx.defer(_NEW_ONLY, rows)
        # Held back with the rows when the guard refuses them (the append's count).
        self._tx.defer(jobs.INSERT_PG, deliveries.new_rows(new))

    async def _insert_dedup_window(
        self, key: str, *, owner_id: str, generation: int, until: datetime
    ) -> None:
        await self._conn.execute(
            insert(dedup).values(key=key, owner_id=owner_id, generation=generation, until=until)
        )

    async def take_dedup_window(self, change: DedupWindowTake) -> None:
        """A new leader takes the window: a new row (a concurrent first window fails as a
        unique violation), or the row read under lock moves to it."""
        owner_id, generation, until = change.owner_id, change.generation, change.until
        if change.insert:
            await self._insert_dedup_window(
                change.key, owner_id=owner_id, generation=generation, until=until
            )
        else:
            # The row was read under its lock (``locked_dedup_window``) in this transaction.
            q = update(dedup).where(dedup.c.key == change.key)
            await self._conn.execute(
                q.values(owner_id=owner_id, generation=generation, until=until)
            )

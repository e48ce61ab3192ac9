"""The event timeline port (``store.port.Events``, ``uns_events``): append in commit
order, read after a cursor.

Why a lock on PostgreSQL: a sequence value is taken at INSERT but becomes visible
at COMMIT, so two concurrent writers can commit 8 before 7. A subscriber that has
already read 8 would then never see 7. Appending under a transaction-scoped
advisory lock, as the last step before commit, makes allocation order equal commit
order, so "everything after N" is gap-free. SQLite has a single writer already.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Collection, Iterable, Sequence
from dataclasses import fields
from datetime import datetime

from sqlalchemy import func, insert, select

from uns_server.domain.records import Event
from uns_server.store import jsontext, pg, records
from uns_server.store.bound import Bound, BoundTx
from uns_server.store.db import TOPIC_EVENTS, FenceMoved, notify_calls
from uns_server.store.port.values import NewEvent
from uns_server.store.tables import events

_EVENT_ORDER_LOCK_ID = 0x554E53_0002
# The hub reads every committed event: select the record's columns in its field order
# and build it positionally (a name lookup per column through ``RowMapping`` cost a
# fifth more per event than the untyped rows did; this costs nothing more).
_EVENT_FIELDS = tuple(f.name for f in fields(Event))
_EVENT_COLUMNS = tuple(events.c[name] for name in _EVENT_FIELDS)


_ARRAY_COLUMNS = ("id", "notification_id", "principal", "notification_type", "kind")


@functools.lru_cache(maxsize=64)  # a handful of shapes: topics and riders per caller
def _append_sql(
    notify_calls: str, first: int, riders: tuple[pg.Rider, ...] = (), single: bool = False
) -> str:
    """PostgreSQL's append: the rows from arrays (``unnest`` keeps their order), gated
    by the event-order lock. The gate is an uncorrelated subquery, so PostgreSQL runs it
    once, as a one-time filter before the first row, and so before the first sequence
    value is taken. Parameters: ``$1`` the lock, then the NOTIFY parameters, then one
    array per column from ``$first`` on, then ``at`` (one value: every row has ``now``),
    then the riders' arrays.

    Riders (``WriteTx.defer``) are inserts run as data-modifying CTEs of the same
    statement. The lock's own gate counts their rows, so they are done before the lock
    is taken: a rider that waits on another transaction's row (a duplicate key) waits
    without holding the lock that transaction needs for its own events. A rider with
    an exact count (``pg.FencedUpdate``) that falls short fails the gate: no lock, no
    NOTIFY, no event inserted (``append`` raises ``FenceMoved``).

    ``single`` (``Database.one_statement``: no transaction block to roll back): each
    rider also waits for the exact counts of the riders before it, so a fenced update
    that fell short holds the later riders' rows back too, and the statement writes
    nothing at all."""
    arrays = [f"${first + i}::text[]" for i in range(len(_ARRAY_COLUMNS) + 1)]
    names = [*_ARRAY_COLUMNS, "payload"]
    at = first + len(arrays)
    ctes: list[str] = []
    counts: list[str] = []
    exact: list[str] = []
    next_param = at + 1
    for i, rider in enumerate(riders):
        when = " AND ".join(exact) if single else ""
        ctes.append(f"r{i} AS ({rider.unnest_sql(next_param, when)} RETURNING 1)")
        counts.append(f"(SELECT count(*) FROM r{i})")
        expected = rider.exact_sql(next_param)
        if expected is not None:
            exact.append(f"(SELECT count(*) FROM r{i}) = {expected}")
        next_param += rider.width
    conditions = [" + ".join(counts) + " >= 0", *exact] if counts else []
    waits = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    ctes.append(f"gate AS (SELECT pg_advisory_xact_lock($1), {notify_calls}{waits})")
    return (
        f"WITH {', '.join(ctes)} "
        f"INSERT INTO {events.name} ({', '.join(_ARRAY_COLUMNS)}, at, payload) "
        f"SELECT {', '.join(f'e.{c}' for c in _ARRAY_COLUMNS)}, "
        f"${at}::timestamptz, e.payload::jsonb "
        f"FROM unnest({', '.join(arrays)}) AS e({', '.join(names)}) "
        f"WHERE (SELECT true FROM gate)"
    )


class SqlEventReads(Bound):
    __slots__ = ()

    async def read_after(
        self,
        after_sequence: int,
        *,
        limit: int,
        principals: Collection[str] | None = None,
        notification_ids: Sequence[str] = (),
        kinds: Sequence[str] = (),
        notification_type: str = "",
    ) -> list[Event]:
        """Matching events with sequence > ``after_sequence``, oldest first (one record per
        row: the hub shares it with every stream it reaches)."""
        q = select(*_EVENT_COLUMNS).where(events.c.sequence > after_sequence)
        if principals is not None:  # None: every principal's events
            q = q.where(events.c.principal.in_(sorted(principals)))
        if notification_ids:
            q = q.where(events.c.notification_id.in_(notification_ids))
        if kinds:
            q = q.where(events.c.kind.in_(kinds))
        if notification_type:
            q = q.where(events.c.notification_type == notification_type)
        result = await self._conn.execute(q.order_by(events.c.sequence).limit(limit))
        return [records.event_from_values(row) for row in result]

    async def high_water(self) -> int:
        """The greatest committed sequence (0 for an empty timeline)."""
        value = (await self._conn.execute(select(func.max(events.c.sequence)))).scalar()
        return int(value or 0)


class SqlEvents(BoundTx, SqlEventReads):
    __slots__ = ()

    async def append(self, items: Iterable[NewEvent], now: datetime) -> None:
        """Append events; call as the last write of the transaction (see module doc).
        Signal other topics (``tx.signal``) before: their NOTIFY then costs nothing extra."""
        rows = [
            {
                "id": str(uuid.uuid4()),
                "notification_id": e.notification_id,
                "principal": e.principal,
                "notification_type": e.notification_type,
                "kind": e.kind.value,
                "at": now,
                "payload": e.payload,
            }
            for e in items
        ]
        if not rows:
            return
        self._tx.signal(TOPIC_EVENTS)
        driver = pg.driver(self._conn)
        if driver is not None:
            # One statement, one round trip: the lock, the NOTIFYs of every topic signalled
            # so far, and the rows.
            calls, params = notify_calls(self._tx.topics, self._tx.origin, first=2)
            riders, self._tx.riders = self._tx.riders, []
            if self._tx.single:
                if any(r.partial(len(rows)) for r, rows in riders):
                    raise RuntimeError("a one-statement write's riders must write all or nothing")
                # The fenced riders first: the others wait for their counts.
                riders.sort(key=lambda rider: rider[0].exact_sql(0) is None)
            shape = tuple(insert for insert, _ in riders)
            status = await driver.execute(
                _append_sql(calls, 2 + len(params), shape, self._tx.single),
                _EVENT_ORDER_LOCK_ID,
                *params,
                *([r[c] for r in rows] for c in _ARRAY_COLUMNS),
                [jsontext.dumps(r["payload"]) for r in rows],
                now,
                *(array for insert, rider_rows in riders for array in insert.arrays(rider_rows)),
            )
            if status != f"INSERT 0 {len(rows)}":  # the gate held the rows back
                raise FenceMoved(f"events append inserted nothing: {status}")
            self._tx.notified.update(self._tx.topics)
        else:
            await self._conn.execute(insert(events), rows)

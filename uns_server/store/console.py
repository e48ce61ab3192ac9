"""The operator console's reads (``store.port.ConsoleReads``, ``tx.console``): counts,
dead letters and recent events, all bounded.

Every query here either counts at most ``cap`` rows through an index (a capped count:
``SELECT count(*) FROM (SELECT 1 ... LIMIT cap + 1)``) or reads a bounded window, so a
console page costs the same on ten rows as on ten million.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    and_,
    case,
    func,
    literal,
    not_,
    or_,
    select,
)

from uns_server.domain.enums import AckStatus, EventKind, Status
from uns_server.domain.records import Event, FailedSummary, PolicyType, RecentEvent
from uns_server.store import records
from uns_server.store.bound import Bound
from uns_server.store.delivery_leases import LEASE_UNTIL
from uns_server.store.tables import events, inline, notifications, policies

n = notifications


def _is(column: ColumnElement[Any], value: str) -> ColumnElement[bool]:
    """``column = 'VALUE'`` with the constant inline, not a bound parameter: PostgreSQL
    uses a partial index (``WHERE status = 'PENDING'``...) only when it can prove the
    query's condition implies the index's, which a generic plan's parameter never does."""
    return column == inline(value)


def _dead_letter(dead: bool) -> list[ColumnElement[bool]]:
    """FAILED rows of one triage bucket; the dead letters through their partial index."""
    flag = n.c.dead_letter
    return [_is(n.c.status, Status.FAILED.value), flag if dead else not_(flag)]


def capped_count_query(where: Sequence[ColumnElement[bool]], cap: int) -> Select[Any]:
    inner = select(literal(1)).select_from(n).where(*where).limit(cap + 1).subquery()
    return select(func.count()).select_from(inner)


def state_conditions(now: datetime, hour_later: datetime, day_ago: datetime) -> dict[str, Any]:
    """The overview's capped counts outside the queue; each is served by an index of
    ``tables`` (status+created_at, the pending-ack deadline index, the dead-letter and
    resolved-failure indexes)."""
    ack_pending = _is(n.c.ack_status, AckStatus.PENDING.value)
    return {
        "delivered_24h": [_is(n.c.status, Status.DELIVERED.value), n.c.created_at >= day_ago],
        "needs_action": _dead_letter(True),
        "resolved": _dead_letter(False),
        "acks_pending": [ack_pending, n.c.deadline > now],
        "acks_due_1h": [ack_pending, n.c.deadline > now, n.c.deadline <= hour_later],
    }


def queue_counts_query(now: datetime, cap: int) -> Select[Any]:
    # Each row's lease is read once, from its delivery job (``delivery_leases.LEASE_UNTIL``), in
    # the capped subquery: its LIMIT keeps PostgreSQL from copying the probe into each count.
    pending = (
        select(n.c.next_attempt, LEASE_UNTIL.label("lease_until"), n.c.dedup_owner_id)
        .where(_is(n.c.status, Status.PENDING.value))
        .limit(cap + 1)
        .subquery()
    )
    p = pending.c
    unleased = or_(p.lease_until.is_(None), p.lease_until <= now)

    def count(condition: ColumnElement[bool]) -> Any:
        return func.sum(case((condition, 1), else_=0))

    return select(
        func.count().label("seen"),
        # the claim's predicate: leaders only (the due index's), not leased
        count(and_(p.dedup_owner_id.is_(None), p.next_attempt <= now, unleased)).label("due"),
        count(p.lease_until > now).label("in_flight"),
        count(and_(p.next_attempt > now, unleased)).label("scheduled"),
    ).select_from(pending)


def failed_query(dead_letter: bool, limit: int) -> Select[Any]:
    return (
        select(
            n.c.id,
            n.c.notification_type,
            n.c.source,
            n.c.principal,
            n.c.outcome,
            n.c.attempts,
            n.c.cycle,
            n.c.created_at,
            n.c.updated_at,
            n.c.dedup_successor_id,
            n.c.notification["title"].as_string().label("title"),
            n.c.notification[("effective", "channels")].label("channels"),
        )
        .where(*_dead_letter(dead_letter))
        .order_by(n.c.created_at.desc(), n.c.id.desc())
        .limit(limit)
    )


def recent_events_query(
    kinds: Sequence[EventKind], since: datetime, after_sequence: int
) -> Select[Any]:
    """Only the payload fields the overview reads: decoding thousands of JSON payloads
    cost more than the query did."""
    p = events.c.payload
    return (
        select(
            events.c.sequence,
            events.c.kind,
            events.c.at,
            events.c.notification_id,
            p["channel"].as_string().label("channel"),
            p["success"].as_boolean().label("success"),
            p["error"].as_string().label("error"),
            p["status"].as_string().label("status"),
        )
        .where(
            and_(
                events.c.sequence > after_sequence,
                events.c.kind.in_([k.value for k in kinds]),
                events.c.at >= since,
            )
        )
        .order_by(events.c.sequence)
    )


class SqlConsoleReads(Bound):
    __slots__ = ()

    async def state_counts(self, now: datetime, cap: int) -> dict[str, int]:
        """The overview's counts outside the queue (``state_conditions``), each counted
        no further than ``cap + 1`` (shown as "cap+")."""
        conditions = state_conditions(now, now + timedelta(hours=1), now - timedelta(days=1))
        return {
            name: int((await self._conn.execute(capped_count_query(where, cap))).scalar_one())
            for name, where in conditions.items()
        }

    async def queue_counts(self, now: datetime, cap: int) -> tuple[dict[str, int], bool]:
        """Due now, in flight and scheduled, from one pass over at most ``cap + 1``
        PENDING rows (status+created_at index), and whether the pass stopped there: then
        each count is a lower bound. Three separate counts had each walked every pending
        row, however few matched (in flight: a handful among a backlog)."""
        row = (await self._conn.execute(queue_counts_query(now, cap))).one()
        counts = {"due": int(row.due or 0), "in_flight": int(row.in_flight or 0),
                  "scheduled": int(row.scheduled or 0)}  # fmt: skip
        return counts, int(row.seen) > cap

    async def failed(self, *, dead_letter: bool, limit: int) -> list[FailedSummary]:
        """The newest FAILED rows of one triage bucket (an index, bounded)."""
        rows = (await self._conn.execute(failed_query(dead_letter, limit))).mappings()
        return [records.failed_summary(row) for row in rows]

    async def recent_events(
        self, kinds: Sequence[EventKind], since: datetime, window: int
    ) -> list[RecentEvent]:
        """Events of ``kinds`` at or after ``since`` among the newest ``window`` sequences
        (a primary-key range, so the scan is bounded however large the table is)."""
        newest = (await self._conn.execute(select(func.max(events.c.sequence)))).scalar() or 0
        q = recent_events_query(kinds, since, int(newest) - window)
        return [records.recent_event(row) for row in (await self._conn.execute(q)).mappings()]

    async def created_at(self, ids: Sequence[str]) -> dict[str, datetime]:
        """Notifications' ``created_at`` by primary key."""
        q = select(n.c.id, n.c.created_at).where(n.c.id.in_(list(ids)))
        return {row.id: row.created_at for row in await self._conn.execute(q)}

    async def policy_types(self, limit: int) -> list[PolicyType]:
        q = (
            select(policies.c.notification_type, policies.c.active_revision, policies.c.updated_at)
            .order_by(policies.c.notification_type)
            .limit(limit)
        )
        return [records.policy_type(row) for row in (await self._conn.execute(q)).mappings()]

    async def notification_events(self, notification_id: str, limit: int) -> list[Event]:
        """One notification's newest ``limit`` events, oldest first (notification_id index)."""
        q = (
            select(events)
            .where(events.c.notification_id == notification_id)
            .order_by(events.c.sequence.desc())
            .limit(limit)
        )
        rows = list((await self._conn.execute(q)).mappings())
        return [records.event(row) for row in reversed(rows)]

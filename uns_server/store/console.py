"""The operator console's reads: counts, dead letters and recent events, all bounded.

Every query here either counts at most ``cap`` rows through an index (a capped count:
``SELECT count(*) FROM (SELECT 1 ... LIMIT cap + 1)``) or reads a bounded window, so a
console page costs the same on ten rows as on ten million.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, func, literal, literal_column, not_, or_, select
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from uns_server.domain.enums import AckStatus, EventKind, Status
from uns_server.store.tables import events, notifications, policies

n = notifications


def _is(column: ColumnElement[Any], value: str) -> ColumnElement[bool]:
    """``column = 'VALUE'`` with the constant inline, not a bound parameter: PostgreSQL
    uses a partial index (``WHERE status = 'PENDING'``...) only when it can prove the
    query's condition implies the index's, which a generic plan's parameter never does."""
    return column == literal_column(f"'{value}'")  # enum values only, never input


def _dead_letter(dead: bool) -> list[ColumnElement[bool]]:
    """FAILED rows of one triage bucket; the dead letters through their partial index."""
    flag = n.c.dead_letter
    return [_is(n.c.status, Status.FAILED.value), flag if dead else not_(flag)]


async def capped_count(
    conn: AsyncConnection, where: Sequence[ColumnElement[bool]], cap: int
) -> int:
    """How many rows match, counting no further than ``cap + 1`` (shown as "cap+")."""
    return int((await conn.execute(capped_count_query(where, cap))).scalar_one())


def capped_count_query(where: Sequence[ColumnElement[bool]], cap: int) -> Select[Any]:
    inner = select(literal(1)).select_from(n).where(*where).limit(cap + 1).subquery()
    return select(func.count()).select_from(inner)


def state_conditions(now: datetime, hour_later: datetime, day_ago: datetime) -> dict[str, Any]:
    """Each overview count's condition; each is served by an index of ``tables``
    (status+created_at, the due index, the pending-ack deadline index or the dead-letter
    index); the ``due`` one repeats the due index's predicate exactly."""
    pending = _is(n.c.status, Status.PENDING.value)
    unleased = or_(n.c.lease_until.is_(None), n.c.lease_until <= now)
    ack_pending = _is(n.c.ack_status, AckStatus.PENDING.value)
    return {
        "due": [pending, n.c.dedup_owner_id.is_(None), n.c.next_attempt <= now, unleased],
        "in_flight": [pending, n.c.lease_until > now],
        "scheduled": [pending, n.c.next_attempt > now, unleased],
        "delivered_24h": [_is(n.c.status, Status.DELIVERED.value), n.c.created_at >= day_ago],
        "needs_action": _dead_letter(True),
        "resolved": _dead_letter(False),
        "acks_pending": [ack_pending, n.c.deadline > now],
        "acks_due_1h": [ack_pending, n.c.deadline > now, n.c.deadline <= hour_later],
    }


async def failed(conn: AsyncConnection, *, dead_letter: bool, limit: int) -> list[RowMapping]:
    """The newest FAILED rows of one triage bucket (an index, bounded)."""
    return list((await conn.execute(failed_query(dead_letter, limit))).mappings())


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
        )
        .where(*_dead_letter(dead_letter))
        .order_by(n.c.created_at.desc(), n.c.id.desc())
        .limit(limit)
    )


async def recent_events(
    conn: AsyncConnection, kinds: Sequence[EventKind], since: datetime, window: int
) -> list[RowMapping]:
    """Events of ``kinds`` at or after ``since`` among the newest ``window`` sequences (a
    primary-key range, so the scan is bounded however large the table is)."""
    newest = (await conn.execute(select(func.max(events.c.sequence)))).scalar() or 0
    q = recent_events_query(kinds, since, int(newest) - window)
    return list((await conn.execute(q)).mappings())


def recent_events_query(
    kinds: Sequence[EventKind], since: datetime, after_sequence: int
) -> Select[Any]:
    return (
        select(events.c.sequence, events.c.kind, events.c.at, events.c.payload, n.c.created_at)
        .join(n, n.c.id == events.c.notification_id, isouter=True)
        .where(
            and_(
                events.c.sequence > after_sequence,
                events.c.kind.in_([k.value for k in kinds]),
                events.c.at >= since,
            )
        )
        .order_by(events.c.sequence)
    )


async def policy_types(conn: AsyncConnection, limit: int) -> list[RowMapping]:
    q = (
        select(policies.c.notification_type, policies.c.active_revision, policies.c.updated_at)
        .order_by(policies.c.notification_type)
        .limit(limit)
    )
    return list((await conn.execute(q)).mappings())


async def notification_events(
    conn: AsyncConnection, notification_id: str, limit: int
) -> list[RowMapping]:
    """One notification's newest ``limit`` events, oldest first (notification_id index)."""
    q = (
        select(events)
        .where(events.c.notification_id == notification_id)
        .order_by(events.c.sequence.desc())
        .limit(limit)
    )
    return list(reversed(list((await conn.execute(q)).mappings())))

"""Follow-up queries: reminders and escalation steps of PENDING acks (``workers.followups``).

A row is due when its ack is PENDING and ``followup_at`` has passed; a claim leases
it under its own fencing token (``followup_lease_token``), separate from the dispatch
lease, and the settlement is guarded by that token and ``followup_lease_until > now``:
zero rows means the lease was lost (it expired, or a withdrawal fenced it). A row
whose ack ended while a step waited to retry (``followup_step``) is still due once, so
the worker can record that step as STOPPED.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from uns_server.domain.enums import AckStatus
from uns_server.domain.moves import (
    Applied,
    LeaseFollowUp,
    RescheduleFollowUp,
    RetryFollowUpStep,
    SettleFollowUpStep,
)
from uns_server.domain.records import Notification
from uns_server.store import records
from uns_server.store.moves import changed
from uns_server.store.tables import UtcDateTime
from uns_server.store.tables import notifications as n

# A PENDING ack, or one that ended while a step waited to retry (to close that step).
_pending = (
    (n.c.ack_status == AckStatus.PENDING.value) | n.c.followup_step.is_not(None)
) & n.c.followup_at.is_not(None)


async def due(conn: AsyncConnection, now: datetime, limit: int) -> list[Notification]:
    """Lock up to ``limit`` rows whose follow-up is due and not leased (an expired
    lease counts as free: its row is recovered), oldest due first."""
    q = (
        select(n)
        .where(_pending, n.c.followup_at <= now)
        .where(n.c.followup_lease_until.is_(None) | (n.c.followup_lease_until <= now))
        .order_by(n.c.followup_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return [records.notification(row) for row in (await conn.execute(q)).mappings()]


async def leased(
    conn: AsyncConnection, notification_id: str, token: str, now: datetime
) -> Notification | None:
    """The notification while ``token`` still holds its follow-up lease, locked; else None."""
    q = (
        select(n)
        .where(
            n.c.id == notification_id,
            n.c.followup_lease_token == token,
            n.c.followup_lease_until > now,
        )
        .with_for_update()
    )
    row = (await conn.execute(q)).mappings().first()
    return None if row is None else records.notification(row)


def _lease_is(token: str | None) -> ColumnElement[bool]:
    if token is None:
        return n.c.followup_lease_token.is_(None)
    return n.c.followup_lease_token == token


async def _apply(conn: AsyncConnection, nid: str, fence: Any, values: dict[str, Any]) -> Applied:
    return await changed(conn, update(n).where(n.c.id == nid, fence).values(values), 1)


async def reschedule(conn: AsyncConnection, move: RescheduleFollowUp) -> Applied:
    """Look again later; the row was locked by ``due``, its lease still as read."""
    values = {"followup_at": move.at, "followup_lease_token": None, "followup_lease_until": None}
    return await _apply(conn, move.notification_id, _lease_is(move.expected_token), values)


async def lease(conn: AsyncConnection, move: LeaseFollowUp) -> Applied:
    """Lease the row's follow-up; it was locked by ``due``, its lease still as read."""
    values = {"followup_lease_token": move.token, "followup_lease_until": move.until}
    return await _apply(conn, move.notification_id, _lease_is(move.expected_token), values)


async def retry_step(conn: AsyncConnection, move: RetryFollowUpStep) -> Applied:
    """Fenced by the follow-up token: the step's progress stored, its retry due."""
    values: dict[str, Any] = {
        "followup_lease_token": None,
        "followup_lease_until": None,
        "updated_at": move.now,
        "followup_step": move.step.to_json(),
        "followup_at": move.at,
    }
    if move.provider_refs is not None:
        values["provider_refs"] = dict(move.provider_refs)
    return await _apply(conn, move.notification_id, _lease_is(move.token), values)


async def settle_step(conn: AsyncConnection, move: SettleFollowUpStep) -> Applied:
    """Fenced by the follow-up token (or, closing a step whose ack ended, by the lease
    as read): the step counted, the next one due, the lease released."""
    values: dict[str, Any] = {
        "followup_lease_token": None,
        "followup_lease_until": None,
        "updated_at": move.now,
        "reminders_sent": move.counts.reminders_sent,
        "escalations_sent": move.counts.escalations_sent,
        "followup_at": move.next_at,
        "followup_step": None,
    }
    if move.provider_refs is not None:
        values["provider_refs"] = dict(move.provider_refs)
    fence = _lease_is(move.token if move.token is not None else move.expected_token)
    return await _apply(conn, move.notification_id, fence, values)


async def next_due_at(conn: AsyncConnection) -> datetime | None:
    """The earliest follow-up time of a PENDING ack (or of a step to close)."""
    value = (await conn.execute(select(func.min(n.c.followup_at)).where(_pending))).scalar()
    if isinstance(value, str):  # aggregates bypass the column type on SQLite
        value = datetime.fromisoformat(value)
    return UtcDateTime().process_result_value(value, conn.dialect)

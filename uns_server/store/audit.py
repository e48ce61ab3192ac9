"""Append-only audit records (seed 000 §2.4): written, never updated."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from uns_server.domain.records import AckAuditRecord, DeliveryAuditRecord, Notification
from uns_server.store import pg, records
from uns_server.store.db import WriteTx
from uns_server.store.tables import ack_audit_records, notification_audit_records


def delivery_record(
    row: Notification,
    *,
    status: str,
    outcome: Mapping[str, Any],
    delivered_at: datetime | None,
    now: datetime,
) -> dict[str, Any]:
    """The delivery audit record of a settled attempt on ``row``, for ``insert_deliveries``."""
    nid, ntype, doc, mode = row.id, row.notification_type, row.notification, row.delivery_mode
    ctx, effective = doc.autonomy_context, doc.effective
    return {
        "id": str(uuid.uuid4()),
        "notification_id": nid,
        "notification_type": ntype,
        "status": status,
        "channels_attempted": list(outcome.get("channels_attempted", [])),
        "channels_succeeded": list(outcome.get("channels_succeeded", [])),
        "channels_failed": list(outcome.get("channels_failed", [])),
        "error_message": outcome.get("error_message"),
        "intent": doc.intent.value if doc.intent else "",
        "delivery_mode": str(mode),
        "autonomy_mode": ctx.autonomy_mode.value if ctx and ctx.autonomy_mode else None,
        "agent_id": ctx.agent_id if ctx else None,
        "policy_config_id": effective.policy_id,
        "policy_config_hash": effective.policy_hash,
        "delivered_at": delivered_at,
        "created_at": now,
    }


_INSERT_DELIVERY = insert(notification_audit_records)
_INSERT_DELIVERY_PG = pg.Insert(notification_audit_records)


async def insert_deliveries(conn: AsyncConnection, records: Sequence[Mapping[str, Any]]) -> None:
    """Append delivery audit records (one multi-row insert)."""
    if not records:
        return
    driver = pg.driver(conn)
    if driver is not None:
        await _INSERT_DELIVERY_PG.executemany(driver, records)
    else:
        await conn.execute(_INSERT_DELIVERY, list(records))


async def insert_deliveries_before_events(
    tx: WriteTx, records: Sequence[Mapping[str, Any]]
) -> None:
    """``insert_deliveries`` in a transaction whose next write is its events append: on
    PostgreSQL the records ride in the append's statement (``WriteTx.defer``)."""
    if pg.driver(tx.conn) is None:
        await insert_deliveries(tx.conn, records)
    else:
        tx.defer(_INSERT_DELIVERY_PG, records)


async def record_ack(
    conn: AsyncConnection,
    notification_id: str,
    *,
    old_status: str | None,
    new_status: str,
    actor: str,
    metadata: Mapping[str, Any] | None,
    now: datetime,
    via: str | None = None,
) -> None:
    await conn.execute(
        insert(ack_audit_records).values(
            via=via,
            id=str(uuid.uuid4()),
            notification_id=notification_id,
            old_status=old_status,
            new_status=new_status,
            acked_by=actor,
            acked_at=now,
            ack_metadata=dict(metadata) if metadata is not None else None,
            created_at=now,
        )
    )


async def delivery_records(
    conn: AsyncConnection, notification_id: str, *, offset: int, limit: int
) -> list[DeliveryAuditRecord]:
    """A page of one notification's delivery records in write order."""
    t = notification_audit_records
    q = select(t).where(t.c.notification_id == notification_id)
    q = q.order_by(t.c.created_at, t.c.id).offset(offset).limit(limit)
    return [records.delivery_audit(row) for row in (await conn.execute(q)).mappings()]


async def ack_records(
    conn: AsyncConnection, notification_id: str, *, offset: int, limit: int
) -> list[AckAuditRecord]:
    """A page of one notification's ack records in write order."""
    t = ack_audit_records
    q = select(t).where(t.c.notification_id == notification_id)
    q = q.order_by(t.c.created_at, t.c.id).offset(offset).limit(limit)
    return [records.ack_audit(row) for row in (await conn.execute(q)).mappings()]

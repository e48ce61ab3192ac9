"""The audit port (``store.port.Audit``): append-only audit records (seed 000 §2.4),
written, never updated."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select

from uns_server.domain.enums import AckStatus
from uns_server.domain.records import AckAuditRecord, DeliveryAuditRecord, Notification
from uns_server.store import pg, records
from uns_server.store.bound import Bound, BoundTx
from uns_server.store.port.values import DeliveryAudit
from uns_server.store.tables import ack_audit_records, notification_audit_records


def _delivery_record(
    row: Notification,
    *,
    status: str,
    outcome: Mapping[str, Any],
    delivered_at: datetime | None,
    now: datetime,
) -> dict[str, Any]:
    """The delivery audit record of a settled attempt on ``row``, for ``record_deliveries``."""
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


class SqlAuditReads(Bound):
    __slots__ = ()

    async def delivery_records(
        self, notification_id: str, *, offset: int, limit: int
    ) -> list[DeliveryAuditRecord]:
        """A page of one notification's delivery records in write order."""
        t = notification_audit_records
        q = select(t).where(t.c.notification_id == notification_id)
        q = q.order_by(t.c.created_at, t.c.id).offset(offset).limit(limit)
        return [records.delivery_audit(row) for row in (await self._conn.execute(q)).mappings()]

    async def ack_records(
        self, notification_id: str, *, offset: int, limit: int
    ) -> list[AckAuditRecord]:
        """A page of one notification's ack records in write order."""
        t = ack_audit_records
        q = select(t).where(t.c.notification_id == notification_id)
        q = q.order_by(t.c.created_at, t.c.id).offset(offset).limit(limit)
        return [records.ack_audit(row) for row in (await self._conn.execute(q)).mappings()]


class SqlAudit(BoundTx, SqlAuditReads):
    __slots__ = ()

    async def record_ack(
        self,
        notification_id: str,
        *,
        old_status: AckStatus | None,
        new_status: AckStatus,
        actor: str,
        metadata: Mapping[str, Any] | None,
        now: datetime,
        via: str | None = None,
    ) -> None:
        await self._conn.execute(
            insert(ack_audit_records).values(
                via=via,
                id=str(uuid.uuid4()),
                notification_id=notification_id,
                old_status=None if old_status is None else old_status.value,
                new_status=new_status.value,
                acked_by=actor,
                acked_at=now,
                ack_metadata=dict(metadata) if metadata is not None else None,
                created_at=now,
            )
        )

    async def record_deliveries(self, settled: Sequence[DeliveryAudit], now: datetime) -> None:
        """Append the settled attempts' delivery records in a transaction whose next write
        is its events append: on PostgreSQL the records ride in the append's statement
        (``WriteTx.defer``); on SQLite one multi-row insert."""
        rows = [
            _delivery_record(
                s.notification,
                status=s.status.value,
                outcome=s.outcome,
                delivered_at=s.delivered_at,
                now=now,
            )
            for s in settled
        ]
        if pg.driver(self._conn) is not None:
            self._tx.defer(_INSERT_DELIVERY_PG, rows)
        elif rows:
            await self._conn.execute(_INSERT_DELIVERY, rows)

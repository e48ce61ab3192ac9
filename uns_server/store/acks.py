"""The acks port (``store.port.Acks``): its statements fenced on the expected
``ack_status``."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import and_, or_, select, update

from uns_server.domain.enums import ACK_OWED, AckStatus, Status
from uns_server.domain.records import Notification
from uns_server.domain.snooze import Snooze
from uns_server.store.bound import Bound
from uns_server.store.delivery_leases import LEASE_TOKEN, locked_records
from uns_server.store.followups import cancel_waiting_follow_ups, stop_follow_ups
from uns_server.store.tables import inline
from uns_server.store.tables import notifications as n

_OWED = sorted(s.value for s in ACK_OWED)


class SqlAcks(Bound):
    __slots__ = ()

    async def settle_pending(
        self,
        notification_id: str,
        *,
        status: AckStatus,
        actor: str,
        metadata: Mapping[str, Any] | None,
        now: datetime,
        sent_while_held: bool = False,
    ) -> bool:
        """PENDING (or SNOOZED) -> ``status``; False when no answer was owed any more. A row whose
        delivery is in flight (leased, no ack yet) settles too: its settlement keeps this
        ack (``store.dispatch.KEPT_ONCE_SET``); so does one whose messages went out while a
        person's were held (``sent_while_held``, read by the caller under the row lock)."""
        in_flight = and_(
            n.c.ack_status.is_(None),
            n.c.require_ack.is_(True),
            n.c.status == inline(Status.PENDING.value),
            *([] if sent_while_held else [LEASE_TOKEN.is_not(None)]),
        )
        result = await self._conn.execute(
            update(n)
            .where(n.c.id == notification_id, or_(n.c.ack_status.in_(_OWED), in_flight))
            .values(
                ack_status=status.value,
                actor=actor,
                responded_at=now,
                response_metadata=dict(metadata) if metadata is not None else None,
                updated_at=now,
                snoozed_until=None,
            )
        )
        return bool(result.rowcount == 1)

    async def locked(self, ids: Collection[str]) -> dict[str, Notification]:
        if not ids:
            return {}
        lock = select(n.c.id).where(n.c.id.in_(sorted(ids))).order_by(n.c.id).with_for_update()
        return {row.id: row for row in await locked_records(self._conn, lock)}

    async def due_deadlines(self, now: datetime, limit: int) -> list[Notification]:
        lock = (
            select(n.c.id)
            .where(n.c.ack_status == inline(AckStatus.PENDING.value), n.c.deadline <= now)
            .order_by(n.c.deadline)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        return await locked_records(self._conn, lock)

    async def snooze(self, notification_id: str, move: Snooze, now: datetime) -> bool:
        result = await self._conn.execute(
            update(n)
            .where(n.c.id == notification_id, n.c.ack_status.in_(_OWED))
            .values(
                ack_status=AckStatus.SNOOZED.value,
                snoozed_until=move.until,
                snoozed_seconds=move.paused_seconds,
                deadline=move.deadline,
                updated_at=now,
            )
        )
        if result.rowcount != 1:
            return False
        # Paused: the running chain of follow-ups stops; the snooze's end starts it again.
        await stop_follow_ups(self._conn, [notification_id], now, "snoozed while the step was sent")
        return True

    async def resume(self, notification_id: str, now: datetime) -> bool:
        result = await self._conn.execute(
            update(n)
            .where(n.c.id == notification_id, n.c.ack_status == AckStatus.SNOOZED.value)
            .values(
                ack_status=AckStatus.PENDING.value,
                snoozed_until=None,
                snoozes_ended=n.c.snoozes_ended + 1,  # numbers this snooze's reminder
                updated_at=now,
            )
        )
        if result.rowcount != 1:
            return False
        await cancel_waiting_follow_ups(self._conn, notification_id, now)
        return True

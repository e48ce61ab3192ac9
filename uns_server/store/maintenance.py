"""The maintenance port (``store.port.Maintenance``, ``tx.maintenance``): maintenance
windows and the holds they put on notifications (``domain.maintenance``), the windows'
rows and audit records, the claim's fenced hold, and the release of what a window
held."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, bindparam, case, delete, insert, select, update

from uns_server.domain.enums import Status
from uns_server.domain.jobs import JobState
from uns_server.domain.maintenance import ClaimHold, MaintenanceWindow, WindowChange
from uns_server.store import deliveries, delivery_leases
from uns_server.store.bound import Bound
from uns_server.store.tables import (
    UtcDateTime,
    inline,
    maintenance_audit_records,
    maintenance_windows,
)
from uns_server.store.tables import notifications as n

w = maintenance_windows
a = maintenance_audit_records


def _window(row: Any) -> MaintenanceWindow:
    return MaintenanceWindow(
        window_id=row["window_id"],
        start_time=row["start_time"],
        end_time=row["end_time"],
        notification_types=tuple(row["notification_types"]),
        reason=row["reason"],
        updated_by=row["updated_by"],
        updated_at=row["updated_at"],
    )


_HOLD = (
    update(n)
    .where(
        n.c.id == bindparam("b_id"),
        deliveries.held_by(bindparam("b_token"), bindparam("v_attempts")),
    )
    .values(
        attempts=bindparam("v_attempts"),
        cycle_attempts=bindparam("v_cycle_attempts"),
        next_attempt=bindparam("v_until", type_=UtcDateTime()),
        held_until=bindparam("v_until", type_=UtcDateTime()),
        held_by_window_id=bindparam("v_window"),
        updated_at=bindparam("v_now", type_=UtcDateTime()),
    )
)


class SqlMaintenanceReads(Bound):
    __slots__ = ()

    async def get(self, window_id: str) -> MaintenanceWindow | None:
        row = (
            (await self._conn.execute(select(w).where(w.c.window_id == window_id)))
            .mappings()
            .first()
        )
        return None if row is None else _window(row)

    async def list_windows(self, *, after: str | None, limit: int) -> list[MaintenanceWindow]:
        q = select(w).order_by(w.c.window_id).limit(limit)
        if after is not None:
            q = q.where(w.c.window_id > after)
        return [_window(row) for row in (await self._conn.execute(q)).mappings()]

    async def not_ended(self, now: datetime, *, limit: int) -> list[MaintenanceWindow]:
        q = select(w).where(w.c.end_time > now).order_by(w.c.end_time, w.c.window_id).limit(limit)
        return [_window(row) for row in (await self._conn.execute(q)).mappings()]

    async def changes(self, *, limit: int) -> list[WindowChange]:
        q = select(a).order_by(a.c.created_at.desc(), a.c.id).limit(limit)
        return [
            WindowChange(
                r["window_id"], r["action"], r["actor"], dict(r["content"]), r["created_at"]
            )
            for r in (await self._conn.execute(q)).mappings()
        ]


class SqlMaintenance(SqlMaintenanceReads):
    __slots__ = ()

    async def put(
        self, window: MaintenanceWindow, *, actor: str, now: datetime
    ) -> MaintenanceWindow:
        values = {
            "start_time": window.start_time,
            "end_time": window.end_time,
            "notification_types": list(window.notification_types),
            "reason": window.reason,
            "updated_at": now,
            "updated_by": actor,
        }
        changed = await self._conn.execute(
            update(w).where(w.c.window_id == window.window_id).values(**values)
        )
        if changed.rowcount == 0:  # a concurrent first put loses on the key: a lost race
            await self._conn.execute(
                insert(w).values(window_id=window.window_id, created_at=now, **values)
            )
        await self._audit(window, "PUT", actor, now)
        stored = await self.get(window.window_id)
        assert stored is not None
        return stored

    async def delete(
        self, window_id: str, *, actor: str, now: datetime
    ) -> MaintenanceWindow | None:
        found = await self.get(window_id)
        if found is None:
            return None
        await self._conn.execute(delete(w).where(w.c.window_id == window_id))
        await self._audit(found, "DELETE", actor, now)
        return found

    async def hold(self, holds: Sequence[ClaimHold], now: datetime) -> set[str]:
        """Hold claimed leaders, each only while its token holds the lease; the ids held."""
        held: set[str] = set()
        for h in holds:  # rare (only what a window holds): one execute per row tells its count
            params = {
                "b_id": h.notification_id,
                "b_token": h.token,
                "v_attempts": h.attempts,
                "v_cycle_attempts": h.cycle_attempts,
                "v_until": h.until,
                "v_window": h.window_id,
                "v_now": now,
            }
            if (await self._conn.execute(_HOLD, params)).rowcount == 1:
                held.add(h.notification_id)
        # Each held leader's job waits for the hold's end, as its row does.
        await deliveries.settle(
            self._conn,
            [
                deliveries.SettleDelivery(h.notification_id, h.token, JobState.RETRYABLE, h.until)
                for h in holds
                if h.notification_id in held
            ],
            now,
        )
        return held

    async def retime_held(self, window_id: str, *, until: datetime | None, now: datetime) -> int:
        """The rows ``window_id`` holds: with ``until``, held until then (the PENDING
        unleased ones due then); without, released (the PENDING ones due now if later, the
        hold cleared on every row). How many rows it held."""
        mine = n.c.held_by_window_id == window_id
        pending = (n.c.status == inline(Status.PENDING.value)) & delivery_leases.LEASE_TOKEN.is_(
            None
        )
        # Their delivery jobs follow (retimed with them), in this transaction. Locked
        # first, so that the UPDATE reads each lease from its job as it stands, never as
        # it stood before a settle the UPDATE waited for (``delivery_leases.locked_records``).
        lock = select(n.c.id).where(mine).order_by(n.c.id).with_for_update()
        ids = list((await self._conn.execute(lock)).scalars())
        if until is not None:
            result = await self._conn.execute(
                update(n)
                .where(mine)
                .values(
                    held_until=until,
                    next_attempt=case((pending, until), else_=n.c.next_attempt),
                    updated_at=now,
                )
            )
            await deliveries.schedule(self._conn, ids, now)
            return int(result.rowcount)
        due_later = and_(n.c.status == inline(Status.PENDING.value), n.c.next_attempt > now)
        result = await self._conn.execute(
            update(n)
            .where(mine)
            .values(
                held_until=None,
                held_by_window_id=None,
                next_attempt=case((due_later, now), else_=n.c.next_attempt),
                updated_at=now,
            )
        )
        await deliveries.schedule(self._conn, ids, now)
        return int(result.rowcount)

    async def _audit(
        self, window: MaintenanceWindow, action: str, actor: str, now: datetime
    ) -> None:
        await self._conn.execute(
            insert(a).values(
                id=str(uuid.uuid4()),
                window_id=window.window_id,
                action=action,
                actor=actor,
                content=window.to_json(),
                created_at=now,
            )
        )

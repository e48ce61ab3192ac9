"""Maintenance windows and the holds they put on notifications (``domain.maintenance``):
the windows' rows and audit records, the claim's fenced hold, and the release of
what a window held. Also the port's SQL implementation (``tx.maintenance``)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, bindparam, case, delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from uns_server.domain.enums import Status
from uns_server.domain.maintenance import ClaimHold, MaintenanceWindow, WindowChange
from uns_server.store.tables import UtcDateTime, maintenance_audit_records, maintenance_windows
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


async def get(conn: AsyncConnection, window_id: str) -> MaintenanceWindow | None:
    row = (await conn.execute(select(w).where(w.c.window_id == window_id))).mappings().first()
    return None if row is None else _window(row)


async def list_windows(
    conn: AsyncConnection, *, after: str | None, limit: int
) -> list[MaintenanceWindow]:
    q = select(w).order_by(w.c.window_id).limit(limit)
    if after is not None:
        q = q.where(w.c.window_id > after)
    return [_window(row) for row in (await conn.execute(q)).mappings()]


async def not_ended(conn: AsyncConnection, now: datetime, limit: int) -> list[MaintenanceWindow]:
    q = select(w).where(w.c.end_time > now).order_by(w.c.end_time, w.c.window_id).limit(limit)
    return [_window(row) for row in (await conn.execute(q)).mappings()]


async def _audit(
    conn: AsyncConnection, window: MaintenanceWindow, action: str, actor: str, now: datetime
) -> None:
    await conn.execute(
        insert(a).values(
            id=str(uuid.uuid4()),
            window_id=window.window_id,
            action=action,
            actor=actor,
            content=window.to_json(),
            created_at=now,
        )
    )


async def put(
    conn: AsyncConnection, window: MaintenanceWindow, *, actor: str, now: datetime
) -> MaintenanceWindow:
    values = {
        "start_time": window.start_time,
        "end_time": window.end_time,
        "notification_types": list(window.notification_types),
        "reason": window.reason,
        "updated_at": now,
        "updated_by": actor,
    }
    changed = await conn.execute(
        update(w).where(w.c.window_id == window.window_id).values(**values)
    )
    if changed.rowcount == 0:  # a concurrent first put loses on the key: a lost race
        await conn.execute(insert(w).values(window_id=window.window_id, created_at=now, **values))
    await _audit(conn, window, "PUT", actor, now)
    stored = await get(conn, window.window_id)
    assert stored is not None
    return stored


async def delete_window(
    conn: AsyncConnection, window_id: str, *, actor: str, now: datetime
) -> MaintenanceWindow | None:
    found = await get(conn, window_id)
    if found is None:
        return None
    await conn.execute(delete(w).where(w.c.window_id == window_id))
    await _audit(conn, found, "DELETE", actor, now)
    return found


async def changes(conn: AsyncConnection, *, limit: int) -> list[WindowChange]:
    q = select(a).order_by(a.c.created_at.desc(), a.c.id).limit(limit)
    return [
        WindowChange(r["window_id"], r["action"], r["actor"], dict(r["content"]), r["created_at"])
        for r in (await conn.execute(q)).mappings()
    ]


_HOLD = (
    update(n)
    .where(n.c.id == bindparam("b_id"), n.c.lease_token == bindparam("b_token"))
    .values(
        lease_token=None,
        lease_until=None,
        attempts=bindparam("v_attempts"),
        cycle_attempts=bindparam("v_cycle_attempts"),
        next_attempt=bindparam("v_until", type_=UtcDateTime()),
        held_until=bindparam("v_until", type_=UtcDateTime()),
        held_by_window_id=bindparam("v_window"),
        updated_at=bindparam("v_now", type_=UtcDateTime()),
    )
)


async def hold(conn: AsyncConnection, holds: Sequence[ClaimHold], now: datetime) -> set[str]:
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
        if (await conn.execute(_HOLD, params)).rowcount == 1:
            held.add(h.notification_id)
    return held


async def retime_held(
    conn: AsyncConnection, window_id: str, *, until: datetime | None, now: datetime
) -> int:
    """The rows ``window_id`` holds: with ``until``, held until then (the PENDING
    unleased ones due then); without, released (the PENDING ones due now if later, the
    hold cleared on every row). How many rows it held."""
    mine = n.c.held_by_window_id == window_id
    pending = (n.c.status == Status.PENDING.value) & n.c.lease_token.is_(None)
    if until is not None:
        result = await conn.execute(
            update(n)
            .where(mine)
            .values(
                held_until=until,
                next_attempt=case((pending, until), else_=n.c.next_attempt),
                updated_at=now,
            )
        )
        return int(result.rowcount)
    due_later = and_(n.c.status == Status.PENDING.value, n.c.next_attempt > now)
    result = await conn.execute(
        update(n)
        .where(mine)
        .values(
            held_until=None,
            held_by_window_id=None,
            next_attempt=case((due_later, now), else_=n.c.next_attempt),
            updated_at=now,
        )
    )
    return int(result.rowcount)


class SqlMaintenanceReads:
    __slots__ = ("_conn",)

    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def get(self, window_id: str) -> MaintenanceWindow | None:
        return await get(self._conn, window_id)

    async def list_windows(self, *, after: str | None, limit: int) -> Sequence[MaintenanceWindow]:
        return await list_windows(self._conn, after=after, limit=limit)

    async def not_ended(self, now: datetime, *, limit: int) -> Sequence[MaintenanceWindow]:
        return await not_ended(self._conn, now, limit)

    async def changes(self, *, limit: int) -> Sequence[WindowChange]:
        return await changes(self._conn, limit=limit)


class SqlMaintenance(SqlMaintenanceReads):
    __slots__ = ()

    async def put(
        self, window: MaintenanceWindow, *, actor: str, now: datetime
    ) -> MaintenanceWindow:
        return await put(self._conn, window, actor=actor, now=now)

    async def delete(
        self, window_id: str, *, actor: str, now: datetime
    ) -> MaintenanceWindow | None:
        return await delete_window(self._conn, window_id, actor=actor, now=now)

    async def hold(self, holds: Sequence[ClaimHold], now: datetime) -> set[str]:
        return await hold(self._conn, holds, now)

    async def retime_held(self, window_id: str, *, until: datetime | None, now: datetime) -> int:
        return await retime_held(self._conn, window_id, until=until, now=now)

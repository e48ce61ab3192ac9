"""The port's SQL implementation: each port binds the SQL modules' queries to one
transaction's connection (``store.port`` says what each must do; the queries stay in
their modules). Built per transaction by ``sql_store``: a port is one slotted object
holding the connection, so binding costs nothing next to a round trip."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from uns_server.domain import moves as m
from uns_server.domain.admission import WindowChange, WindowOwner
from uns_server.domain.enums import AckStatus, Status
from uns_server.domain.policy import PolicyRevision
from uns_server.domain.records import (
    AckAuditRecord,
    Attempt,
    DedupWindow,
    DeliveryAuditRecord,
    Event,
    Notification,
)
from uns_server.domain.snooze import Snooze
from uns_server.domain.withdrawal import WithdrawRows
from uns_server.store import (
    acks,
    audit,
    dispatch,
    events,
    moves,
    notifications,
)
from uns_server.store.db import WriteTx
from uns_server.store.port import (
    DeliveryAudit,
    NewEvent,
)


class Bound:
    __slots__ = ("_conn",)

    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn


class BoundTx(Bound):
    __slots__ = ("_tx",)

    def __init__(self, tx: WriteTx) -> None:
        self._conn = tx.conn
        self._tx = tx


class SqlDispatchReads(Bound):
    __slots__ = ()

    async def next_due_at(self, channels: Collection[str]) -> datetime | None:
        return await dispatch.next_due_at(self._conn, channels)

    async def results_recorded_for(self, tokens: Collection[tuple[str, str]]) -> set[str]:
        return await dispatch.results_recorded_for(self._conn, tokens)

    async def status_of(self, notification_id: str) -> Status | None:
        return await dispatch.status_of(self._conn, notification_id)


class SqlDispatch(BoundTx, SqlDispatchReads):
    __slots__ = ()

    async def claim(
        self, *, now: datetime, limit: int, lease: timedelta, channels: Collection[str]
    ) -> Sequence[Attempt]:
        return await dispatch.claim(
            self._conn, now=now, limit=limit, lease=lease, channels=channels
        )

    async def settle_many(self, moves: Sequence[m.LeasedMove], now: datetime) -> int:
        return await dispatch.settle_many(self._conn, moves, now)

    async def settle_leased(
        self, moves: Sequence[m.LeasedMove], now: datetime
    ) -> set[tuple[str, str]]:
        return await dispatch.settle_leased(self._conn, moves, now)

    async def settle_leased_with_events(self, moves: Sequence[m.LeasedMove], now: datetime) -> None:
        await dispatch.settle_leased_with_events(self._tx, moves, now)

    async def pending_followers(self, owner_id: str) -> Sequence[Notification]:
        return await dispatch.pending_followers(self._conn, owner_id)

    async def window_owner(self, dedup_key: str) -> tuple[DedupWindow, Notification] | None:
        return await dispatch.window_owner(self._conn, dedup_key)


class SqlMoves(Bound):
    __slots__ = ()

    async def replay(self, move: m.Replay) -> m.Applied:
        return await moves.replay(self._conn, move)

    async def resolve_failure(self, move: m.ResolveFailure) -> m.Applied:
        return await moves.resolve_failure(self._conn, move)

    async def withdraw(self, move: WithdrawRows) -> m.Applied:
        return await moves.withdraw(self._conn, move)

    async def satisfy_followers(self, move: m.SatisfyFollowers) -> m.Applied:
        return await moves.satisfy_followers(self._conn, move)

    async def extend_window(self, move: m.ExtendWindow) -> m.Applied:
        return await moves.extend_window(self._conn, move)

    async def record_successor(self, move: m.RecordSuccessor) -> m.Applied:
        return await moves.record_successor(self._conn, move)

    async def promote(self, move: m.Promote) -> m.Applied:
        return await moves.promote(self._conn, move)

    async def relink(self, move: m.Relink) -> m.Applied:
        return await moves.relink(self._conn, move)

    async def move_window(self, move: m.MoveWindow) -> m.Applied:
        return await moves.move_window(self._conn, move)


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
        return await acks.settle_pending(
            self._conn,
            notification_id,
            status=status,
            actor=actor,
            metadata=dict(metadata) if metadata is not None else None,
            now=now,
            sent_while_held=sent_while_held,
        )

    async def locked(self, notification_ids: Collection[str]) -> Mapping[str, Notification]:
        return await acks.locked(self._conn, notification_ids)

    async def due_deadlines(self, now: datetime, limit: int) -> Sequence[Notification]:
        return await acks.due_deadlines(self._conn, now, limit)

    async def snooze(self, notification_id: str, move: Snooze, now: datetime) -> bool:
        return await acks.snooze(self._conn, notification_id, move, now)

    async def resume(self, notification_id: str, now: datetime) -> bool:
        return await acks.resume(self._conn, notification_id, now)


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
    ) -> Sequence[Event]:
        return await events.read_after(
            self._conn,
            after_sequence,
            limit=limit,
            principals=principals,
            notification_ids=notification_ids,
            kinds=kinds,
            notification_type=notification_type,
        )

    async def high_water(self) -> int:
        return await events.high_water(self._conn)


class SqlEvents(BoundTx, SqlEventReads):
    __slots__ = ()

    async def append(self, items: Iterable[NewEvent], now: datetime) -> None:
        await events.append(self._tx, items, now)


class SqlAuditReads(Bound):
    __slots__ = ()

    async def delivery_records(
        self, notification_id: str, *, offset: int, limit: int
    ) -> Sequence[DeliveryAuditRecord]:
        return await audit.delivery_records(self._conn, notification_id, offset=offset, limit=limit)

    async def ack_records(
        self, notification_id: str, *, offset: int, limit: int
    ) -> Sequence[AckAuditRecord]:
        return await audit.ack_records(self._conn, notification_id, offset=offset, limit=limit)


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
        await audit.record_ack(
            self._conn,
            notification_id,
            old_status=None if old_status is None else old_status.value,
            new_status=new_status.value,
            actor=actor,
            metadata=metadata,
            now=now,
            via=via,
        )

    async def record_deliveries(self, settled: Sequence[DeliveryAudit], now: datetime) -> None:
        await audit.insert_deliveries_before_events(
            self._tx,
            [
                audit.delivery_record(
                    s.notification,
                    status=s.status.value,
                    outcome=s.outcome,
                    delivered_at=s.delivered_at,
                    now=now,
                )
                for s in settled
            ],
        )


class SqlNotificationReads(Bound):
    __slots__ = ()

    async def get(self, notification_id: str) -> Notification | None:
        return await notifications.get(self._conn, notification_id)

    async def by_key(self, key: str) -> Notification | None:
        return await notifications.by_key(self._conn, key)

    async def list_page(
        self,
        *,
        conditions: Sequence[tuple[str, str | bool]],
        after: tuple[datetime, str] | None,
        limit: int,
    ) -> Sequence[Notification]:
        return await notifications.list_page(
            self._conn, conditions=conditions, after=after, limit=limit
        )

    async def locked_dedup_window(self, key: str) -> DedupWindow | None:
        return await notifications.locked_dedup_window(self._conn, key)

    async def window_owner(self, owner_id: str) -> WindowOwner | None:
        return await notifications.window_owner(self._conn, owner_id)


class SqlNotifications(BoundTx, SqlNotificationReads):
    __slots__ = ()

    async def get_locked(self, notification_id: str) -> Notification | None:
        return await notifications.get(self._conn, notification_id, for_update=True)

    async def by_keys(self, keys: Collection[str]) -> Mapping[str, Notification]:
        return await notifications.by_keys(self._conn, keys)

    async def insert(self, new: Sequence[Notification]) -> None:
        await notifications.insert_notifications(self._conn, new)

    async def insert_before_events(self, new: Sequence[Notification]) -> None:
        await notifications.insert_notifications_before_events(self._tx, new)

    def insert_new_before_events(
        self, new: Sequence[Notification], active: Mapping[str, PolicyRevision | None]
    ) -> None:
        notifications.insert_new_before_events(self._tx, new, active)

    async def take_dedup_window(self, change: WindowChange) -> None:
        await notifications.take_dedup_window(self._conn, change)

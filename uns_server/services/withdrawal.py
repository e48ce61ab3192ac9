"""WithdrawNotification: load, ask ``domain.withdrawal``, store (SPEC §5).

Tenancy (SPEC §3) comes first: a producer withdraws only its own principal's
notifications (a responds_for on the same key does not widen that), an operator
any; every other id answers NOT_FOUND exactly like an unknown one.

Messages already sent are updated where the channel can (Slack ``chat.update``,
PagerDuty ``resolve``) by durable "message update" outbox work that another part of
the server owns: this service calls :class:`SentMessages` inside the withdrawal's
transaction, so that work commits with the withdrawal or not at all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol

from uns_server.domain import withdrawal
from uns_server.domain.enums import AckStatus, EventKind, Role, Status
from uns_server.domain.errors import NotFound
from uns_server.domain.records import Notification
from uns_server.domain.validation import validate_notification_id
from uns_server.services.auth import Principal
from uns_server.services.operations import validate_reason
from uns_server.store.port import DeliveryAudit, NewEvent, Store, WriteTransaction


class SentMessages(Protocol):
    """Hook for updating messages a withdrawn notification already reached."""

    async def withdrawn(
        self,
        tx: WriteTransaction,
        row: Notification,
        scope: withdrawal.Scope,
        actor: str,
        reason: str,
        now: datetime,
    ) -> None:
        """Called in the withdrawal's transaction for a row some channel accepted
        (``row`` as it was before the withdrawal): enqueue the update work here (e.g.
        ``services.message_updates.queue_on_settle(tx, row, AckStatus.WITHDRAWN,
        actor, "withdrawal", now)``)."""


class Withdrawals:
    def __init__(
        self,
        store: Store,
        clock: Callable[[], datetime],
        sent_messages: SentMessages | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._sent_messages = sent_messages

    async def withdraw(
        self, principal: Principal, notification_id: str, reason: str = ""
    ) -> Notification:
        """The withdrawn notification (also on a repeat by the same caller)."""
        nid = validate_notification_id(notification_id)
        reason = validate_reason(reason)
        async with self._store.write() as tx:
            return await self.withdraw_in(tx, principal, nid, reason, self._clock())

    async def withdraw_in(
        self,
        tx: WriteTransaction,
        principal: Principal,
        nid: str,
        reason: str,
        now: datetime,
    ) -> Notification:
        """``withdraw`` inside the caller's transaction (a heartbeat's beat withdraws
        its page in the commit that re-arms it); ``nid`` and ``reason`` already valid.
        A refusal is raised before anything is written."""
        row = await tx.notifications.get_locked(nid)
        if row is None or not _may_withdraw(principal, row.principal):
            raise NotFound(metadata={"notification_id": nid})
        followers: list[Notification] = []
        if row.status == Status.PENDING and row.dedup_owner_id is None:
            followers = list(await tx.dispatch.pending_followers(nid))
        target = withdrawal.WithdrawalRow(
            id=nid,
            status=row.status,
            ack_status=row.ack_status,
            dead_letter=row.dead_letter,
            deadline=row.deadline,
            dedup_owner_id=row.dedup_owner_id,
            withdrawn_by=row.withdrawn_by,
        )
        decision = withdrawal.decide_withdrawal(
            target,
            caller=principal.name,
            pending_followers=tuple(f.id for f in followers),
            now=now,
        )
        if isinstance(decision, withdrawal.Withdraw):
            await self._record(tx, row, target, followers, decision, principal.name, reason, now)
            changed = await tx.notifications.get(nid)
            assert changed is not None
            row = changed
        return row

    async def _record(
        self,
        tx: WriteTransaction,
        row: Notification,
        target: withdrawal.WithdrawalRow,
        followers: Sequence[Notification],
        decision: withdrawal.Withdraw,
        actor: str,
        reason: str,
        now: datetime,
    ) -> None:
        scope = decision.scope
        move = withdrawal.rows_withdrawn(target, decision, actor=actor, reason=reason, now=now)
        # The row and its followers were read under their locks in this transaction.
        (await tx.moves.withdraw(move)).expect(f"withdrawal of {row.id}")
        payload = {"actor": actor, "reason": reason, "scope": scope.value}
        new_events = [_event(row, payload)]
        if followers:
            with_owner = withdrawal.followers_withdrawn(
                decision, actor=actor, reason=reason, now=now
            )
            withdrawn = set((await tx.moves.withdraw(with_owner)).ids)
            new_events += [
                _event(f, {**payload, "with_owner_id": row.id})
                for f in followers
                if f.id in withdrawn  # a follower settled meanwhile stays as it is
            ]
        if scope == withdrawal.Scope.ACK:
            await tx.audit.record_ack(
                row.id,
                old_status=row.ack_status,
                new_status=AckStatus.WITHDRAWN,
                actor=actor,
                metadata={"reason": reason},
                now=now,
            )
        else:
            withdrawn_audit = DeliveryAudit(row, Status.WITHDRAWN, row.outcome.to_json(), None)
            await tx.audit.record_deliveries([withdrawn_audit], now)
        reached = scope == withdrawal.Scope.ACK or row.outcome.channels_succeeded
        if self._sent_messages is not None and reached:
            await self._sent_messages.withdrawn(tx, row, scope, actor, reason, now)
        await tx.events.append(new_events, now)


def _may_withdraw(principal: Principal, owner: str) -> bool:
    """The owning producer or an operator (SPEC §3)."""
    if principal.sees_everything:
        return True
    return Role.PRODUCER in principal.roles and owner == principal.name


def _event(row: Notification, payload: dict[str, Any]) -> NewEvent:
    return NewEvent(row.id, row.principal, row.notification_type, EventKind.WITHDRAWN, payload)

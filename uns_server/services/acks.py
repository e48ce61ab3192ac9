"""The acknowledgement lifecycle (seed 000 §1.2).

    (none) --delivered with require_ack--> PENDING
    PENDING --Acknowledge before deadline--> ACKED | DISMISSED      (responder)
    PENDING --deadline passed, expiry worker--> TIMED_OUT           (uns-timeout-worker)

Same actor + same outcome again returns the original settlement; anything else on a
settled ack is ACK_CONFLICT; after the deadline ACK_DEADLINE_PASSED, even before the
sweep has run (late human acks are refused, never raced against the worker).

Tenancy (SPEC §3) comes first: a notification outside the caller's tenants answers
NOT_FOUND exactly like an unknown id, before anything about its state is said. An
ACK_CONFLICT names the settling actor only when the caller may see it
(``Principal.may_name``: itself, a principal of its tenants, anyone for an operator);
otherwise it says "another actor".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy.engine import RowMapping

from uns_server.domain.enums import AckStatus, EventKind
from uns_server.domain.errors import AckConflict, AckDeadlinePassed, AckNotPending, NotFound
from uns_server.domain.validation import validate_ack_metadata, validate_notification_id
from uns_server.observability.metrics import Metrics
from uns_server.services.auth import Principal
from uns_server.store import acks, audit, events, notifications
from uns_server.store.db import Database, WriteTx
from uns_server.store.events import NewEvent

TIMEOUT_ACTOR = "uns-timeout-worker"


class Acks:
    def __init__(
        self, db: Database, clock: Callable[[], datetime], metrics: Metrics | None = None
    ) -> None:
        self._db = db
        self._clock = clock
        self._metrics = metrics or Metrics.noop()

    async def acknowledge(
        self,
        principal: Principal,
        notification_id: str,
        *,
        dismiss: bool,
        metadata: Mapping[str, Any],
    ) -> tuple[RowMapping, bool]:
        """Returns the settled row and whether this call was an idempotent repeat."""
        nid = validate_notification_id(notification_id)
        validate_ack_metadata(metadata)
        outcome = AckStatus.DISMISSED if dismiss else AckStatus.ACKED
        now = self._clock()
        async with self._db.write() as tx:
            row = await notifications.by_id(tx.conn, nid, for_update=True)
            if row is None or not principal.may_read(row["principal"]):
                raise NotFound(metadata={"notification_id": nid})
            status = row["ack_status"]
            info = {"notification_id": nid, "ack_state": status or "NONE"}
            if status is None:
                raise AckNotPending(
                    "the notification has no pending acknowledgement "
                    f"(state {row['status']}, require_ack {row['require_ack']})",
                    metadata={**info, "state": row["status"]},
                )
            if status == AckStatus.TIMED_OUT or (
                status == AckStatus.PENDING and row["deadline"] <= now
            ):
                raise AckDeadlinePassed(metadata={**info, "deadline": row["deadline"].isoformat()})
            if status != AckStatus.PENDING:
                if row["actor"] == principal.name and status == outcome:
                    return row, True
                raise _conflict(principal, status, row["actor"], info)
            await settle(tx, row, outcome, principal.name, dict(metadata), now)
            settled = await notifications.by_id(tx.conn, nid)
        assert settled is not None
        self._metrics.acknowledged(outcome.value)
        return settled, False

    async def expire_due(self, limit: int) -> int:
        """One sweep of the expiry worker: PENDING acks past their deadline -> TIMED_OUT."""
        now = self._clock()
        async with self._db.write() as tx:
            rows = await acks.due_deadlines(tx.conn, now, limit)
            for row in rows:
                await settle(
                    tx, row, AckStatus.TIMED_OUT, TIMEOUT_ACTOR, {"escalation_required": True}, now
                )
        self._metrics.ack_timeouts(len(rows))
        return len(rows)


def _conflict(
    principal: Principal, status: str, actor: str | None, info: dict[str, str]
) -> AckConflict:
    if actor == principal.name:
        return AckConflict(f"already {status} by you", metadata={**info, "actor": actor})
    if principal.may_name(actor):
        assert actor is not None
        return AckConflict(f"already {status} by {actor}", metadata={**info, "actor": actor})
    return AckConflict(f"already {status} by another actor", metadata=info)


async def settle(
    tx: WriteTx,
    row: RowMapping,
    outcome: AckStatus,
    actor: str,
    metadata: dict[str, Any],
    now: datetime,
) -> None:
    ok = await acks.settle_pending(
        tx.conn, row["id"], status=outcome, actor=actor, metadata=metadata, now=now
    )
    if not ok:  # the row is locked; this would be a bug in the caller
        raise AckConflict(metadata={"notification_id": row["id"]})
    await audit.record_ack(
        tx.conn,
        row["id"],
        old_status=row["ack_status"],
        new_status=outcome.value,
        actor=actor,
        metadata=metadata,
        now=now,
    )
    await events.append(
        tx,
        [
            NewEvent(
                row["id"],
                row["principal"],
                row["notification_type"],
                EventKind(outcome.value),
                {"actor": actor, "metadata": metadata},
            )
        ],
        now,
    )

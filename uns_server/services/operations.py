"""Operator actions on dead letters: Replay (new delivery cycle) and ResolveFailure.

Replay is refused while a dedup successor carries the obligation (it is PENDING or
already satisfied it): replaying then would deliver the same alert twice.

Both take the operator's free-text ``reason`` (at most ``REASON_MAX_CHARS`` characters,
empty when none was given) and record it in the event payload as ``reason``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from sqlalchemy.engine import RowMapping

from uns_server.domain.enums import EventKind, Status
from uns_server.domain.errors import (
    FieldViolation,
    InvalidRequest,
    NotDeadLettered,
    NotFound,
    ReplayBlocked,
)
from uns_server.domain.validation import validate_notification_id
from uns_server.services.auth import Principal
from uns_server.store import dispatch, events, notifications
from uns_server.store.db import TOPIC_WORK, Database, WriteTx
from uns_server.store.events import NewEvent

_CARRYING = (Status.PENDING.value, Status.DELIVERED.value, Status.DEDUPLICATED.value)
REASON_MAX_CHARS = 1024


def validate_reason(reason: str) -> str:
    """The operator's reason as given, or ``InvalidRequest`` when it is too long or holds
    NUL (which a PostgreSQL JSONB payload cannot store)."""
    problems = []
    if len(reason) > REASON_MAX_CHARS:
        problems.append(f"must be at most {REASON_MAX_CHARS} characters")
    if "\x00" in reason:
        problems.append("must not contain NUL characters")
    if problems:
        raise InvalidRequest(
            metadata={"fields": "reason"},
            violations=[FieldViolation("reason", p) for p in problems],
        )
    return reason


class Operations:
    def __init__(self, db: Database, clock: Callable[[], datetime]) -> None:
        self._db = db
        self._clock = clock

    async def _dead_letter(self, tx: WriteTx, notification_id: str) -> RowMapping:
        nid = validate_notification_id(notification_id)
        row = await notifications.by_id(tx.conn, nid, for_update=True)
        if row is None:
            raise NotFound(metadata={"notification_id": nid})
        if row["status"] != Status.FAILED or not row["dead_letter"]:
            raise NotDeadLettered(
                f"state {row['status']}, dead_letter {str(row['dead_letter']).lower()}",
                metadata={
                    "notification_id": nid,
                    "state": row["status"],
                    "dead_letter": str(row["dead_letter"]).lower(),
                },
            )
        return row

    async def replay(
        self, principal: Principal, notification_id: str, reason: str = ""
    ) -> RowMapping:
        reason = validate_reason(reason)
        now = self._clock()
        async with self._db.write() as tx:
            row = await self._dead_letter(tx, notification_id)
            successor_id = row["dedup_successor_id"]
            if successor_id:
                successor = await notifications.by_id(tx.conn, successor_id)
                if successor is not None and successor["status"] in _CARRYING:
                    raise ReplayBlocked(
                        metadata={
                            "notification_id": row["id"],
                            "dedup_successor_id": successor_id,
                            "successor_state": successor["status"],
                        }
                    )
            cycle = row["cycle"] + 1
            outcome: dict[str, object] = {
                "channels_attempted": [],
                "channels_succeeded": [],
                "channels_failed": [],
                "error_message": None,
            }
            await dispatch.update_rows(
                tx.conn,
                [row["id"]],
                status=Status.PENDING.value,
                dead_letter=False,
                cycle=cycle,
                cycle_attempts=0,
                next_attempt=now,
                lease_token=None,
                lease_until=None,
                outcome=outcome,
                updated_at=now,
            )
            await events.append(
                tx,
                [
                    NewEvent(
                        row["id"],
                        row["principal"],
                        row["notification_type"],
                        EventKind.REPLAY_REQUESTED,
                        {
                            "actor": principal.name,
                            "cycle": cycle,
                            "cumulative_attempts": row["attempts"],
                            "reason": reason,
                        },
                    )
                ],
                now,
            )
            tx.signal(TOPIC_WORK)
            replayed = await notifications.by_id(tx.conn, row["id"])
        assert replayed is not None
        return replayed

    async def resolve_failure(
        self, principal: Principal, notification_id: str, reason: str = ""
    ) -> RowMapping:
        reason = validate_reason(reason)
        now = self._clock()
        async with self._db.write() as tx:
            row = await self._dead_letter(tx, notification_id)
            await dispatch.update_rows(tx.conn, [row["id"]], dead_letter=False, updated_at=now)
            await events.append(
                tx,
                [
                    NewEvent(
                        row["id"],
                        row["principal"],
                        row["notification_type"],
                        EventKind.FAILURE_RESOLVED,
                        {"actor": principal.name, "reason": reason},
                    )
                ],
                now,
            )
            resolved = await notifications.by_id(tx.conn, row["id"])
        assert resolved is not None
        return resolved

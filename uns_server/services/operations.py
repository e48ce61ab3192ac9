"""Operator actions on dead letters: Replay (new delivery cycle) and ResolveFailure.

Replay is refused while a dedup successor carries the obligation (it is PENDING or
already satisfied it): replaying then would deliver the same alert twice. The rules
are ``domain.lifecycle``'s; this module loads, asks and stores.

With ``validate_only`` (AIP-163) both run every check on the current row and answer
what they would return (or raise the refusal they would meet) without writing.

Both take the operator's free-text ``reason`` (at most ``REASON_MAX_CHARS`` characters,
empty when none was given) and record it in the event payload as ``reason``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from uns_server.domain import lifecycle, moves
from uns_server.domain.enums import EventKind
from uns_server.domain.errors import FieldViolation, InvalidRequest, NotFound
from uns_server.domain.records import Notification
from uns_server.domain.validation import validate_notification_id
from uns_server.services.auth import Principal
from uns_server.store.port import TOPIC_WORK, NewEvent, ReadTransaction, Store

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
    def __init__(self, store: Store, clock: Callable[[], datetime]) -> None:
        self._store = store
        self._clock = clock

    async def _check_replay(self, tx: ReadTransaction, row: Notification) -> None:
        successor_id = row.dedup_successor_id
        successor = await tx.notifications.get(successor_id) if successor_id else None
        lifecycle.check_replay_unblocked(
            row.id, successor_id, successor.status if successor is not None else None
        )

    async def replay(
        self,
        principal: Principal,
        notification_id: str,
        reason: str = "",
        *,
        validate_only: bool = False,
        via: str | None = None,
    ) -> Notification:
        """The replayed notification; with ``validate_only``, as it would be. ``via``
        (e.g. ``console``) names where the request came from in the event payload."""
        reason = validate_reason(reason)
        nid = validate_notification_id(notification_id)
        now = self._clock()
        if validate_only:
            async with self._store.read() as tx:
                row = _dead_letter(nid, await tx.notifications.get(nid))
                await self._check_replay(tx, row)
            return moves.replayed(row, moves.DeadLetterReplay(row.id, row.cycle, now))
        async with self._store.write() as tx:
            row = _dead_letter(nid, await tx.notifications.get_locked(nid))
            await self._check_replay(tx, row)
            move = moves.DeadLetterReplay(row.id, row.cycle, now)
            # Read under its lock in this transaction and checked dead-lettered.
            (await tx.moves.replay(move)).expect(f"replay of {row.id}")
            await tx.events.append(
                [
                    NewEvent(
                        row.id,
                        row.principal,
                        row.notification_type,
                        EventKind.REPLAY_REQUESTED,
                        {
                            "actor": principal.name,
                            "cycle": move.cycle,
                            "cumulative_attempts": row.attempts,
                            "reason": reason,
                            **({"via": via} if via else {}),
                        },
                    )
                ],
                now,
            )
            tx.signal(TOPIC_WORK)
            replayed = await tx.notifications.get(row.id)
        assert replayed is not None
        return replayed

    async def resolve_failure(
        self,
        principal: Principal,
        notification_id: str,
        reason: str = "",
        *,
        validate_only: bool = False,
        via: str | None = None,
    ) -> Notification:
        """The resolved notification; with ``validate_only``, as it would be."""
        reason = validate_reason(reason)
        nid = validate_notification_id(notification_id)
        now = self._clock()
        if validate_only:
            async with self._store.read() as tx:
                row = _dead_letter(nid, await tx.notifications.get(nid))
            return moves.resolved(row, moves.ResolveFailure(row.id, now))
        async with self._store.write() as tx:
            row = _dead_letter(nid, await tx.notifications.get_locked(nid))
            resolve = moves.ResolveFailure(row.id, now)
            # Read under its lock in this transaction and checked dead-lettered.
            applied = await tx.moves.resolve_failure(resolve)
            applied.expect(f"resolution of {row.id}")
            await tx.events.append(
                [
                    NewEvent(
                        row.id,
                        row.principal,
                        row.notification_type,
                        EventKind.FAILURE_RESOLVED,
                        {
                            "actor": principal.name,
                            "reason": reason,
                            **({"via": via} if via else {}),
                        },
                    )
                ],
                now,
            )
            resolved = await tx.notifications.get(row.id)
        assert resolved is not None
        return resolved


def _dead_letter(nid: str, row: Notification | None) -> Notification:
    """The row, which must exist and be a dead letter."""
    if row is None:
        raise NotFound(metadata={"notification_id": nid})
    lifecycle.check_dead_lettered(nid, row.status, row.dead_letter)
    return row

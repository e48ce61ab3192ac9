"""The moves port (``store.port.Moves``): one named query per ``domain.moves`` move.

Each statement's WHERE holds the state the move expects (status, dead letter, cycle,
the owner a follower follows, the owner of a window), so a row that moved since the
caller read it is left alone, and the answer (``Applied``) says how many of the named
rows changed: fewer is a lost move, for the caller to handle. The column names live
here and in ``tables``; the domain speaks in moves.
"""

from __future__ import annotations

from sqlalchemy import (
    ColumnElement,
    Executable,
    Update,
    update,
)

from uns_server.domain.enums import ACK_OWED, AckStatus, Status
from uns_server.domain.moves import (
    EMPTY_OUTCOME,
    Applied,
    DeadLetterReplay,
    ExtendWindow,
    MoveWindow,
    Promote,
    RecordSuccessor,
    Relink,
    ResolveFailure,
    SatisfyFollowers,
)
from uns_server.domain.withdrawal import Scope, WithdrawRows
from uns_server.store import deliveries
from uns_server.store.bound import Bound
from uns_server.store.followups import stop_follow_ups
from uns_server.store.tables import dedup, inline
from uns_server.store.tables import notifications as n

_DEAD_LETTER = (n.c.status == Status.FAILED.value) & n.c.dead_letter
_OWED = sorted(s.value for s in ACK_OWED)


def _following(owner_id: str) -> ColumnElement[bool]:
    return (n.c.status == inline(Status.PENDING.value)) & (n.c.dedup_owner_id == owner_id)


class SqlMoves(Bound):
    __slots__ = ()

    async def replay(self, move: DeadLetterReplay) -> Applied:
        q = (
            update(n)
            .where(n.c.id == move.notification_id, _DEAD_LETTER, n.c.cycle == move.from_cycle)
            .values(
                status=Status.PENDING.value,
                dead_letter=False,
                cycle=move.cycle,
                cycle_attempts=0,
                next_attempt=move.at,
                lease_token=None,
                lease_until=None,
                outcome=EMPTY_OUTCOME,
                updated_at=move.at,
            )
        )
        applied = await self._changed(q, 1)
        if applied.changed:  # due again: a delivery job of its new cycle
            await deliveries.schedule(self._conn, [move.notification_id], move.at)
        return applied

    async def resolve_failure(self, move: ResolveFailure) -> Applied:
        q = (
            update(n)
            .where(n.c.id == move.notification_id, _DEAD_LETTER)
            .values(dead_letter=False, updated_at=move.at)
        )
        return await self._changed(q, 1)

    async def withdraw(self, move: WithdrawRows) -> Applied:
        ids = list(move.notification_ids)
        fenced = {
            "withdrawn_at": move.at,
            "withdrawn_by": move.actor,
            "withdraw_reason": move.reason,
            "lease_token": None,
            "lease_until": None,
            "followup_lease_token": None,
            "followup_lease_until": None,
            "updated_at": move.at,
        }
        if move.scope == Scope.NOTIFICATION:
            where = n.c.status == move.expected_status.value
            if move.expected_status == Status.FAILED:
                where = _DEAD_LETTER
            values = fenced | {
                "status": Status.WITHDRAWN.value,
                "dead_letter": False,
                "followup_at": None,
            }
        else:
            where = (n.c.status == Status.DELIVERED.value) & n.c.ack_status.in_(_OWED)
            values = fenced | {
                # Due now: a reminder or step waiting to retry is closed (STOPPED, with what
                # its channels said) by the follow-up worker; no claim takes it otherwise.
                "followup_at": move.at,
                "ack_status": AckStatus.WITHDRAWN.value,
                "snoozed_until": None,
                "actor": move.actor,
                "responded_at": move.at,
                "response_metadata": {"reason": move.reason} if move.reason else None,
            }
        q = update(n).where(n.c.id.in_(ids), where).values(values)
        applied = await self._changed_ids(q, len(ids))
        if applied.ids and move.scope == Scope.NOTIFICATION:  # no delivery left to make
            await deliveries.schedule(self._conn, applied.ids, move.at)
        if applied.ids:
            await stop_follow_ups(
                self._conn, applied.ids, move.at, "withdrawn while the step was sent"
            )
        return applied

    async def satisfy_followers(self, move: SatisfyFollowers) -> Applied:
        q = (
            update(n)
            .where(n.c.id.in_(list(move.follower_ids)), _following(move.leader_id))
            .values(status=Status.DEDUPLICATED.value, updated_at=move.at)
        )
        return await self._changed_ids(q, len(move.follower_ids))

    async def extend_window(self, move: ExtendWindow) -> Applied:
        q = (
            update(dedup)
            .where(
                dedup.c.key == move.key,
                (dedup.c.owner_id == move.owner_id) | dedup.c.owner_id.is_(None),
            )
            .values(owner_id=move.owner_id, until=move.until)
        )
        return await self._changed(q, 1)

    async def record_successor(self, move: RecordSuccessor) -> Applied:
        # Runs in the exhausted leader's settle transaction, which its fence let through.
        q = update(n).where(n.c.id == move.leader_id).values(dedup_successor_id=move.successor_id)
        return await self._changed(q, 1)

    async def promote(self, move: Promote) -> Applied:
        q = (
            update(n)
            .where(n.c.id == move.follower_id, _following(move.from_owner_id))
            .values(dedup_owner_id=None, next_attempt=move.at, updated_at=move.at)
        )
        applied = await self._changed(q, 1)
        if applied.changed:  # a leader now: its delivery job
            await deliveries.schedule(self._conn, [move.follower_id], move.at)
        return applied

    async def relink(self, move: Relink) -> Applied:
        q = (
            update(n)
            .where(n.c.id.in_(list(move.follower_ids)), _following(move.from_owner_id))
            .values(dedup_owner_id=move.to_owner_id, updated_at=move.at)
        )
        return await self._changed_ids(q, len(move.follower_ids))

    async def move_window(self, move: MoveWindow) -> Applied:
        q = (
            update(dedup)
            .where(dedup.c.key == move.key, dedup.c.owner_id == move.from_owner_id)
            .values(owner_id=move.to_owner_id)
        )
        return await self._changed(q, 1)

    async def _changed(self, statement: Executable, named: int) -> Applied:
        """Run a fenced UPDATE of ``named`` rows: how many it changed."""
        if named == 0:
            return Applied(0, 0)
        result = await self._conn.execute(statement)
        return Applied(named, int(result.rowcount))

    async def _changed_ids(self, statement: Update, named: int) -> Applied:
        if named == 0:
            return Applied(0, 0)
        ids = tuple(sorted((await self._conn.execute(statement.returning(n.c.id))).scalars()))
        return Applied(named, len(ids), ids)

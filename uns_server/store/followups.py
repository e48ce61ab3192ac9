"""The follow-ups' port (``store.port.FollowUps``): what an ack's reminders and
escalation steps write on the notification row, while their lease is their
``follow_up`` work row's (``domain.follow_up_jobs``; claim, settle and rescue are the
work table's, ``store.jobs``).

The row keeps what the obligation is owed: the counts of steps sent, the progress of a
step waiting to retry (``followup_step``), the references of the messages the steps
sent, and ``followup_at``, the next follow-up time readers are shown. These writes run
in the transaction whose fenced settle of the step's job landed (or, for a step closed
after its ack ended, under the row's lock), so they are not fenced again here.

``carry`` inserts the jobs a replica of the previous release never made: it kept its
follow-ups on the row (``followup_at``, ``followup_lease_*``), so a PENDING ack it
delivered has a follow-up time and no job. Gone with that release (a contract step).
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

from sqlalchemy import (
    and_,
    bindparam,
    case,
    exists,
    insert,
    literal,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from uns_server.domain import follow_up_jobs, person_rule_jobs
from uns_server.domain.enums import AckStatus
from uns_server.domain.jobs import CLAIMABLE, LIVE, JobState
from uns_server.domain.moves import RecordPersonRule, RetryFollowUpStep, SettleFollowUpStep
from uns_server.store.bound import Bound
from uns_server.store.tables import UtcDateTime, inline
from uns_server.store.tables import jobs as j
from uns_server.store.tables import notifications as n

_KIND: Any = inline(follow_up_jobs.KIND.value)
# What sends messages whose references the row learns only when it settles.
_SENDING_KINDS: list[Any] = [inline(k.value) for k in (follow_up_jobs.KIND, person_rule_jobs.KIND)]
_NOW = bindparam("now", type_=UtcDateTime())
# As the notification index's WHERE (``tables.jobs``), so the planner can use it.
_LIVE = j.c.state.in_([inline(s.value) for s in sorted(LIVE)])


def _step_running() -> Any:
    return (
        select(j.c.id)
        .where(
            j.c.kind.in_(_SENDING_KINDS),
            j.c.notification_id == bindparam("nid"),
            j.c.state == inline(JobState.RUNNING.value),
            j.c.lease_until > _NOW,
        )
        .limit(1)
    )


_STEP_RUNNING = _step_running()

# A PENDING ack (or one that ended while a step waited to retry, to close that step)
# past its follow-up time, that no lease of the previous release holds and no live
# ``follow_up`` job serves.
_ORPHANS = (
    select(n.c.id, n.c.followup_at)
    .where(
        (n.c.ack_status == AckStatus.PENDING.value) | n.c.followup_step.is_not(None),
        n.c.followup_at.is_not(None),
        n.c.followup_at <= _NOW,
        n.c.followup_lease_token.is_(None) | (n.c.followup_lease_until <= _NOW),
        ~exists().where(and_(j.c.notification_id == n.c.id, j.c.kind == _KIND, _LIVE)),
    )
    .order_by(n.c.followup_at)
    .limit(bindparam("limit"))
)


# Follow-ups an ended or paused answer stops (``domain.follow_up_jobs``): a step being
# sent loses its fence (its settle records LEASE_LOST), the others fall due at once (a
# step waiting to retry is closed STOPPED; the rest find the ack not PENDING and do
# nothing). Their successor, if any, is the next owed answer's business.
_running = j.c.state == inline(JobState.RUNNING.value)
_STOP = (
    update(j)
    .where(j.c.notification_id.in_(bindparam("ids", expanding=True)), j.c.kind == _KIND, _LIVE)
    .values(
        state=case((_running, JobState.CANCELLED.value), else_=j.c.state),
        finalized_at=case((_running, _NOW), else_=None),
        scheduled_at=case((_running, j.c.scheduled_at), else_=_NOW),
        lease_token=None,
        lease_until=None,
        last_error=case((_running, bindparam("why")), else_=j.c.last_error),
    )
)


# A snooze's end: the jobs the pause left waiting (made due by ``_STOP``, not yet
# claimed) are cancelled, so the end's own job is the one chain of follow-ups (two
# chains would each fire the same step). None runs: a claim while SNOOZED completes.
_CANCEL_WAITING = (
    update(j)
    .where(
        j.c.notification_id == bindparam("nid"),
        j.c.kind == _KIND,
        j.c.state.in_([inline(s.value) for s in sorted(CLAIMABLE)]),
    )
    .values(
        state=JobState.CANCELLED.value,
        finalized_at=_NOW,
        last_error="the snooze ended: its reminder's job follows up",
    )
)


async def cancel_waiting_follow_ups(
    conn: AsyncConnection, notification_id: str, now: datetime
) -> None:
    """Cancel the unclaimed ``follow_up`` jobs of a notification whose snooze ended."""
    await conn.execute(_CANCEL_WAITING, {"nid": notification_id, "now": now})


async def stop_follow_ups(
    conn: AsyncConnection, notification_ids: Collection[str], now: datetime, why: str
) -> None:
    """Stop the live ``follow_up`` jobs of these notifications (a withdrawal, a snooze)."""
    if notification_ids:
        await conn.execute(_STOP, {"ids": sorted(notification_ids), "now": now, "why": why})


class SqlFollowUpReads(Bound):
    __slots__ = ()

    async def sending(self, notification_id: str, now: datetime) -> bool:
        found = await self._conn.execute(_STEP_RUNNING, {"nid": notification_id, "now": now})
        return found.first() is not None


class SqlFollowUps(SqlFollowUpReads):
    __slots__ = ()

    async def look_again(self, notification_id: str, at: datetime | None) -> None:
        await self._set(notification_id, {"followup_at": at})

    async def record_progress(self, move: RetryFollowUpStep) -> None:
        values: dict[str, Any] = {
            "updated_at": move.now,
            "followup_step": move.step.to_json(),
            "followup_at": move.at,
        }
        if move.provider_refs is not None:
            values["provider_refs"] = dict(move.provider_refs)
        await self._set(move.notification_id, values)

    async def record_step(self, move: SettleFollowUpStep) -> None:
        values: dict[str, Any] = {
            "updated_at": move.now,
            "reminders_sent": move.counts.reminders_sent,
            "escalations_sent": move.counts.escalations_sent,
            "followup_at": move.next_at,
            "followup_step": None,
        }
        if move.provider_refs is not None:
            values["provider_refs"] = dict(move.provider_refs)
        await self._set(move.notification_id, values)

    async def record_person_rule(self, move: RecordPersonRule) -> None:
        values: dict[str, Any] = {"updated_at": move.now, "outcome": dict(move.outcome)}
        if move.provider_refs is not None:
            values["provider_refs"] = dict(move.provider_refs)
        await self._set(move.notification_id, values)

    async def carry(self, now: datetime, *, limit: int) -> int:
        orphans = _ORPHANS.cte("orphans")
        job = follow_up_jobs.timer("", None)
        rows = select(
            literal(job.kind.value),
            orphans.c.id,
            literal({}, j.c.args.type),
            literal(JobState.AVAILABLE.value),
            literal(0),
            literal(job.max_attempts),
            orphans.c.followup_at,
            _NOW,
        )
        columns = ["kind", "notification_id", "args", "state", "attempt", "max_attempts"]
        stmt = insert(j).from_select([*columns, "scheduled_at", "created_at"], rows)
        result = await self._conn.execute(stmt.returning(j.c.id), {"now": now, "limit": limit})
        return len(result.all())

    async def _set(self, notification_id: str, values: dict[str, Any]) -> None:
        await self._conn.execute(update(n).where(n.c.id == notification_id).values(values))

"""The dispatcher's claim (``Dispatch.claim``), River's shape: the due ``delivery``
jobs are picked from ``uns_jobs`` alone, through its due index (each carries its
notification's channels for the served test), and locked; then their leaders are
locked by primary key and leased, each still due (PENDING, following no one,
unleased or its lease expired), the job running under the leader's new token. A
picked job whose notification is no longer a due leader is cancelled, and one whose
leader another replica holds leased (a previous release's, during a rollout) waits
until that lease ends, in the same transaction. ``store.deliveries`` keeps the jobs
in step with the rows elsewhere."""

from __future__ import annotations

import uuid
from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Boolean, Text, any_, bindparam, func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from uns_server.domain.enums import Status
from uns_server.domain.jobs import JobKind, JobState
from uns_server.domain.records import Attempt
from uns_server.store import pg, records
from uns_server.store.jobs import SqlJobs
from uns_server.store.served import POSTGRESQL, served_job
from uns_server.store.tables import UtcDateTime, inline
from uns_server.store.tables import jobs as j
from uns_server.store.tables import notifications as n

DUE = (n.c.status == inline(Status.PENDING.value)) & n.c.dedup_owner_id.is_(None)
"""A due leader's row: PENDING, following no one."""
DELIVERY: Any = inline(JobKind.DELIVERY.value)
CLAIMABLE = j.c.state.in_([inline(JobState.AVAILABLE.value), inline(JobState.RETRYABLE.value)])

# Only jobs every one of whose notification's channels the claiming replica has
# configured (``store.served``): a replica never takes, and fails, work it cannot do.
SERVED_PG = served_job(POSTGRESQL)
SERVED_SQLITE = served_job("sqlite")
_NOW = bindparam("now", type_=UtcDateTime())
_FREE = n.c.lease_until.is_(None) | (n.c.lease_until <= _NOW)


def _due_jobs(served: Any) -> Any:
    """Due delivery jobs in claim order (priority, then due time): ``uns_jobs`` only."""
    return (
        select(j.c.id.label("job_id"), j.c.notification_id)
        .where(j.c.kind == DELIVERY, CLAIMABLE, j.c.scheduled_at <= _NOW, served)
        .order_by(j.c.priority.desc(), j.c.scheduled_at, j.c.id)
        .limit(bindparam("limit"))
    )


_DUE_JOBS = _due_jobs(SERVED_SQLITE)
_LEADERS = select(n).where(n.c.id.in_(bindparam("ids", expanding=True)), DUE, _FREE)
_HELD = select(n.c.id, n.c.lease_until).where(n.c.id.in_(bindparam("ids", expanding=True)), DUE)
_DELIVERY = frozenset({JobKind.DELIVERY})
_TAKE_LEASE = (
    update(n)
    .where(n.c.id == bindparam("b_id"))
    .values(
        lease_token=bindparam("b_token", type_=n.c.lease_token.type),
        lease_until=bindparam("b_until", type_=UtcDateTime()),
        attempts=n.c.attempts + 1,
        cycle_attempts=n.c.cycle_attempts + 1,
        provider_effect_may_have_occurred=(
            n.c.provider_effect_may_have_occurred | bindparam("b_recovered", type_=Boolean())
        ),
        updated_at=bindparam("b_now", type_=UtcDateTime()),
    )
)
# The job runs under the notification's token: a settle that lands on the one moves
# the other (``store.deliveries.settle``).
_TAKE_JOB = (
    update(j)
    .where(j.c.id == bindparam("b_job"))
    .values(
        state=JobState.RUNNING.value,
        attempt=j.c.attempt + 1,
        attempted_at=bindparam("b_now", type_=UtcDateTime()),
        lease_token=bindparam("b_token", type_=j.c.lease_token.type),
        lease_until=bindparam("b_until", type_=UtcDateTime()),
    )
)
_CANCEL = (
    update(j)
    .where(j.c.id.in_(bindparam("jobs", expanding=True)))
    .values(state=JobState.CANCELLED.value, finalized_at=_NOW, lease_token=None, lease_until=None)
)
_WAIT = (
    update(j)
    .where(j.c.id == bindparam("b_job"))
    .values(scheduled_at=bindparam("b_at", type_=UtcDateTime()))
)

# PostgreSQL does it all in one statement. ``picked``: the due jobs, locked (skipping
# those another claim holds); ``leaders``: their notifications still due and free,
# locked by primary key (as they were before the claim, each with a token made by the
# server); the jobs' updates ride as CTEs of the leaders' update. The tests of a job
# left out of ``leaders`` read the statement's snapshot of its notification.
_picked = _due_jobs(SERVED_PG).with_for_update(skip_locked=True).cte("picked")
# The picked jobs' notification ids as an array: ``id = ANY(...)`` keeps each read of
# the notifications a primary-key lookup whatever the planner believes of the CTE
# (without statistics a join to it may walk the whole table).
_PICKED_IDS = func.array(select(_picked.c.notification_id).scalar_subquery())
_leaders = (
    select(n, _picked.c.job_id, func.gen_random_uuid().cast(Text).label("claim_token"))
    .select_from(n.join(_picked, n.c.id == _picked.c.notification_id))
    .where(n.c.id == any_(_PICKED_IDS), DUE, _FREE)
    .with_for_update(skip_locked=True, of=n)
    .cte("leaders")
)
_unleased = _picked.c.job_id.not_in(select(_leaders.c.job_id).scalar_subquery())
_jobs_taken = (
    update(j)
    .where(j.c.id == _leaders.c.job_id)
    .values(
        state=JobState.RUNNING.value,
        attempt=j.c.attempt + 1,
        attempted_at=_NOW,
        lease_token=_leaders.c.claim_token,
        lease_until=bindparam("until", type_=UtcDateTime()),
    )
    .returning(j.c.id)
    .cte("jobs_taken")
)
_still = n.alias("still")
_stale = (
    update(j)
    .where(j.c.id == _picked.c.job_id, _unleased)
    .where(
        ~select(_still.c.id)
        .where(_still.c.id == _picked.c.notification_id)
        .where(_still.c.status == Status.PENDING.value, _still.c.dedup_owner_id.is_(None))
        .exists()
    )
    .values(state=JobState.CANCELLED.value, finalized_at=_NOW, lease_token=None, lease_until=None)
    .returning(j.c.id)
    .cte("stale")
)
_held = n.alias("held")
_waiting = (
    update(j)
    .where(j.c.id == _picked.c.job_id, _unleased, _held.c.id == _picked.c.notification_id)
    .where(_held.c.id == any_(_PICKED_IDS))
    .where(_held.c.status == Status.PENDING.value, _held.c.dedup_owner_id.is_(None))
    .where(_held.c.lease_until > _NOW)
    .values(scheduled_at=_held.c.lease_until)
    .returning(j.c.id)
    .cte("waiting")
)
_CLAIM_PG = pg.Statement(
    update(n)
    .where(n.c.id == _leaders.c.id)
    .values(
        lease_token=_leaders.c.claim_token,
        lease_until=bindparam("until", type_=UtcDateTime()),
        attempts=n.c.attempts + 1,
        cycle_attempts=n.c.cycle_attempts + 1,
        provider_effect_may_have_occurred=(
            n.c.provider_effect_may_have_occurred | _leaders.c.lease_token.is_not(None)
        ),
        updated_at=_NOW,
    )
    .add_cte(_jobs_taken, _stale, _waiting)
    .returning(*_leaders.c)
)


async def claim(
    conn: AsyncConnection,
    *,
    now: datetime,
    limit: int,
    lease: timedelta,
    channels: Collection[str],
) -> list[Attempt]:
    """``SqlDispatch.claim``."""
    until = now + lease
    await SqlJobs(conn).rescue_expired(_DELIVERY, now=now, limit=limit)
    driver = pg.driver(conn)
    if driver is not None:
        params = {"now": now, "limit": limit, "until": until, "channels": sorted(channels)}
        rows = await _CLAIM_PG.fetch(driver, params)
        leased = [records.attempt(row, row["claim_token"]) for row in rows]
        # RETURNING's order is none: claim order again
        return sorted(leased, key=lambda a: -a.notification.priority)
    params = {"now": now, "limit": limit, "channels": sorted(channels)}
    picked = (await conn.execute(_DUE_JOBS, params)).all()
    if not picked:
        return []
    ids = [nid for _, nid in picked]
    found = (await conn.execute(_LEADERS, {"ids": ids, "now": now})).mappings().all()
    leaders = {row["id"]: row for row in found}
    held = dict((await conn.execute(_HELD, {"ids": ids})).all()) if len(leaders) < len(ids) else {}
    leases: list[Attempt] = []
    taken: list[dict[str, Any]] = []
    waiting: list[dict[str, Any]] = []
    stale: list[int] = []
    for job_id, nid in picked:  # claim order
        row = leaders.get(nid)
        if row is not None:
            a = records.attempt(row, str(uuid.uuid4()))
            leases.append(a)
            taken.append(
                {
                    "b_id": nid,
                    "b_job": job_id,
                    "b_token": a.lease_token,
                    "b_until": until,
                    "b_recovered": a.recovered,
                    "b_now": now,
                }
            )
        elif nid in held:  # leased elsewhere, not expired: due when that lease ends
            waiting.append({"b_job": job_id, "b_at": held[nid]})
        else:
            stale.append(job_id)
    if taken:
        await conn.execute(_TAKE_LEASE, taken)
        await conn.execute(_TAKE_JOB, taken)
    if waiting:
        await conn.execute(_WAIT, waiting)
    if stale:
        await conn.execute(_CANCEL, {"jobs": stale, "now": now})
    return leases

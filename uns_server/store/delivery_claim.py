"""The dispatcher's claim (``Dispatch.claim``), River's shape: the due ``delivery``
jobs are picked from ``uns_jobs`` alone, through its due index (each carries its
notification's channels for the served test), and locked; then their leaders are read
by primary key, and each job still serving a due leader (PENDING, following no one,
not leased by a replica of the previous release) runs under a new token. The job is the
fence: the notification is not written (``store.deliveries`` says how its settle and
every writer that ends a delivery's due-ness meet that fence).

The notification is read, not locked: a writer that ends its due-ness (withdrawal,
promotion, a hold) cancels or retimes its live job in the same transaction, and so
waits for the claim's lock on the job and then revokes the lease it took.

A job that still holds a token (the rescuer keeps an expired lease's) was interrupted:
the attempt under that token never settled, its effect is unknown. Its claim counts that
attempt on the notification and flags it ``provider_effect_may_have_occurred``, the one
write to the notification a claim makes, and only on recovery. A previous release's
replica leased the notification itself: its lease, once expired, is recovered the same
way (its claim had counted the attempt already); one not yet expired makes the job wait
until it ends. A picked job whose notification is no longer a due leader is cancelled.
All of it in the same transaction."""

from __future__ import annotations

import uuid
from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Integer, Text, any_, bindparam, case, func, select, update
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
# Not leased by a replica of the previous release (which leased the notification).
_FREE = n.c.lease_until.is_(None) | (n.c.lease_until <= _NOW)


def _due_jobs(served: Any) -> Any:
    """Due delivery jobs in claim order (priority, then due time): ``uns_jobs`` only,
    each with the token of an interrupted attempt, if any."""
    return (
        select(j.c.id.label("job_id"), j.c.notification_id, j.c.lease_token.label("interrupted"))
        .where(j.c.kind == DELIVERY, CLAIMABLE, j.c.scheduled_at <= _NOW, served)
        .order_by(j.c.priority.desc(), j.c.scheduled_at, j.c.id)
        .limit(bindparam("limit"))
    )


_DUE_JOBS = _due_jobs(SERVED_SQLITE)
_LEADERS = select(n).where(n.c.id.in_(bindparam("ids", expanding=True)), DUE, _FREE)
_HELD = select(n.c.id, n.c.lease_until).where(n.c.id.in_(bindparam("ids", expanding=True)), DUE)
_DELIVERY = frozenset({JobKind.DELIVERY})
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
# The interrupted attempt counted (unless a previous release's claim counted it: its
# lease is on the notification) and its effect flagged; that lease cleared.
_RECOVER = (
    update(n)
    .where(n.c.id == bindparam("b_id"))
    .values(
        attempts=n.c.attempts + bindparam("b_uncounted", type_=Integer()),
        cycle_attempts=n.c.cycle_attempts + bindparam("b_uncounted", type_=Integer()),
        provider_effect_may_have_occurred=True,
        lease_token=None,
        lease_until=None,
        updated_at=bindparam("b_now", type_=UtcDateTime()),
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
# those another claim holds); ``leaders``: their notifications still due and free, read
# by primary key, each with a token made by the server; the jobs' and the recovered
# notifications' updates are CTEs of the statement, which returns ``leaders``. The
# tests of a job left out of ``leaders`` read the statement's snapshot of its
# notification.
_picked = _due_jobs(SERVED_PG).with_for_update(skip_locked=True).cte("picked")
# The picked jobs' notification ids as an array: ``id = ANY(...)`` keeps each read of
# the notifications a primary-key lookup whatever the planner believes of the CTE
# (without statistics a join to it may walk the whole table).
_PICKED_IDS = func.array(select(_picked.c.notification_id).scalar_subquery())
_leaders = (
    select(
        n,
        _picked.c.job_id,
        _picked.c.interrupted,
        func.gen_random_uuid().cast(Text).label("claim_token"),
    )
    .select_from(n.join(_picked, n.c.id == _picked.c.notification_id))
    .where(n.c.id == any_(_PICKED_IDS), DUE, _FREE)
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
_recovered = (
    update(n)
    .where(n.c.id == _leaders.c.id)
    .where(_leaders.c.interrupted.is_not(None) | _leaders.c.lease_token.is_not(None))
    .values(
        attempts=n.c.attempts + case((_leaders.c.lease_token.is_(None), 1), else_=0),
        cycle_attempts=n.c.cycle_attempts + case((_leaders.c.lease_token.is_(None), 1), else_=0),
        provider_effect_may_have_occurred=True,
        lease_token=None,
        lease_until=None,
        updated_at=_NOW,
    )
    .returning(n.c.id)
    .cte("recovered")
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
_CLAIM_PG = pg.Statement(select(_leaders).add_cte(_jobs_taken, _recovered, _stale, _waiting))


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
        leased = [records.attempt(row, row["claim_token"], row["interrupted"]) for row in rows]
        # The statement's order is none: claim order again
        return sorted(leased, key=lambda a: -a.notification.priority)
    params = {"now": now, "limit": limit, "channels": sorted(channels)}
    picked = (await conn.execute(_DUE_JOBS, params)).all()
    if not picked:
        return []
    ids = [nid for _, nid, _ in picked]
    found = (await conn.execute(_LEADERS, {"ids": ids, "now": now})).mappings().all()
    leaders = {row["id"]: row for row in found}
    held = dict((await conn.execute(_HELD, {"ids": ids})).all()) if len(leaders) < len(ids) else {}
    leases: list[Attempt] = []
    taken: list[dict[str, Any]] = []
    recovered: list[dict[str, Any]] = []
    waiting: list[dict[str, Any]] = []
    stale: list[int] = []
    for job_id, nid, interrupted in picked:  # claim order
        row = leaders.get(nid)
        if row is not None:
            a = records.attempt(row, str(uuid.uuid4()), interrupted)
            leases.append(a)
            taken.append(
                {"b_job": job_id, "b_token": a.lease_token, "b_until": until, "b_now": now}
            )
            if a.recovered:
                uncounted = 1 if row["lease_token"] is None else 0
                recovered.append({"b_id": nid, "b_uncounted": uncounted, "b_now": now})
        elif nid in held:  # leased elsewhere, not expired: due when that lease ends
            waiting.append({"b_job": job_id, "b_at": held[nid]})
        else:
            stale.append(job_id)
    if taken:
        await conn.execute(_TAKE_JOB, taken)
    if recovered:
        await conn.execute(_RECOVER, recovered)
    if waiting:
        await conn.execute(_WAIT, waiting)
    if stale:
        await conn.execute(_CANCEL, {"jobs": stale, "now": now})
    return leases

"""The dispatcher's claim (``Dispatch.claim``): due ``delivery`` jobs joined to their
leaders, each job run under its leader's new lease token, the leader leased as before
(``store.deliveries`` keeps the jobs in step with the rows). Split from
``store.dispatch`` (its settles) by concern: the claim's statements, built once at
import, and the one method that runs them."""

from __future__ import annotations

import uuid
from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Boolean, Text, bindparam, func, literal_column, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from uns_server.domain.enums import Status
from uns_server.domain.jobs import JobKind, JobState
from uns_server.domain.records import Attempt
from uns_server.store import pg, records
from uns_server.store.jobs import SqlJobs
from uns_server.store.served import POSTGRESQL, served
from uns_server.store.tables import UtcDateTime
from uns_server.store.tables import jobs as j
from uns_server.store.tables import notifications as n

DUE = (n.c.status == Status.PENDING.value) & n.c.dedup_owner_id.is_(None)
"""A due leader's row: PENDING, following no one."""
DELIVERY: Any = literal_column(f"'{JobKind.DELIVERY.value}'")
CLAIMABLE = j.c.state.in_([literal_column("'available'"), literal_column("'retryable'")])

# Only rows every one of whose channels the claiming replica has configured
# (``store.served``): a replica never takes, and fails, work it cannot do.
SERVED_PG = served(POSTGRESQL)
SERVED_SQLITE = served("sqlite")


def _claim_due(served: Any) -> Any:
    """Due delivery jobs (claim order: priority, then due time) joined to their
    leaders, which must still be due, unleased (or their lease expired) and served
    here. Both rows are locked: the claim still leases the notification, and its copy
    (as before the claim) is what the settlement decides from."""
    now = bindparam("now", type_=UtcDateTime())
    return (
        select(n, j.c.id.label("job_id"))
        .select_from(j.join(n, n.c.id == j.c.notification_id))
        .where(
            j.c.kind == DELIVERY,
            CLAIMABLE,
            j.c.scheduled_at <= now,
        )
        .where(DUE, n.c.lease_until.is_(None) | (n.c.lease_until <= now))
        .where(served)
        .order_by(j.c.priority.desc(), j.c.scheduled_at, j.c.id)
        .limit(bindparam("limit"))
    )


_CLAIM_DUE = _claim_due(SERVED_SQLITE)
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
# PostgreSQL claims and leases in one statement: the locked due jobs and leaders (the
# leaders as they were before the claim, each with a token made by the server), the
# jobs' update riding as a CTE, joined to the leaders' update.
_picked = (
    _claim_due(SERVED_PG)
    .add_columns(func.gen_random_uuid().cast(Text).label("claim_token"))
    .with_for_update(skip_locked=True, of=[j, n])
    .cte("picked")
)
_jobs_taken = (
    update(j)
    .where(j.c.id == _picked.c.job_id)
    .values(
        state=JobState.RUNNING.value,
        attempt=j.c.attempt + 1,
        attempted_at=bindparam("now", type_=UtcDateTime()),
        lease_token=_picked.c.claim_token,
        lease_until=bindparam("until", type_=UtcDateTime()),
    )
    .returning(j.c.id)
    .cte("jobs_taken")
)
_CLAIM_PG = pg.Statement(
    update(n)
    .where(n.c.id == _picked.c.id)
    .values(
        lease_token=_picked.c.claim_token,
        lease_until=bindparam("until", type_=UtcDateTime()),
        attempts=n.c.attempts + 1,
        cycle_attempts=n.c.cycle_attempts + 1,
        provider_effect_may_have_occurred=(
            n.c.provider_effect_may_have_occurred | _picked.c.lease_token.is_not(None)
        ),
        updated_at=bindparam("now", type_=UtcDateTime()),
    )
    .add_cte(_jobs_taken)
    .returning(*_picked.c)
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
    due = (await conn.execute(_CLAIM_DUE, params)).mappings().all()
    leases = [records.attempt(row, str(uuid.uuid4())) for row in due]
    if leases:
        taken = [
            {
                "b_id": a.notification.id,
                "b_job": row["job_id"],
                "b_token": a.lease_token,
                "b_until": until,
                "b_recovered": a.recovered,
                "b_now": now,
            }
            for a, row in zip(leases, due, strict=True)
        ]
        await conn.execute(_TAKE_LEASE, taken)
        await conn.execute(_TAKE_JOB, taken)
    return leases

"""The work table's SQL (``store.port.Jobs``): River's ``river_job`` statements, each
one statement for many rows.

- claim (``JobGetAvailable``): ``UPDATE ... WHERE id IN (SELECT ... ORDER BY
  priority DESC, scheduled_at, id LIMIT n FOR UPDATE SKIP LOCKED) RETURNING``; on SQLite the same
  statement (no row locks: its one writer serialises claimers). The rows claimed
  together share one fresh lease token: the fence is (id, token), and a row claimed
  again always gets another claim's token.
- settle (``JobSetStateIfRunningMany``): one UPDATE joined to the settles, each row
  guarded by ``state = 'running'`` and its token, ``RETURNING id``: the ids that
  landed. PostgreSQL unnests one array per field (one prepared statement for any
  batch); SQLite joins a ``VALUES`` list.
- rescue (River's rescuer): expired leases back to retryable, or discarded when the
  attempts are spent (``domain.jobs.rescued``), in one UPDATE, for every kind at once
  (``workers.rescuer``).
- retention (``JobDeleteBefore``): final rows finalized before a cutoff.

State literals are written into the SQL (not bound) so both planners can match the
partial indexes of ``tables.jobs`` (their WHERE clauses are the same text). Kinds are
an enum of ours, likewise written in: one claim statement per set of kinds, built
once; a single kind reads the due index in claim order. On PostgreSQL the claim goes
straight to asyncpg (``store.pg``), compiled once.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Text,
    bindparam,
    case,
    column,
    delete,
    func,
    insert,
    or_,
    select,
    text,
    update,
    values,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from uns_server.domain.jobs import FINALIZED, JobKind, JobState, NewJob, SettleJob
from uns_server.domain.message_updates import MessageUpdate
from uns_server.domain.records import Job
from uns_server.store import pg, records
from uns_server.store.bound import Bound
from uns_server.store.tables import UtcDateTime, inline
from uns_server.store.tables import jobs as j
from uns_server.store.tables import message_updates as mu

RESCUED_ERROR = "the lease expired before the attempt settled"
# The same text as the due index's WHERE (``tables.jobs``).
_CLAIMABLE = text("state IN ('available', 'retryable')")


def _state_is(state: JobState) -> Any:
    return j.c.state == inline(state.value)


def _kind_in(kinds: Collection[JobKind]) -> Any:
    if not kinds:
        raise ValueError("no kinds named")
    return j.c.kind.in_([inline(k.value) for k in sorted(kinds)])


_NOW = bindparam("now", type_=UtcDateTime())
_FINAL_SQL = ", ".join(f"'{s.value}'" for s in sorted(FINALIZED))
_SETTLE_PG = f"""
UPDATE uns_jobs SET
    state = r.state,
    scheduled_at = COALESCE(r.scheduled_at, uns_jobs.scheduled_at),
    finalized_at = CASE WHEN r.state IN ({_FINAL_SQL}) THEN $6::timestamptz END,
    last_error = COALESCE(r.error, uns_jobs.last_error),
    lease_token = NULL,
    lease_until = NULL
FROM unnest($1::bigint[], $2::text[], $3::text[], $4::timestamptz[], $5::text[])
    AS r(id, token, state, scheduled_at, error)
WHERE uns_jobs.id = r.id AND uns_jobs.state = 'running' AND uns_jobs.lease_token = r.token
RETURNING uns_jobs.id
"""
INSERT_PG = pg.Insert(j)
"""The insert of job rows (``rows``): an executemany, or a rider of another statement."""


def _claim_statement(kinds: Collection[JobKind]) -> Any:
    due = (
        select(j.c.id)
        .where(_CLAIMABLE, _kind_in(kinds), j.c.scheduled_at <= _NOW)
        .order_by(j.c.priority.desc(), j.c.scheduled_at, j.c.id)
        .limit(bindparam("limit"))
        .with_for_update(skip_locked=True)
    )
    return (
        update(j)
        .where(j.c.id.in_(due.scalar_subquery()))
        .values(
            state=JobState.RUNNING.value,
            attempt=j.c.attempt + 1,
            attempted_at=_NOW,
            lease_token=bindparam("token", type_=j.c.lease_token.type),
            lease_until=bindparam("until", type_=UtcDateTime()),
        )
        .returning(*j.c)
    )


def _rescue_statement(kinds: Collection[JobKind]) -> Any:
    expired = (
        select(j.c.id)
        .where(_state_is(JobState.RUNNING), _kind_in(kinds), j.c.lease_until <= _NOW)
        .order_by(j.c.lease_until, j.c.id)
        .limit(bindparam("limit"))
        .with_for_update(skip_locked=True)
    )
    spent = j.c.attempt >= j.c.max_attempts  # domain.jobs.rescued
    return (
        update(j)
        .where(j.c.id.in_(expired.scalar_subquery()))
        .values(
            state=case((spent, JobState.DISCARDED.value), else_=JobState.RETRYABLE.value),
            scheduled_at=case((spent, j.c.scheduled_at), else_=_NOW),
            finalized_at=case((spent, _NOW), else_=None),
            # The token stays: the attempt made under it never settled (a delivery's
            # next claim reads it as interrupted, ``store.delivery_claim``); every
            # settle also asks for ``running``, so it fences nothing.
            lease_until=None,
            last_error=RESCUED_ERROR,
        )
        .returning(*j.c)
    )


def _next_due_statement(kinds: Collection[JobKind]) -> Any:
    due = select(j.c.scheduled_at).where(_CLAIMABLE, _kind_in(kinds))
    return due.order_by(j.c.scheduled_at).limit(1)


def _next_rescue_statement(kinds: Collection[JobKind]) -> Any:
    running = select(j.c.lease_until).where(_state_is(JobState.RUNNING), _kind_in(kinds))
    return running.order_by(j.c.lease_until).limit(1)


class _ByKinds:
    """A statement per set of kinds (and its asyncpg form), built on first use."""

    def __init__(self, build: Any) -> None:
        self._build = build
        self._built: dict[frozenset[JobKind], tuple[Any, pg.Statement]] = {}

    def __call__(self, kinds: Collection[JobKind]) -> tuple[Any, pg.Statement]:
        key = frozenset(kinds)
        found = self._built.get(key)
        if found is None:
            stmt = self._build(key)
            found = self._built[key] = (stmt, pg.Statement(stmt))
        return found


_CLAIM = _ByKinds(_claim_statement)
_RESCUE = _ByKinds(_rescue_statement)
_NEXT_DUE = _ByKinds(_next_due_statement)
_NEXT_RESCUE = _ByKinds(_next_rescue_statement)


def rows(jobs: Sequence[NewJob], now: datetime) -> list[dict[str, Any]]:
    """``jobs`` as the rows ``insert_rows`` (or ``INSERT_PG`` riding) inserts."""
    return [_row(job, now) for job in jobs]


async def insert_rows(conn: AsyncConnection, rows: list[dict[str, Any]]) -> None:
    """Insert job ``rows`` (``rows``) in one statement: for a store module that makes
    work in the commit of its own write (``store.dispatch``: the ack deadline)."""
    if not rows:
        return
    driver = pg.driver(conn)
    if driver is not None:
        await INSERT_PG.executemany(driver, rows)
    else:
        await conn.execute(insert(j), rows)


def _row(job: NewJob, now: datetime) -> dict[str, Any]:
    return {
        "kind": job.kind.value,
        "notification_id": job.notification_id,
        "args": dict(job.args),
        "state": JobState.AVAILABLE.value,
        "attempt": 0,
        "max_attempts": job.max_attempts,
        "scheduled_at": job.scheduled_at or now,
        "attempted_at": None,
        "finalized_at": None,
        "lease_token": None,
        "lease_until": None,
        "last_error": None,
        "created_at": now,
        "priority": job.priority,
    }


class SqlJobReads(Bound):
    __slots__ = ()

    async def next_due_at(self, kinds: Collection[JobKind]) -> datetime | None:
        stmt, _ = _NEXT_DUE(kinds)
        due: datetime | None = (await self._conn.execute(stmt)).scalar()
        return due

    async def next_rescue_at(self, kinds: Collection[JobKind]) -> datetime | None:
        stmt, _ = _NEXT_RESCUE(kinds)
        expiry: datetime | None = (await self._conn.execute(stmt)).scalar()
        return expiry


class SqlJobs(SqlJobReads):
    __slots__ = ()

    async def insert_many(self, jobs: Sequence[NewJob], now: datetime) -> None:
        await insert_rows(self._conn, rows(jobs, now))

    async def claim(
        self, kinds: Collection[JobKind], *, now: datetime, limit: int, lease: timedelta
    ) -> Sequence[Job]:
        params = {"now": now, "limit": limit, "token": str(uuid.uuid4()), "until": now + lease}
        stmt, stmt_pg = _CLAIM(kinds)
        driver = pg.driver(self._conn)
        if driver is not None:
            rows: Any = await stmt_pg.fetch(driver, params)
        else:
            rows = (await self._conn.execute(stmt, params)).mappings()
        claimed = [records.job(row) for row in rows]
        # RETURNING's order is none: claim order again
        return sorted(claimed, key=lambda c: (-c.priority, c.scheduled_at, c.id))

    async def settle_many(self, settles: Sequence[SettleJob], now: datetime) -> frozenset[int]:
        if not settles:
            return frozenset()
        driver = pg.driver(self._conn)
        if driver is not None:
            columns = [
                [s.id for s in settles],
                [s.lease_token for s in settles],
                [s.state.value for s in settles],
                [s.scheduled_at for s in settles],
                [s.error for s in settles],
            ]
            return frozenset(r["id"] for r in await driver.fetch(_SETTLE_PG, *columns, now))
        r = (
            values(
                column("id", j.c.id.type),
                column("token", Text()),
                column("state", Text()),
                column("scheduled_at", UtcDateTime()),
                column("error", Text()),
                name="r",
            )
            .data([(s.id, s.lease_token, s.state.value, s.scheduled_at, s.error) for s in settles])
            .cte("r")
        )
        stmt = (
            update(j)
            .where(j.c.id == r.c.id, _state_is(JobState.RUNNING), j.c.lease_token == r.c.token)
            .values(
                state=r.c.state,
                scheduled_at=func.coalesce(r.c.scheduled_at, j.c.scheduled_at),
                finalized_at=case((r.c.state.in_([s.value for s in FINALIZED]), _NOW), else_=None),
                last_error=func.coalesce(r.c.error, j.c.last_error),
                lease_token=None,
                lease_until=None,
            )
            .returning(j.c.id)
        )
        return frozenset((await self._conn.execute(stmt, {"now": now})).scalars())

    async def rescue_expired(
        self, kinds: Collection[JobKind], *, now: datetime, limit: int
    ) -> Sequence[Job]:
        stmt, _ = _RESCUE(kinds)
        rows = (await self._conn.execute(stmt, {"now": now, "limit": limit})).mappings()
        return sorted((records.job(row) for row in rows), key=lambda c: c.id)

    async def delete_finished_before(
        self, cutoff: datetime, *, limit: int, states: Collection[JobState] = FINALIZED
    ) -> int:
        if not set(states) <= FINALIZED:
            raise ValueError(f"only final rows are deleted, not {sorted(set(states) - FINALIZED)}")
        if not states:
            return 0
        old = (
            select(j.c.id)
            .where(
                j.c.finalized_at.is_not(None),
                j.c.finalized_at < bindparam("cutoff", type_=UtcDateTime()),
                j.c.state.in_([inline(s.value) for s in sorted(states)]),
            )
            .order_by(j.c.finalized_at, j.c.id)
            .limit(limit)
        )
        result = await self._conn.execute(
            delete(j).where(j.c.id.in_(old.scalar_subquery())), {"cutoff": cutoff}
        )
        return int(result.rowcount)

    async def carry_message_updates(self, now: datetime, *, limit: int) -> int:
        unleased = (
            select(mu.c.id)
            .where(
                mu.c.status == inline("PENDING"),
                or_(mu.c.lease_until.is_(None), mu.c.lease_until <= _NOW),
            )
            .order_by(mu.c.next_attempt)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        stmt = delete(mu).where(mu.c.id.in_(unleased.scalar_subquery())).returning(*mu.c)
        carried = (await self._conn.execute(stmt, {"now": now})).mappings().all()
        await insert_rows(self._conn, [_carried(row) for row in carried])
        return len(carried)


def _carried(row: Any) -> dict[str, Any]:
    """An old outbox row as the ``message_update`` job it becomes (migration 0015 does
    the same to the rows it finds)."""
    update = MessageUpdate(row["notification_id"], row["channel"], row["reference"], row["outcome"])
    return {
        **_row(update.job(), row["created_at"]),
        "state": (JobState.RETRYABLE if row["attempts"] else JobState.AVAILABLE).value,
        "attempt": row["attempts"],
        "scheduled_at": row["next_attempt"],
        "last_error": row["last_error"],
    }

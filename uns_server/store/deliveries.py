"""Delivery jobs (``JobKind.DELIVERY``, SPEC §7 "One work engine"): every PENDING
leader has one live job (available, retryable or running; ``tables.DELIVERY_LIVE``,
unique per notification), due at its ``next_attempt``, which the dispatcher claims
(``store.dispatch``).

The job is the fence of an attempt: the claim leases the job alone
(``store.delivery_claim``), and a settle writes the notification only while its job
still runs under the attempt's token (``held_by``), then moves the job, in the same
transaction. A writer that ends a delivery's due-ness cancels its job, which revokes
the lease (a withdrawal's settle-to-be finds no running job):

- ``new_rows``: the jobs of leaders being inserted (intake), running under the
  notification's token when intake hands the leader over already leased;
- ``schedule``: after a write that may make rows due or end them (replay, promotion,
  withdrawal, a window's retime), each named row's job matches it again: a due leader's
  job inserted or retimed (one ``INSERT ... SELECT ... ON CONFLICT``), any other row's
  live job cancelled;
- ``settle`` (or ``SETTLE_PG`` riding in an events append): the job of each
  notification whose fenced settle landed, still under the attempt's token: retryable
  at the retry's time, completed once delivered, discarded once failed.

Whoever asks whether a notification's delivery is leased reads it from the job
(``store.delivery_leases``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Text,
    and_,
    case,
    column,
    literal,
    literal_column,
    select,
    text,
    update,
    values,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from uns_server.domain.enums import Status
from uns_server.domain.jobs import DELIVERY_MAX_ATTEMPTS, FINALIZED, JobKind, JobState, NewJob
from uns_server.domain.records import Notification
from uns_server.store import jobs, pg
from uns_server.store.tables import DELIVERY_LIVE, UtcDateTime, inline
from uns_server.store.tables import jobs as j
from uns_server.store.tables import notifications as n

_LIVE = sorted(s.value for s in (JobState.AVAILABLE, JobState.RETRYABLE, JobState.RUNNING))
_KIND: Any = inline(JobKind.DELIVERY.value)
_FINAL_SQL = ", ".join(f"'{s.value}'" for s in sorted(FINALIZED))
# A job still under an attempt's token: running, or rescued (the rescuer keeps the token)
# and not claimed again. The settle whose fence held moves it either way, so the job and
# its notification never part (``settle``).
_UNDER_TOKEN = [inline(JobState.RUNNING.value), inline(JobState.RETRYABLE.value)]


def held_by(token: Any, seen: Any, now: Any | None = None) -> Any:
    """The fence of a settle of ``uns_notifications``: its delivery job runs under
    ``token`` (and, with ``now``, its lease has not expired), and the row is still the
    PENDING leader the claim saw, ``seen`` attempts counted.

    The row's own columns are the part PostgreSQL checks again when the UPDATE waited
    for a concurrent writer of the row (the job is read as of the statement's start):
    every writer that ends an attempt's lease changes them (a withdrawal the status, a
    settle or a recovering claim the count), so a settle a withdrawal overtook while it
    waited lands nothing. The job's own settle (``settle``) checks its token again on
    its latest version."""
    running = select(j.c.id).where(
        j.c.notification_id == n.c.id,
        j.c.kind == _KIND,
        j.c.state == inline(JobState.RUNNING.value),
        j.c.lease_token == token,
    )
    if now is not None:
        running = running.where(j.c.lease_until > now)
    return and_(
        n.c.status == inline(Status.PENDING.value),
        n.c.dedup_owner_id.is_(None),
        n.c.attempts == seen,
        running.exists(),
    )


HELD_BY_SQL = (
    "uns_notifications.status = 'PENDING' AND uns_notifications.dedup_owner_id IS NULL "
    "AND uns_notifications.attempts = r.b_seen "
    "AND EXISTS (SELECT 1 FROM uns_jobs WHERE uns_jobs.notification_id = uns_notifications.id "
    # The ANY keeps the jobs read to the named ones whatever the planner believes of
    # the join (a hashed subplan over every running job, with stale statistics).
    "AND uns_jobs.notification_id = ANY({ids}) "
    "AND uns_jobs.kind = 'delivery' AND uns_jobs.state = 'running' "
    "AND uns_jobs.lease_token = r.b_token AND uns_jobs.lease_until > r.b_now)"
)
"""``held_by`` with an expiry, over a ``pg.FencedUpdate``'s ``r.b_token``, ``r.b_seen``,
``r.b_now`` and ``{ids}``."""


def is_live_delivery() -> Any:
    """The jobs ``ux_uns_jobs_delivery`` covers (the same text as its WHERE)."""
    return and_(j.c.kind == _KIND, j.c.state.in_([inline(s) for s in _LIVE]))


def job(new: Notification) -> NewJob:
    """A leader's delivery job: due when the leader is, at its priority, carrying its
    effective channels (the claim's ``served`` test reads them without the row)."""
    return NewJob(
        JobKind.DELIVERY,
        {"channels": list(new.notification.effective.channels)},
        DELIVERY_MAX_ATTEMPTS,
        notification_id=new.id,
        scheduled_at=new.next_attempt,
        priority=new.priority,
    )


def new_rows(new: Iterable[Notification]) -> list[dict[str, Any]]:
    """The job rows of the due leaders among ``new`` (rows about to be inserted, made
    when they were accepted): a leader intake leases in its own commit (``lease_new``)
    has its job running under the same token and expiry, its first attempt."""
    rows = []
    for row in new:
        if row.status != Status.PENDING or row.dedup_owner_id is not None:
            continue
        (values,) = jobs.rows([job(row)], row.created_at)
        if row.lease_token is not None:
            values |= {
                "state": JobState.RUNNING.value,
                "attempt": 1,
                "attempted_at": row.created_at,
                "lease_token": row.lease_token,
                "lease_until": row.lease_until,
            }
        rows.append(values)
    return rows


def _args(dialect: str) -> Any:
    """A job's ``args`` built from its notification's row (as ``job`` builds them)."""
    if dialect == "postgresql":
        return literal_column(
            "jsonb_build_object('channels', uns_notifications.notification "
            "-> 'effective' -> 'channels')"
        )
    return literal_column(
        "json_object('channels', "
        "json(json_extract(uns_notifications.notification, '$.effective.channels')))"
    )


async def schedule(conn: AsyncConnection, ids: Collection[str], now: datetime) -> None:
    """Make the delivery job of each notification in ``ids`` match its row, in this
    transaction: a PENDING leader's live job due at its ``next_attempt`` (inserted, or
    a live one not running retimed), any other row's live job cancelled."""
    if not ids:
        return
    named = sorted(ids)
    due = (n.c.status == Status.PENDING.value) & n.c.dedup_owner_id.is_(None)
    source = select(
        _KIND,
        n.c.id,
        _args(conn.dialect.name),
        inline(JobState.AVAILABLE.value),
        literal(0),
        literal(DELIVERY_MAX_ATTEMPTS),
        n.c.next_attempt,
        literal(now, UtcDateTime()),
        n.c.priority,
    ).where(n.c.id.in_(named), due)
    dialect: Any = postgresql if conn.dialect.name == "postgresql" else sqlite
    insert = dialect.insert(j).from_select(
        [
            "kind",
            "notification_id",
            "args",
            "state",
            "attempt",
            "max_attempts",
            "scheduled_at",
            "created_at",
            "priority",
        ],
        source,
    )
    await conn.execute(
        insert.on_conflict_do_update(
            index_elements=[j.c.notification_id],
            index_where=text(DELIVERY_LIVE),
            set_={
                "scheduled_at": insert.excluded.scheduled_at,
                "priority": insert.excluded.priority,
            },
            where=j.c.state != JobState.RUNNING.value,
        )
    )
    still_due = select(n.c.id).where(n.c.id.in_(named), due)
    await conn.execute(
        update(j)
        .where(is_live_delivery(), j.c.notification_id.in_(named))
        .where(j.c.notification_id.not_in(still_due.scalar_subquery()))
        .values(
            state=JobState.CANCELLED.value,
            finalized_at=now,
            lease_token=None,
            lease_until=None,
        )
    )


async def carry(conn: AsyncConnection, now: datetime, *, limit: int) -> int:
    """``Dispatch.carry``: the work a replica of the previous release (which knows no
    delivery jobs) left. Two statements, each bounded by ``limit``: the dispatcher
    runs it while idle, when the PENDING leaders are few."""
    due = (n.c.status == Status.PENDING.value) & n.c.dedup_owner_id.is_(None)
    live = select(j.c.id).where(is_live_delivery(), j.c.notification_id == n.c.id)
    jobless = select(n.c.id).where(due, ~live.exists()).order_by(n.c.next_attempt).limit(limit)
    ids = list((await conn.execute(jobless)).scalars())
    await schedule(conn, ids, now)
    leader = select(n.c.id).where(n.c.id == j.c.notification_id, due)
    stale = (
        select(j.c.id)
        .where(
            j.c.kind == _KIND,
            j.c.state.in_([inline(JobState.AVAILABLE.value), inline(JobState.RETRYABLE.value)]),
            ~leader.exists(),
        )
        .limit(limit)
    )
    result = await conn.execute(
        update(j)
        .where(j.c.id.in_(stale.scalar_subquery()))
        .values(state=JobState.CANCELLED.value, finalized_at=now)
    )
    return len(ids) + int(result.rowcount)


@dataclass(frozen=True, slots=True)
class SettleDelivery:
    """Where a landed settle leaves its notification's delivery job."""

    notification_id: str
    token: str  # the attempt's: the job moves only while it runs under it
    state: JobState
    scheduled_at: datetime | None = None  # retryable: when it is due again


def settled(
    notification_id: str, token: str, status: Status, next_attempt: datetime | None
) -> SettleDelivery:
    """The job's move for a notification settled to ``status``: PENDING is a retry
    (due at ``next_attempt``), DELIVERED completes it, anything else discards it."""
    if status == Status.PENDING:
        assert next_attempt is not None, "a retry says when"
        return SettleDelivery(notification_id, token, JobState.RETRYABLE, next_attempt)
    if status == Status.DELIVERED:
        return SettleDelivery(notification_id, token, JobState.COMPLETED)
    return SettleDelivery(notification_id, token, JobState.DISCARDED)


class _SettlePg:
    """The settle of delivery jobs as one statement over arrays (``pg.Rider``), each
    job still under the attempt's token (``_UNDER_TOKEN``): it rides in an events append
    beside the fenced notification updates (after them, waiting for their counts
    (``when``), when the statement is alone), and must move every job (``exact_sql``).
    Once the notification's fence held, only a new claim could have taken the job, and
    a claim that recovers an attempt changes the row's count: so a statement that
    writes alone, without a transaction to roll back, never parts a job from its row."""

    width = 5

    def unnest_sql(self, first: int, when: str = "") -> str:
        p = [f"${first + i}" for i in range(self.width)]
        return (
            f"UPDATE uns_jobs SET state = r.state, "
            "scheduled_at = COALESCE(r.scheduled_at, uns_jobs.scheduled_at), "
            f"finalized_at = CASE WHEN r.state IN ({_FINAL_SQL}) THEN r.now END, "
            "lease_token = NULL, lease_until = NULL "
            f"FROM unnest({p[0]}::text[], {p[1]}::text[], {p[2]}::text[], "
            f"{p[3]}::timestamptz[], {p[4]}::timestamptz[]) "
            "AS r(nid, token, state, scheduled_at, now) "
            # The ANY restricts the jobs scanned to the named ones whatever the
            # planner believes of the join (stale statistics chose a hash join over
            # every live job).
            f"WHERE uns_jobs.notification_id = ANY({p[0]}::text[]) "
            "AND uns_jobs.notification_id = r.nid AND uns_jobs.kind = 'delivery' "
            "AND uns_jobs.state IN ('running', 'retryable') AND uns_jobs.lease_token = r.token"
            + (f" AND {when}" if when else "")
        )

    def arrays(self, rows: Sequence[Mapping[str, Any]]) -> list[list[Any]]:
        return [[r[k] for r in rows] for k in ("nid", "token", "state", "scheduled_at", "now")]

    def exact_sql(self, first: int) -> str | None:
        return f"cardinality(${first}::text[])"

    def partial(self, rows: int) -> bool:
        return rows > 1  # each job is fenced on its own

    async def executemany(self, driver: Any, rows: Iterable[Mapping[str, Any]]) -> None:
        listed = list(rows)
        if listed:
            await driver.execute(self.unnest_sql(1), *self.arrays(listed))


SETTLE_PG = _SettlePg()


def settle_rows(settles: Sequence[SettleDelivery], now: datetime) -> list[dict[str, Any]]:
    """``settles`` as ``SETTLE_PG``'s rows."""
    return [
        {
            "nid": s.notification_id,
            "token": s.token,
            "state": s.state.value,
            "scheduled_at": s.scheduled_at,
            "now": now,
        }
        for s in settles
    ]


async def settle(conn: AsyncConnection, settles: Sequence[SettleDelivery], now: datetime) -> None:
    """Move the delivery job of each settled notification (its fence held in this
    transaction), still under the attempt's token, in one statement."""
    if not settles:
        return
    driver = pg.driver(conn)
    if driver is not None:
        await SETTLE_PG.executemany(driver, settle_rows(settles, now))
        return
    r = (
        values(
            column("nid", Text()),
            column("token", Text()),
            column("state", Text()),
            column("scheduled_at", UtcDateTime()),
            name="r",
        )
        .data([(s.notification_id, s.token, s.state.value, s.scheduled_at) for s in settles])
        .cte("r")
    )
    final = [s.value for s in FINALIZED]
    await conn.execute(
        update(j)
        .where(j.c.notification_id == r.c.nid, j.c.lease_token == r.c.token)
        .where(j.c.kind == _KIND, j.c.state.in_(_UNDER_TOKEN))
        .values(
            state=r.c.state,
            scheduled_at=case(
                (r.c.scheduled_at.is_(None), j.c.scheduled_at), else_=r.c.scheduled_at
            ),
            finalized_at=case((r.c.state.in_(final), literal(now, UtcDateTime())), else_=None),
            lease_token=None,
            lease_until=None,
        )
    )

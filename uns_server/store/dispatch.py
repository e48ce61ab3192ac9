"""Dispatch queries: claim due leaders under a lease, and fenced settlement.

Every state change after the claim is guarded by the delivery job's lease (running
under the attempt's ``lease_token``, ``lease_until > now``: ``deliveries.held_by``):
zero rows matched means the lease was lost, a typed outcome rather than an exception
(river's ``JobSetStateIfRunning``).

A settlement that opens an ack (DELIVERED, ack PENDING until its deadline) inserts the
deadline's ``ack_deadline`` job (``domain.ack_deadlines``) and, when the policy follows
up, its first ``follow_up`` job (``domain.follow_up_jobs``) in the same commit, for the
moves that landed: on every settle path, and on PostgreSQL's one-statement path as a
rider of the events append (all or nothing with the fenced updates it rides with).

Reads hand back typed records (``domain.records``), one per row, built straight from
the driver's row (``store.records``): no intermediate copies on the hot path.

The hot statements are built once, with bind parameters, at import: SQLAlchemy then
memoizes their cache keys and compiled forms instead of rebuilding and re-keying a
construct per delivery. Batches go out as one executemany (one pipelined round trip
on asyncpg) or one multi-row statement.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Integer,
    Text,
    bindparam,
    cast,
    func,
    select,
    update,
)

from uns_server.domain.enums import EventKind, Status
from uns_server.domain.jobs import NewJob
from uns_server.domain.moves import LeasedMove
from uns_server.domain.records import Attempt, DedupWindow, Notification
from uns_server.store import deliveries, delivery_claim, delivery_leases, jobs, pg, records
from uns_server.store.bound import Bound, BoundTx
from uns_server.store.db import FenceMoved
from uns_server.store.delivery_claim import (
    CLAIMABLE,
    DELIVERY,
    SERVED_PG,
    SERVED_SQLITE,
)
from uns_server.store.leased_moves import (
    deadline_timers,
    delivery_settles,
    first_per_row,
    grouped,
)
from uns_server.store.served import POSTGRESQL
from uns_server.store.tables import UtcDateTime, dedup, events, inline
from uns_server.store.tables import jobs as j
from uns_server.store.tables import notifications as n

# One fenced UPDATE per set of assigned columns (there are a handful: see settle_many),
# with its compiled PostgreSQL form; the same for settle_leased, whose WHERE also
# checks that the lease has not expired.
_settle_statements: dict[tuple[str, ...], tuple[Any, pg.Statement]] = {}
_settle_leased_statements: dict[tuple[str, ...], tuple[Any, pg.Statement]] = {}


def _settle_leased_statement(columns: tuple[str, ...]) -> tuple[Any, pg.Statement]:
    found = _settle_leased_statements.get(columns)
    if found is None:
        token = bindparam("b_token", type_=j.c.lease_token.type)
        now = bindparam("b_now", type_=UtcDateTime())
        fence = deliveries.held_by(token, bindparam("b_seen", type_=Integer()), now)
        stmt = update(n).where(n.c.id == bindparam("b_id"), fence).values(_assignments(columns))
        returning = stmt.returning(n.c.id, cast(token, Text).label("token"))
        found = _settle_leased_statements[columns] = (stmt, pg.Statement(returning))
    return found


# A settlement decides from the claim's copy of the row; the one column another writer
# may set while the lease is held is the ack: an answer that arrived while the delivery
# carrying it was in flight settles it (``services.acks``), and the settlement keeps it.
KEPT_ONCE_SET = frozenset({"ack_status"})


def _assignments(columns: tuple[str, ...]) -> dict[str, Any]:
    return {
        c: func.coalesce(n.c[c], bindparam(f"v_{c}", type_=n.c[c].type))
        if c in KEPT_ONCE_SET
        else bindparam(f"v_{c}", type_=n.c[c].type)
        for c in columns
    }


def _settle_statement(columns: tuple[str, ...]) -> tuple[Any, pg.Statement]:
    found = _settle_statements.get(columns)
    if found is None:
        token = bindparam("b_token", type_=j.c.lease_token.type)
        fence = deliveries.held_by(token, bindparam("b_seen", type_=Integer()))
        stmt = update(n).where(n.c.id == bindparam("b_id"), fence).values(_assignments(columns))
        found = _settle_statements[columns] = (stmt, pg.Statement(stmt.returning(n.c.id)))
    return found


def _fenced_update(columns: tuple[str, ...]) -> pg.FencedUpdate:
    found = _fenced_updates.get(columns)
    if found is None:
        found = _fenced_updates[columns] = pg.FencedUpdate(
            n,
            columns,
            deliveries.HELD_BY_SQL,
            fence_params=(("b_seen", "integer"),),
            kept=KEPT_ONCE_SET,
        )
    return found


_fenced_updates: dict[tuple[str, ...], pg.FencedUpdate] = {}


class SqlDispatchReads(Bound):
    __slots__ = ()

    async def next_due_at(self, channels: Collection[str]) -> datetime | None:
        """When the earliest claimable delivery job that ``claim`` would take (its
        channels all among ``channels``) becomes due: ``uns_jobs`` alone, walked by due
        time (``ix_uns_jobs_delivery_due``) to the first served one. A job whose leader
        is leased elsewhere is retimed to that lease's end by the claim that meets it;
        expired delivery leases are found by the rescuer, which wakes the dispatcher, or
        the idle poll. Work for other channels is left out: it would look due for ever."""
        clause = SERVED_PG if self._conn.dialect.name == POSTGRESQL else SERVED_SQLITE
        q = (
            select(j.c.scheduled_at)
            .where(j.c.kind == DELIVERY, CLAIMABLE, clause)
            .order_by(j.c.scheduled_at)
            .limit(1)
        )
        due: datetime | None = (
            await self._conn.execute(q, {"channels": sorted(channels)})
        ).scalar()
        return due

    async def results_recorded_for(self, tokens: Collection[tuple[str, str]]) -> set[str]:
        """For many (notification id, token): the tokens whose settlement has committed
        (their CHANNEL_ATTEMPT_RESULT events exist)."""
        if not tokens:
            return set()
        ids = sorted({nid for nid, _ in tokens})
        q = select(events.c.notification_id, events.c.payload).where(
            events.c.notification_id.in_(ids),
            events.c.kind == EventKind.CHANNEL_ATTEMPT_RESULT.value,
        )
        wanted = set(tokens)
        found: set[str] = set()
        for nid, payload in (await self._conn.execute(q)).all():
            token = (payload or {}).get("lease_token")
            if isinstance(token, str) and (nid, token) in wanted:
                found.add(token)
        return found

    async def status_of(self, notification_id: str) -> Status | None:
        """The notification's current status (None: no such notification)."""
        q = select(n.c.status).where(n.c.id == notification_id)
        value = (await self._conn.execute(q)).scalar()
        return None if value is None else Status(value)


class SqlDispatch(BoundTx, SqlDispatchReads):
    __slots__ = ()

    async def claim(
        self,
        *,
        now: datetime,
        limit: int,
        lease: timedelta,
        channels: Collection[str],
    ) -> list[Attempt]:
        """Lock up to ``limit`` due delivery jobs of unleased leaders (SKIP LOCKED on
        PostgreSQL) whose channels are all among ``channels`` (the caller's configured
        ones), and lease each job under a new fencing token (``Attempt.lease_token``):
        the job is the fence, and the notification is not written.

        Each notification is as it was before the claim, with an interrupted attempt
        counted (``Attempt.recovered``: the job still held that attempt's token, or the
        row a previous release's expired lease, ``lease_token`` the interrupted one):
        that attempt's effect is unknown, and the row is counted and flagged
        ``provider_effect_may_have_occurred`` in this transaction. Expired delivery
        leases are rescued first (the rescuer's statement, for this kind: one index
        probe when there are none), so a recovery does not wait for the rescuer's round.
        """
        return await delivery_claim.claim(
            self._conn, now=now, limit=limit, lease=lease, channels=channels
        )

    async def settle_many(self, moves: Sequence[LeasedMove], now: datetime) -> frozenset[str]:
        """Apply each move where its token still holds the row's lease: one fenced
        executemany per distinct set of assigned columns. Returns the ids of the rows
        whose move landed (as ``Jobs.settle_many``); one whose token no longer holds the
        lease changes nothing and is absent (nor is its ack deadline's job inserted)."""
        moves = first_per_row(moves)
        groups = grouped(moves, now, unexpired=False)
        timers = deadline_timers(moves)
        driver = pg.driver(self._conn)
        landed: set[str] = set()
        for columns, params_list in groups.items():
            stmt, stmt_pg = _settle_statement(columns)
            if driver is not None:  # asyncpg's executemany reports no row counts
                rows = await stmt_pg.fetchmany(driver, params_list)
                landed.update(r["id"] for r in rows)
            else:  # one execute per row tells its own count
                for params in params_list:
                    if (await self._conn.execute(stmt, params)).rowcount == 1:
                        landed.add(params["b_id"])
        await self._insert_timers(
            [job for move, job in timers if move.notification_id in landed], now
        )
        await deliveries.settle(
            self._conn,
            [d for move, d in delivery_settles(moves) if move.notification_id in landed],
            now,
        )
        return frozenset(landed)

    async def settle_leased(
        self, moves: Sequence[LeasedMove], now: datetime
    ) -> set[tuple[str, str]]:
        """Apply each move where its token still holds an unexpired lease at ``now``,
        locking each row in the same statement (no read of the row before it): one fenced
        executemany per distinct set of assigned columns, each in id order. Returns the
        (id, token) pairs whose row changed; the others had lost their lease (expired,
        withdrawn, or claimed again).

        Only for moves decided without reading the locked row: the settlement decides
        from the claim's copy, which is safe because nothing but the lease holder writes
        the columns it reads while the lease is held (``workers.dispatch.settlement``)."""
        moves = first_per_row(moves)
        groups = grouped(sorted(moves, key=lambda m: m.notification_id), now, unexpired=True)
        driver = pg.driver(self._conn)
        changed: set[tuple[str, str]] = set()
        for columns, params_list in groups.items():
            stmt, stmt_pg = _settle_leased_statement(columns)
            if driver is not None:  # RETURNING says which executions matched
                rows = await stmt_pg.fetchmany(driver, params_list)
                changed.update((r["id"], r["token"]) for r in rows)
            else:  # in-process: one execute per row tells its own row count
                for params in params_list:
                    if (await self._conn.execute(stmt, params)).rowcount == 1:
                        changed.add((params["b_id"], params["b_token"]))
        timers = deadline_timers(moves)
        await self._insert_timers(
            [job for move, job in timers if (move.notification_id, move.token) in changed], now
        )
        await deliveries.settle(
            self._conn,
            [
                d
                for move, d in delivery_settles(moves)
                if (move.notification_id, move.token) in changed
            ],
            now,
        )
        return changed

    async def settle_leased_with_events(self, moves: Sequence[LeasedMove], now: datetime) -> None:
        """``settle_leased`` for a transaction whose next write is its events append, and
        that expects every move to go through: on PostgreSQL the fenced UPDATEs ride in the
        append's statement (``WriteTx.defer``), which raises ``FenceMoved`` (the
        transaction rolls back) if one of them found its lease lost; the ack deadlines'
        jobs ride there too. On SQLite, as ``settle_leased``, raising ``FenceMoved`` at
        once."""
        if pg.driver(self._conn) is None:
            changed = await self.settle_leased(moves, now)
            if len(changed) != len(moves):
                raise FenceMoved(f"settled {len(changed)} of {len(moves)} leases")
            return
        if len(first_per_row(moves)) != len(moves):
            raise FenceMoved("a row settled twice: the second finds its lease released")
        groups = grouped(sorted(moves, key=lambda m: m.notification_id), now, unexpired=True)
        for columns, rows in groups.items():
            self._tx.defer(_fenced_update(columns), rows)
        # Every move lands or the transaction rolls back: each opened ack gets its timer.
        self._tx.defer(jobs.INSERT_PG, jobs.rows([job for _, job in deadline_timers(moves)], now))
        settles = [d for _, d in delivery_settles(moves)]
        self._tx.defer(deliveries.SETTLE_PG, deliveries.settle_rows(settles, now))

    async def carry(self, now: datetime, *, limit: int) -> int:
        return await deliveries.carry(self._conn, now, limit=limit)

    async def pending_followers(self, owner_id: str) -> list[Notification]:
        """The owner's PENDING followers in promotion order (oldest first), locked."""
        lock = (
            select(n.c.id)
            .where(n.c.dedup_owner_id == owner_id, n.c.status == inline(Status.PENDING.value))
            .order_by(n.c.created_at, n.c.id)
            .with_for_update()
        )
        return await delivery_leases.locked_records(self._conn, lock)

    async def window_owner(self, dedup_key: str) -> tuple[DedupWindow, Notification] | None:
        """The dedup window of ``dedup_key``, locked until commit (as intake locks it), and
        its current owner; None without a window, an owner, or that owner's row."""
        q = select(dedup).where(dedup.c.key == dedup_key).with_for_update()
        row = (await self._conn.execute(q)).mappings().first()
        if row is None or not row["owner_id"]:
            return None
        window = records.dedup_window(row)
        q = select(*delivery_leases.NOTIFICATION_COLUMNS).where(n.c.id == window.owner_id)
        owner = (await self._conn.execute(q)).mappings().first()
        return None if owner is None else (window, records.notification(owner))

    async def _insert_timers(self, timers: Sequence[NewJob], now: datetime) -> None:
        # A row lands once per batch: one job of each kind.
        once = {(job.kind, job.notification_id): job for job in timers}
        await jobs.insert_rows(self._conn, jobs.rows(list(once.values()), now))

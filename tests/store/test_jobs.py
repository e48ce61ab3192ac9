"""The work table's port (``store.port.Jobs``), each method's contract, through a
``Store`` on SQLite and on PostgreSQL (``db_url``): claim order and limit, a claimed
row never claimed twice, a settle that lands only under its row's current lease, the
rescue of expired leases, retention of final rows only, and concurrent claimers that
never share a row."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import insert, select

from uns_server.domain.jobs import FINALIZED, JobKind, JobState, NewJob, SettleJob
from uns_server.domain.message_updates import MAX_ATTEMPTS, MessageUpdate
from uns_server.domain.records import Job
from uns_server.store import records
from uns_server.store.db import Database
from uns_server.store.jobs import RESCUED_ERROR
from uns_server.store.sql_store import SqlStore
from uns_server.store.tables import jobs as jobs_table
from uns_server.store.tables import message_updates as old_outbox
from uns_server.workers.job_cleaner import KEEP_DISCARDED, KEEP_DONE, JobCleaner

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
LEASE = timedelta(seconds=30)
KINDS = (JobKind.MESSAGE_UPDATE,)
SECOND = timedelta(seconds=1)


def new_job(n: int, *, due: datetime = NOW - SECOND, max_attempts: int = 3) -> NewJob:
    return NewJob(
        JobKind.MESSAGE_UPDATE,
        {"n": n},
        max_attempts,
        notification_id=str(uuid.uuid4()),
        scheduled_at=due,
    )


async def rows(db: Database) -> dict[int, Job]:
    async with db.read() as conn:
        found = (await conn.execute(select(jobs_table))).mappings()
        return {job.id: job for job in map(records.job, found)}


async def claim(store: SqlStore, *, now: datetime = NOW, limit: int = 10) -> list[Job]:
    async with store.write() as tx:
        return list(await tx.jobs.claim(KINDS, now=now, limit=limit, lease=LEASE))


async def settle(store: SqlStore, *settles: SettleJob, now: datetime = NOW) -> frozenset[int]:
    async with store.write() as tx:
        return await tx.jobs.settle_many(settles, now)


def n_of(jobs: list[Job]) -> list[Any]:
    return [j.args["n"] for j in jobs]


async def test_claim_takes_due_rows_of_its_kinds_in_claim_order_up_to_the_limit(
    store: SqlStore, db: Database
) -> None:
    async with store.write() as tx:
        await tx.jobs.insert_many(
            [
                new_job(0, due=NOW - 2 * SECOND),
                new_job(1, due=NOW - 3 * SECOND),
                new_job(2, due=NOW - 2 * SECOND),  # same time as 0: inserted after it
                new_job(3, due=NOW + SECOND),  # not due yet
            ],
            NOW - 5 * SECOND,
        )
        await tx.jobs.insert_many([NewJob(JobKind.MESSAGE_UPDATE, {"n": 4}, 3)], NOW)  # due now
    async with db.write() as tx:  # a kind this claimer does not name: never claimed
        await tx.conn.execute(
            insert(jobs_table).values(
                kind="another_kind",
                args={},
                state="available",
                attempt=0,
                max_attempts=1,
                scheduled_at=NOW - 10 * SECOND,
                created_at=NOW,
            )
        )

    first = await claim(store, limit=2)
    assert n_of(first) == [1, 0]  # earliest first
    assert {j.state for j in first} == {JobState.RUNNING}
    assert {(j.attempt, j.attempted_at, j.lease_until) for j in first} == {(1, NOW, NOW + LEASE)}
    assert first[0].lease_token and first[0].lease_token == first[1].lease_token  # one claim
    second = await claim(store)
    assert n_of(second) == [2, 4]  # then id order; the claimed ones are not claimed again
    assert second[0].lease_token != first[0].lease_token
    assert await claim(store) == []  # nothing due: running rows wait for a settle or rescue
    assert n_of(await claim(store, now=NOW + SECOND)) == [3]
    async with db.read() as conn:
        states = (await conn.execute(select(jobs_table.c.kind, jobs_table.c.state))).all()
    assert sorted(states) == [("another_kind", "available")] + [("message_update", "running")] * 5


async def test_a_settle_lands_only_on_arunning_row_under_its_token(
    store: SqlStore, db: Database
) -> None:
    async with store.write() as tx:
        await tx.jobs.insert_many([new_job(n) for n in range(4)], NOW)
    done, retry, gone, cancel = await claim(store)
    token = done.lease_token
    assert token is not None
    later = NOW + timedelta(minutes=1)
    landed = await settle(
        store,
        SettleJob(done.id, token, JobState.COMPLETED),
        SettleJob(retry.id, token, JobState.RETRYABLE, later, "busy"),
        SettleJob(gone.id, token, JobState.DISCARDED, error="refused"),
        SettleJob(cancel.id, "not-its-token", JobState.CANCELLED),
    )
    assert landed == {done.id, retry.id, gone.id}  # the stale token settled nothing
    after = await rows(db)
    assert after[cancel.id] == cancel  # unchanged: still running under its lease
    assert (after[done.id].state, after[done.id].finalized_at) == (JobState.COMPLETED, NOW)
    assert (after[gone.id].state, after[gone.id].last_error) == (JobState.DISCARDED, "refused")
    r = after[retry.id]
    assert (r.state, r.scheduled_at, r.finalized_at, r.last_error) == (
        JobState.RETRYABLE,
        later,
        None,
        "busy",
    )
    assert {(j.lease_token, j.lease_until) for j in (after[done.id], r)} == {(None, None)}

    # Settled once: a final row, and a retryable one, take no second settle.
    assert await settle(store, SettleJob(done.id, token, JobState.DISCARDED)) == frozenset()
    assert await settle(store, SettleJob(retry.id, token, JobState.COMPLETED)) == frozenset()
    # Claimed again once due: a new attempt under a new token; the old one is spent.
    [again] = await claim(store, now=later)
    assert (again.id, again.attempt) == (retry.id, 2) and again.lease_token != token
    assert await settle(store, SettleJob(again.id, token, JobState.COMPLETED)) == frozenset()
    assert again.lease_token is not None
    ok = SettleJob(again.id, again.lease_token, JobState.COMPLETED)
    assert await settle(store, ok, now=later) == {again.id}
    assert (await rows(db))[again.id].last_error == "busy"  # the last error is kept


async def test_expired_leases_are_rescued_to_retryable_or_discarded_when_spent(
    store: SqlStore, db: Database
) -> None:
    async with store.write() as tx:
        await tx.jobs.insert_many([new_job(0, max_attempts=2), new_job(1, max_attempts=1)], NOW)
    again, spent = await claim(store)
    async with store.write() as tx:  # leases still held: nothing to rescue
        assert await tx.jobs.rescue_expired(KINDS, now=NOW + LEASE - SECOND, limit=10) == []
    expiry = NOW + LEASE
    async with store.read() as tx:  # the rescuer wakes for the expiry, not the claim
        assert await tx.jobs.next_rescue_at(KINDS) == expiry
        assert await tx.jobs.next_due_at(KINDS) is None
    async with store.write() as tx:
        rescued = await tx.jobs.rescue_expired(KINDS, now=expiry, limit=10)
    by_id = {j.id: j for j in rescued}
    assert set(by_id) == {again.id, spent.id}
    r, d = by_id[again.id], by_id[spent.id]
    # The expired token stays on the row (the interrupted attempt's, as a delivery's
    # claim reads it), but only ``running`` rows settle.
    assert (r.state, r.scheduled_at, r.attempt, r.lease_token, r.lease_until) == (
        JobState.RETRYABLE,
        expiry,
        1,
        again.lease_token,
        None,
    )
    assert (d.state, d.finalized_at, d.attempt) == (JobState.DISCARDED, expiry, 1)
    assert r.last_error == d.last_error == RESCUED_ERROR
    assert await rows(db) == by_id
    # The worker whose lease expired settles nothing now.
    assert again.lease_token is not None
    stale = SettleJob(again.id, again.lease_token, JobState.COMPLETED)
    assert await settle(store, stale, now=expiry) == frozenset()
    [next_attempt] = await claim(store, now=expiry)
    assert (next_attempt.id, next_attempt.attempt) == (again.id, 2)


async def test_retention_deletes_only_final_rows_finalized_before_the_cutoff(
    store: SqlStore, db: Database
) -> None:
    async with store.write() as tx:
        await tx.jobs.insert_many([new_job(n) for n in range(6)], NOW)
    claimed = await claim(store)
    a, b, c, d, e, running = claimed
    token = a.lease_token
    assert token is not None
    await settle(
        store,
        SettleJob(a.id, token, JobState.COMPLETED),
        SettleJob(b.id, token, JobState.DISCARDED),
        SettleJob(c.id, token, JobState.CANCELLED),
        SettleJob(e.id, token, JobState.RETRYABLE, NOW),
    )
    await settle(store, SettleJob(d.id, token, JobState.COMPLETED), now=NOW + SECOND)
    async with store.write() as tx:
        jobs = tx.jobs
        assert await jobs.delete_finished_before(NOW, limit=10) == 0  # not before NOW
        assert await jobs.delete_finished_before(NOW + SECOND, limit=1) == 1  # the oldest: a
        only = [JobState.COMPLETED, JobState.CANCELLED]
        assert await jobs.delete_finished_before(NOW + SECOND, limit=10, states=only) == 1  # c
        with pytest.raises(ValueError):
            await jobs.delete_finished_before(NOW, limit=1, states=[JobState.RETRYABLE])
        assert await jobs.delete_finished_before(NOW + timedelta(days=1), limit=10) == 2
    left = await rows(db)
    assert set(left) == {e.id, running.id}  # retryable and running rows stay
    assert {j.state for j in left.values()}.isdisjoint(FINALIZED)


async def test_next_due_at_is_the_earliest_due_row_and_next_rescue_at_the_earliest_lease(
    store: SqlStore,
) -> None:
    async with store.read() as tx:
        assert (await tx.jobs.next_due_at(KINDS), await tx.jobs.next_rescue_at(KINDS)) == (
            None,
            None,
        )
    async with store.write() as tx:
        await tx.jobs.insert_many([new_job(0, due=NOW + 2 * LEASE)], NOW)
        await tx.jobs.insert_many([new_job(1, due=NOW)], NOW)
    async with store.read() as tx:
        assert await tx.jobs.next_due_at(KINDS) == NOW
    await claim(store)
    async with store.read() as tx:
        assert await tx.jobs.next_due_at(KINDS) == NOW + 2 * LEASE  # the one still waiting
        assert await tx.jobs.next_rescue_at(KINDS) == NOW + LEASE  # the running one's expiry


async def test_concurrent_claimers_never_share_a_row(store: SqlStore) -> None:
    total = 120
    async with store.write() as tx:
        await tx.jobs.insert_many([new_job(n) for n in range(total)], NOW)

    async def claimer() -> list[int]:
        mine: list[int] = []
        while True:
            got = await claim(store, limit=7)
            if not got:
                return mine
            mine += [j.id for j in got]

    taken = await asyncio.gather(*(claimer() for _ in range(6)))
    every = [i for ids in taken for i in ids]
    assert len(every) == len(set(every)) == total


async def test_the_old_outboxs_unleased_pending_rows_are_carried_into_jobs(
    store: SqlStore, db: Database
) -> None:
    outcome = {"state": "ACKED", "actor": "carol", "via": "grpc", "at": NOW.isoformat()}

    def old(n: int, **values: Any) -> dict[str, Any]:
        return {
            "id": str(uuid.uuid4()),
            "notification_id": f"n{n}",
            "channel": "slack",
            "reference": {"n": n},
            "outcome": outcome,
            "status": "PENDING",
            "attempts": 0,
            "next_attempt": NOW - SECOND,
            "lease_until": None,
            "lease_token": None,
            "last_error": None,
            "created_at": NOW - 9 * SECOND,
            "updated_at": NOW - 9 * SECOND,
        } | values

    async with db.write() as tx:
        await tx.conn.execute(
            insert(old_outbox),
            [
                old(0),
                old(1, attempts=2, next_attempt=NOW + SECOND, last_error="busy"),
                old(2, lease_token="held", lease_until=NOW + SECOND),  # a live lease
                old(3, lease_token="lost", lease_until=NOW - SECOND, attempts=1),
                old(4, status="DONE"),
                old(5, status="FAILED"),
            ],
        )
    async with store.write() as tx:
        assert await tx.jobs.carry_message_updates(NOW, limit=10) == 3
        assert await tx.jobs.carry_message_updates(NOW, limit=10) == 0  # moved, not copied
    carried = {MessageUpdate.of(j).reference["n"]: j for j in (await rows(db)).values()}
    assert set(carried) == {0, 1, 3}
    assert MessageUpdate.of(carried[0]) == MessageUpdate("n0", "slack", {"n": 0}, outcome)
    assert (carried[0].state, carried[0].attempt) == (JobState.AVAILABLE, 0)
    assert (carried[1].state, carried[1].attempt, carried[1].scheduled_at) == (
        JobState.RETRYABLE,
        2,
        NOW + SECOND,
    )
    assert carried[1].last_error == "busy" and carried[1].max_attempts == MAX_ATTEMPTS
    async with db.read() as conn:
        left = (await conn.execute(select(old_outbox.c.reference))).scalars().all()
    assert sorted(r["n"] for r in left) == [2, 4, 5]
    async with store.write() as tx:  # once that lease has expired, the last one too
        assert await tx.jobs.carry_message_updates(NOW + SECOND, limit=10) == 1


async def test_the_cleaner_keeps_done_jobs_a_day_and_discarded_ones_a_week(
    store: SqlStore, db: Database
) -> None:
    async with store.write() as tx:
        await tx.jobs.insert_many([new_job(n) for n in range(4)], NOW)
    done, gave_up, recent, running = await claim(store)
    token = done.lease_token
    assert token is not None
    await settle(
        store,
        SettleJob(done.id, token, JobState.COMPLETED),
        SettleJob(gave_up.id, token, JobState.DISCARDED),
    )
    await settle(store, SettleJob(recent.id, token, JobState.CANCELLED), now=NOW + KEEP_DONE)
    cleaner = JobCleaner(store, lambda: NOW + KEEP_DONE + SECOND)
    assert (await cleaner.run_once()).deleted == 1  # the completed one
    assert set(await rows(db)) == {gave_up.id, recent.id, running.id}
    cleaner = JobCleaner(store, lambda: NOW + KEEP_DISCARDED + SECOND, batch=1)
    first = await cleaner.run_once()
    assert (first.deleted, first.more) == (2, True)  # a full batch: run again at once
    assert set(await rows(db)) == {running.id}
    assert (await cleaner.run_once()).deleted == 0

"""The store port's conformance suite (``uns_server.store.port``): every outbox
operation called directly, no server, on SQLite and on PostgreSQL (``db_url``).

The two claim algorithms are the two dialects' paths of ``dispatch.claim``: on
PostgreSQL one UPDATE ... FROM (SELECT ... FOR UPDATE SKIP LOCKED) RETURNING; on
SQLite a SELECT then an executemany UPDATE, made exclusive by BEGIN IMMEDIATE. Each
test names the rule of the port it pins down.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Sequence
from dataclasses import asdict, fields
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import delete, select, text
from sqlalchemy.exc import IntegrityError

from tests.support.documents import document
from uns_server.domain import follow_up_jobs, moves, person_rule_jobs
from uns_server.domain.admission import DedupWindowTake, WindowOwner
from uns_server.domain.documents import NotificationDocument
from uns_server.domain.enums import AckStatus, DeliveryMode, EventKind, Status
from uns_server.domain.jobs import LIVE, JobKind, JobState
from uns_server.domain.lifecycle import Settlement
from uns_server.domain.outcomes import DeliveryOutcome
from uns_server.domain.records import Attempt, Notification
from uns_server.domain.retention import holds_work
from uns_server.domain.schedule import StepKind, StepProgress
from uns_server.domain.snooze import Snooze
from uns_server.domain.withdrawal import Scope, WithdrawRows
from uns_server.store import records
from uns_server.store.db import Database, is_lost_race
from uns_server.store.port import FenceMoved, NewEvent
from uns_server.store.sql_store import SqlStore
from uns_server.store.tables import dedup as dedup_table
from uns_server.store.tables import events as events_table
from uns_server.store.tables import jobs as jobs_table
from uns_server.store.tables import notifications as notifications_table

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
LEASE = timedelta(seconds=30)
SECOND = timedelta(seconds=1)
MINUTE = timedelta(minutes=1)
WEBHOOK = ("webhook",)


def row(**overrides: Any) -> dict[str, Any]:
    """A complete ``uns_notifications`` row: a due, unleased PENDING leader on the
    webhook channel unless ``overrides`` say otherwise (``channels`` sets its
    effective channels)."""
    nid = str(uuid.uuid4())
    channels = list(overrides.pop("channels", WEBHOOK))
    values: dict[str, Any] = {
        "id": nid,
        "key": uuid.uuid4().hex + uuid.uuid4().hex,
        "fingerprint": "f" * 64,
        "principal": "alice",
        "notification_type": "conformance",
        "source": "tests",
        "notification": document(channels),
        "status": Status.PENDING.value,
        "priority": 2,
        "delivery_mode": "BEST_EFFORT",
        "require_ack": False,
        "max_attempts": 4,
        "outcome": {},
        "attempts": 0,
        "cycle": 1,
        "cycle_attempts": 0,
        "dedup_key": None,
        "dedup_owner_id": None,
        "dedup_generation": None,
        "dedup_successor_id": None,
        "next_attempt": NOW - timedelta(seconds=1),
        "lease_until": None,
        "lease_token": None,
        "provider_effect_may_have_occurred": False,
        "dead_letter": False,
        "delivered_at": None,
        "deadline": None,
        "ack_status": None,
        "actor": None,
        "responded_at": None,
        "response_metadata": None,
        "created_at": NOW - timedelta(minutes=1),
        "updated_at": NOW - timedelta(minutes=1),
        "provider_refs": None,
    }
    for column in notifications_table.c:  # a column added later: NULL unless given
        # (its default when it has one: the counters reminders_sent, escalations_sent)
        values.setdefault(column.name, None if column.server_default is None else 0)
    return values | overrides


def record(values: dict[str, Any]) -> Notification:
    """A ``row``'s values as the record the port inserts (read as the store reads a row)."""
    return records.notification(values)


async def insert(store: SqlStore, *rows: dict[str, Any]) -> list[str]:
    async with store.write() as tx:
        await tx.notifications.insert([record(r) for r in rows])
    return [r["id"] for r in rows]


async def fetch(store: SqlStore, nid: str) -> dict[str, Any]:
    async with store.read() as tx:
        found = await tx.notifications.get(nid)
    assert found is not None
    return dataclasses.asdict(found)


async def claim(
    store: SqlStore,
    *,
    now: datetime = NOW,
    limit: int = 10,
    channels: Sequence[str] = WEBHOOK,
) -> list[Attempt]:
    async with store.write() as tx:
        leases = await tx.dispatch.claim(now=now, limit=limit, lease=LEASE, channels=channels)
    return list(leases)


def claimed_ids(leases: Sequence[Attempt]) -> list[str]:
    return [a.notification.id for a in leases]


async def _set_own_lease(store: SqlStore, nid: str, token: str | None, until: Any) -> None:
    t = notifications_table
    async with store.db.write() as tx:
        q = t.update().where(t.c.id == nid)
        await tx.conn.execute(q.values(lease_token=token, lease_until=until))


async def leased_by_its_job(store: SqlStore, **overrides: Any) -> Attempt:
    """A leader claimed by ``Dispatch.claim`` (before any other row is due), its own
    lease columns then cleared, as the claim will leave them (issue 41, step 2): its
    running delivery job alone holds the lease, until ``NOW + LEASE``."""
    [nid] = await insert(store, row(**overrides))
    channels = overrides.get("channels", WEBHOOK)
    [lease] = await claim(store, limit=1, channels=channels)
    assert lease.notification.id == nid
    await _set_own_lease(store, nid, None, None)
    return lease


async def leased_by_its_row(store: SqlStore, nid: str) -> str:
    """A replica of the previous release leases ``nid``'s own row until ``NOW + LEASE``;
    its delivery job is not running. Returns that lease's token."""
    token = str(uuid.uuid4())
    await _set_own_lease(store, nid, token, NOW + LEASE)
    return token


async def _race(db_url: str, count: int, body: Any) -> list[BaseException | Any]:
    """Run ``body(tx, i)`` in ``count`` concurrent write transactions on separate
    connections, each holding its transaction open a moment after ``body``."""
    writers = [SqlStore(Database(db_url)) for _ in range(count)]

    async def one(writer: SqlStore, i: int) -> Any:
        async with writer.write() as tx:
            result = await body(tx, i)
            await asyncio.sleep(0.01)
        return result

    try:
        return await asyncio.gather(
            *(one(w, i) for i, w in enumerate(writers)), return_exceptions=True
        )
    finally:
        for w in writers:
            await w.db.dispose()


# --- claim ------------------------------------------------------------------------


async def test_claim_takes_highest_priority_then_earliest_due(store: SqlStore) -> None:
    t = NOW - timedelta(minutes=5)
    wanted = [  # in claim order
        row(priority=4, next_attempt=t + timedelta(seconds=2)),
        row(priority=3, next_attempt=t),
        row(priority=3, next_attempt=t + timedelta(seconds=1)),
        row(priority=2, next_attempt=t),
        row(priority=0, next_attempt=NOW),  # due exactly now
    ]
    never = [
        row(priority=5, next_attempt=NOW + timedelta(seconds=1)),  # not yet due
        row(priority=5, status=Status.DELIVERED.value),
        row(priority=5, status=Status.FAILED.value, dead_letter=True),
        row(priority=5, dedup_owner_id=str(uuid.uuid4())),  # a follower: its leader sends
        row(priority=5, lease_token=str(uuid.uuid4()), lease_until=NOW + LEASE),  # leased
    ]
    await insert(store, *reversed(wanted), *never)

    # Several at once take the best ones (RETURNING order is not the claim order).
    first = await claim(store, limit=2)
    assert set(claimed_ids(first)) == {wanted[0]["id"], wanted[1]["id"]}
    # One at a time shows the whole order; then nothing is left.
    rest = [await claim(store, limit=1) for _ in range(4)]
    assert [claimed_ids(c) for c in rest] == [[w["id"]] for w in wanted[2:]] + [[]]


async def test_claim_leases_the_job_alone_under_a_new_token(store: SqlStore) -> None:
    [nid] = await insert(store, row(attempts=2, cycle_attempts=1))
    untouched = await raw(store, nid)

    [leased] = await claim(store)

    # The row as it was before the claim, and the attempt it starts; the job holds the
    # lease (the fence), and the notification row is not written at all.
    before, token = leased.notification, leased.lease_token
    assert (before.id, before.attempts, before.lease_token) == (nid, 2, None)
    assert (leased.attempt, leased.cycle_attempt, leased.recovered) == (3, 2, False)
    assert uuid.UUID(token)
    assert await delivery_leases(store, nid) == [("running", token, NOW + LEASE)]
    assert await raw(store, nid) == untouched
    # Read through the port, the attempt in flight counts (SPEC: attempts made), under
    # its job's lease.
    read = await fetch(store, nid)
    assert (read["attempts"], read["cycle_attempts"]) == (3, 2)
    assert (read["lease_token"], read["lease_until"]) == (token, NOW + LEASE)
    assert await claim(store, now=NOW + LEASE - timedelta(milliseconds=1)) == []


async def test_an_interrupted_attempt_is_counted_and_flagged_when_claimed_again(
    store: SqlStore,
) -> None:
    [nid] = await insert(store, row())
    [first] = await claim(store)

    [again] = await claim(store, now=NOW + LEASE)  # expires at lease_until

    second = again.lease_token
    assert second != first.lease_token
    # The caller sees the interrupted attempt, counted, under its token.
    assert again.notification.lease_token == first.lease_token and again.recovered
    assert (again.notification.attempts, again.attempt) == (1, 2)
    assert await delivery_leases(store, nid) == [("running", second, NOW + 2 * LEASE)]
    stored = await raw(store, nid)
    assert (stored["attempts"], stored["cycle_attempts"]) == (1, 1)
    assert stored["provider_effect_may_have_occurred"] is True
    assert (await fetch(store, nid))["attempts"] == 2  # and the one in flight
    assert (stored["lease_token"], stored["updated_at"]) == (None, NOW + LEASE)
    # Interrupted again: counted once more, not twice.
    [third] = await claim(store, now=NOW + 2 * LEASE)
    assert third.recovered and third.notification.attempts == 2
    assert (await raw(store, nid))["attempts"] == 2


async def test_next_due_is_the_earliest_unleased_leader_of_any_priority(store: SqlStore) -> None:
    minute = timedelta(minutes=1)
    await insert(
        store,
        row(priority=4, next_attempt=NOW + 3 * minute),
        row(priority=1, next_attempt=NOW + 2 * minute),
        row(priority=2, next_attempt=NOW + minute, lease_until=NOW + minute, lease_token="t"),
        row(priority=3, next_attempt=NOW + 5 * minute, channels=["email"]),
    )
    async with store.read() as tx:
        # The leased row (earliest) and the one for another channel are passed over.
        assert await tx.dispatch.next_due_at(["webhook"]) == NOW + 2 * minute
        assert await tx.dispatch.next_due_at(["email"]) == NOW + 5 * minute


async def test_claim_takes_only_rows_whose_channels_it_serves(store: SqlStore) -> None:
    webhook, slack, both = await insert(
        store,
        row(channels=["webhook"]),
        row(channels=["slack"], priority=3),
        row(channels=["webhook", "slack"], priority=4),
    )

    async with store.read() as tx:
        assert await tx.dispatch.next_due_at([]) is None
        assert await tx.dispatch.next_due_at(["email"]) is None
        assert await tx.dispatch.next_due_at(["webhook"]) == NOW - timedelta(seconds=1)
    assert await claim(store, channels=[]) == []
    assert await claim(store, channels=["email"]) == []
    assert claimed_ids(await claim(store, channels=["webhook", "email"])) == [webhook]
    rest = await claim(store, channels=["slack", "webhook"])
    assert set(claimed_ids(rest)) == {slack, both}


async def test_concurrent_claimers_never_share_a_row(db_url: str, store: SqlStore) -> None:
    ids = await insert(store, *(row(priority=i % 3) for i in range(40)))
    claimers = [SqlStore(Database(db_url)) for _ in range(4)]  # separate connections (and engines)

    async def drain(claimer: SqlStore) -> list[str]:
        taken: list[str] = []
        while True:
            async with claimer.write() as tx:
                leases = await tx.dispatch.claim(now=NOW, limit=3, lease=LEASE, channels=WEBHOOK)
                await asyncio.sleep(0.005)  # hold the locks while the others claim
            if not leases:
                return taken
            taken += claimed_ids(leases)

    try:
        taken = await asyncio.gather(*(drain(c) for c in claimers))
    finally:
        for c in claimers:
            await c.db.dispose()

    every = [nid for t in taken for nid in t]
    assert sorted(every) == sorted(ids)  # each row exactly once
    for nid in ids:
        assert [j[:2] for j in await delivery_jobs(store, nid)] == [("running", 1)]


async def test_a_leader_leased_at_insert_is_held_like_a_claimed_one(store: SqlStore) -> None:
    """Intake leases a new leader in the transaction that inserts it (its first attempt
    starts without a claim): its job runs under that lease, and no claimer takes it
    until the lease expires."""
    token = str(uuid.uuid4())
    [nid] = await insert(store, row(lease_token=token, lease_until=NOW + LEASE))

    assert await delivery_leases(store, nid) == [("running", token, NOW + LEASE)]
    assert (await raw(store, nid))["lease_token"] is None  # the job is the fence
    assert await claim(store, now=NOW + LEASE / 2) == []
    [leased] = await claim(store, now=NOW + LEASE)
    assert leased.notification.lease_token == token and leased.recovered
    assert (await raw(store, nid))["attempts"] == 1


async def test_pending_followers_in_promotion_order(store: SqlStore) -> None:
    leader = row()
    t = NOW - timedelta(minutes=5)
    _, first, second, third, _satisfied, _other = await insert(
        store,
        leader,
        row(dedup_owner_id=leader["id"], created_at=t + timedelta(seconds=1)),
        row(dedup_owner_id=leader["id"], created_at=t),
        row(dedup_owner_id=leader["id"], created_at=t + timedelta(seconds=2)),
        row(dedup_owner_id=leader["id"], created_at=t, status=Status.DEDUPLICATED.value),
        row(dedup_owner_id=str(uuid.uuid4()), created_at=t),
    )
    async with store.write() as tx:
        followers = await tx.dispatch.pending_followers(leader["id"])
    assert [f.id for f in followers] == [second, first, third]


async def test_window_owner_is_the_locked_window_and_its_owner(store: SqlStore) -> None:
    owner = row(dedup_key="k", dedup_generation=3, status=Status.DELIVERED.value)
    [oid] = await insert(store, owner)
    until = NOW + timedelta(minutes=5)
    async with store.write() as tx:
        await tx.notifications.take_dedup_window(DedupWindowTake("k", oid, 3, until, insert=True))
        found = await tx.dispatch.window_owner("k")
        assert found is not None
        window, current = found
        assert (window.key, window.owner_id, window.generation, window.until) == (
            "k",
            oid,
            3,
            until,
        )
        assert (current.id, current.status, current.dedup_generation) == (
            oid,
            Status.DELIVERED,
            3,
        )
        assert await tx.dispatch.window_owner("absent") is None
        # A window whose owner row is gone (pruned) has no owner to hand off to.
        orphan = DedupWindowTake("orphan", str(uuid.uuid4()), 1, until, insert=True)
        await tx.notifications.take_dedup_window(orphan)
        assert await tx.dispatch.window_owner("orphan") is None


async def test_status_of_reads_the_current_status(store: SqlStore) -> None:
    [nid] = await insert(store, row(status=Status.FAILED.value, dead_letter=True))
    async with store.read() as tx:
        assert await tx.dispatch.status_of(nid) == Status.FAILED
        assert await tx.dispatch.status_of(str(uuid.uuid4())) is None


def _delivered(nid: str, token: str, attempt: int = 1) -> moves.SettleAttempt:
    """The settle of attempt number ``attempt`` (the claim saw one fewer counted)."""
    delivered = Settlement(Status.DELIVERED, False, {}, delivered_at=NOW)
    return moves.SettleAttempt(nid, token, delivered, attempt, attempt)


def _retry(nid: str, token: str, attempt: int = 1) -> moves.SettleAttempt:
    retry = Settlement(Status.PENDING, False, {}, next_attempt=NOW + timedelta(minutes=1))
    return moves.SettleAttempt(nid, token, retry, attempt, attempt)


async def test_settle_with_a_stale_token_changes_nothing(store: SqlStore) -> None:
    [nid] = await insert(store, row())
    [stale] = [a.lease_token for a in await claim(store)]
    # The lease expired and moved on.
    [current] = [a.lease_token for a in await claim(store, now=NOW + LEASE)]
    before = await fetch(store, nid)

    async with store.write() as tx:
        assert await tx.dispatch.settle_many([_delivered(nid, stale)], NOW) == frozenset()
    assert await fetch(store, nid) == before

    # The current lease's claim counted the interrupted attempt: its own is the second.
    async with store.write() as tx:
        assert await tx.dispatch.settle_many([_delivered(nid, current, 2)], NOW) == {nid}
    stored = await fetch(store, nid)
    assert (stored["status"], stored["lease_token"]) == (Status.DELIVERED.value, None)
    assert (stored["attempts"], stored["cycle_attempts"]) == (2, 2)
    # Settled: the token holds nothing any more.
    async with store.write() as tx:
        assert await tx.dispatch.settle_many([_delivered(nid, current, 2)], NOW) == frozenset()


async def test_settle_many_names_the_rows_its_fence_let_through(store: SqlStore) -> None:
    a, b, c = await insert(store, row(), row(), row())
    leases = {a.notification.id: a.lease_token for a in await claim(store)}

    async with store.write() as tx:
        changed = await tx.dispatch.settle_many(
            [
                _delivered(a, leases[a]),
                _delivered(a, leases[a]),  # the first released the lease: stale now
                _delivered(b, str(uuid.uuid4())),  # never this row's token
                _retry(c, leases[c]),  # another set of columns: another statement
            ],
            NOW,
        )
    assert changed == {a, c}
    assert (await fetch(store, a))["status"] == Status.DELIVERED.value
    assert await delivery_leases(store, b) == [("running", leases[b], NOW + LEASE)]
    assert (await fetch(store, c))["next_attempt"] == NOW + timedelta(minutes=1)


async def test_settle_leased_names_the_leases_its_fence_let_through(store: SqlStore) -> None:
    a, b, c, d = await insert(store, row(), row(), row(), row())
    leases = {a.notification.id: a.lease_token for a in await claim(store)}
    wrong = str(uuid.uuid4())

    async with store.write() as tx:
        changed = await tx.dispatch.settle_leased(
            [
                _delivered(a, leases[a]),
                _delivered(a, leases[a]),  # the first released the lease: stale now
                _delivered(b, wrong),  # never this row's token
                _retry(c, leases[c]),  # another set of columns: another statement
            ],
            NOW + LEASE / 2,
        )
    assert changed == {(a, leases[a]), (c, leases[c])}
    assert (await fetch(store, a))["status"] == Status.DELIVERED.value
    assert await delivery_leases(store, b) == [("running", leases[b], NOW + LEASE)]
    assert (await fetch(store, c))["next_attempt"] == NOW + timedelta(minutes=1)

    # An expired lease settles nothing, even under its own token.
    before = await fetch(store, d)
    async with store.write() as tx:
        assert await tx.dispatch.settle_leased([_delivered(d, leases[d])], NOW + LEASE) == set()
        assert await tx.dispatch.settle_leased([], NOW) == set()
    assert await fetch(store, d) == before


async def test_settle_leased_with_events_settles_all_or_raises(store: SqlStore) -> None:
    a, b = await insert(store, row(), row())
    K = EventKind.DELIVERY_RESULT
    leases = {a.notification.id: a.lease_token for a in await claim(store)}
    now = NOW + LEASE / 2

    # One lease is not held (a wrong token): the append refuses, and nothing is kept.
    before = {nid: await fetch(store, nid) for nid in (a, b)}
    with pytest.raises(FenceMoved):
        async with store.write() as tx:
            settled = [_delivered(a, leases[a]), _delivered(b, str(uuid.uuid4()))]
            await tx.dispatch.settle_leased_with_events(settled, now)
            await tx.events.append([_event(a, K, {}), _event(b, K, {})], now)
    assert {nid: await fetch(store, nid) for nid in (a, b)} == before

    async with store.write() as tx:
        settled = [_delivered(a, leases[a]), _delivered(b, leases[b])]
        await tx.dispatch.settle_leased_with_events(settled, now)
        await tx.events.append([_event(a, K, {}), _event(b, K, {})], now)
    for nid in (a, b):
        stored = await fetch(store, nid)
        assert (stored["status"], stored["lease_token"]) == (Status.DELIVERED.value, None)


@pytest.mark.parametrize("way", ["leased", "with_events", "one_statement"])
async def test_a_settle_that_waited_for_a_withdrawal_lands_nothing(
    db_url: str, store: SqlStore, way: str
) -> None:
    # The withdrawal commits while the settle waits on the row's lock. The settle's
    # fence reads the job as of its start (still running under its token), so it is
    # the row's own columns, read again after the wait, that refuse it.
    if way == "one_statement" and not store.writes_in_one_statement:
        pytest.skip("one-statement writes are PostgreSQL's")
    [nid] = await insert(store, row())
    [lease] = await claim(store)
    settle = _delivered(nid, lease.lease_token)

    async def withdraw(tx: Any) -> None:
        withdrawal = WithdrawRows((nid,), Scope.NOTIFICATION, Status.PENDING, "oscar", "", NOW)
        assert (await tx.moves.withdraw(withdrawal)).ids == (nid,)

    async def settled() -> bool:
        if way == "leased":
            async with store.write() as tx:
                return bool(await tx.dispatch.settle_leased([settle], NOW))
        try:
            opened = store.one_statement() if way == "one_statement" else store.write()
            async with opened as tx:
                await tx.dispatch.settle_leased_with_events([settle], NOW)
                await tx.events.append([_event(nid, EventKind.DELIVERY_RESULT, {})], NOW)
        except FenceMoved:
            return False
        return True

    assert await committed_while_waiting(db_url, store, withdraw, settled) is False
    stored = await raw(store, nid)
    assert (stored["status"], stored["attempts"]) == (Status.WITHDRAWN.value, 0)
    assert [j[0] for j in await delivery_jobs(store, nid)] == ["cancelled"]
    async with store.read() as tx:
        kinds = [e.kind for e in await tx.events.read_after(0, limit=10, notification_ids=[nid])]
    assert EventKind.DELIVERY_RESULT not in kinds


async def test_a_lease_is_held_only_until_it_expires(store: SqlStore) -> None:
    [nid] = await insert(store, row())
    [token] = [a.lease_token for a in await claim(store)]

    async with store.write() as tx:  # expired: even its own token settles nothing
        assert await tx.dispatch.settle_leased([_delivered(nid, token)], NOW + LEASE) == set()
    async with store.write() as tx:
        held = await tx.dispatch.settle_leased([_delivered(nid, token)], NOW + LEASE / 2)
        assert held == {(nid, token)}


async def test_results_recorded_for_finds_committed_settlements(store: SqlStore) -> None:
    a, b = await insert(store, row(), row())
    leases = {a.notification.id: a.lease_token for a in await claim(store)}
    async with store.write() as tx:
        await tx.events.append(
            [_event(a, EventKind.CHANNEL_ATTEMPT_RESULT, {"lease_token": leases[a]})],
            NOW,
        )
    async with store.read() as tx:
        found = await tx.dispatch.results_recorded_for([(a, leases[a]), (b, leases[b])])
        assert found == {leases[a]}
        # The token must be this row's: another row's recorded token does not count.
        assert await tx.dispatch.results_recorded_for([(b, leases[a])]) == set()


# --- follow-ups (reminders, escalation steps) -------------------------------------


def awaiting(**overrides: Any) -> dict[str, Any]:
    """A delivered notification whose ack is PENDING, a follow-up due a minute ago."""
    return (
        row(
            status=Status.DELIVERED.value,
            delivered_at=NOW - timedelta(minutes=10),
            ack_status=AckStatus.PENDING.value,
            deadline=NOW + timedelta(hours=1),
            followup_at=NOW - timedelta(minutes=1),
        )
        | overrides
    )


async def live_follow_ups(db: Database) -> dict[str | None, tuple[JobState, datetime]]:
    """Each notification's live ``follow_up`` job: (state, scheduled_at)."""
    q = select(jobs_table).where(jobs_table.c.kind == JobKind.FOLLOW_UP.value)
    async with db.read() as conn:
        found = [records.job(row) for row in (await conn.execute(q)).mappings()]
    return {j.notification_id: (j.state, j.scheduled_at) for j in found if j.state in LIVE}


async def test_carry_gives_a_job_to_each_due_follow_up_without_one(
    db: Database, store: SqlStore
) -> None:
    t = NOW - timedelta(minutes=5)
    step = {"kind": "REMINDER", "number": 1, "due_time": t.isoformat(), "calls": 1}
    wanted = [
        awaiting(followup_at=t),
        # The ack ended while a step waited to retry: due once more, to close that step.
        awaiting(
            ack_status=AckStatus.TIMED_OUT.value,
            followup_step=step | {"results": {}, "recovered": False},
            followup_at=t + timedelta(seconds=2),
        ),
        # An expired lease of the previous release is free.
        awaiting(
            followup_at=t + timedelta(seconds=3),
            followup_lease_token=str(uuid.uuid4()),
            followup_lease_until=NOW,
        ),
        awaiting(followup_at=NOW),  # due exactly now
    ]
    served = awaiting(followup_at=t)  # has its job already
    never = [
        awaiting(followup_at=NOW + timedelta(seconds=1)),  # not yet
        awaiting(followup_at=None),  # nothing left to send
        awaiting(ack_status=AckStatus.ACKED.value),  # answered, no step waiting
        awaiting(followup_lease_token=str(uuid.uuid4()), followup_lease_until=NOW + LEASE),
    ]
    await insert(store, *wanted, served, *never)
    async with store.write() as tx:
        await tx.jobs.insert_many([follow_up_jobs.timer(served["id"], t)], NOW)
        assert await tx.follow_ups.carry(NOW, limit=100) == len(wanted)
        assert await tx.follow_ups.carry(NOW, limit=100) == 0  # each once
    carried = await live_follow_ups(db)
    assert set(carried) == {w["id"] for w in wanted} | {served["id"]}
    for w in wanted:  # due when the row said
        assert carried[w["id"]] == (JobState.AVAILABLE, w["followup_at"])


async def test_carry_takes_the_earliest_up_to_its_limit(db: Database, store: SqlStore) -> None:
    t = NOW - timedelta(minutes=5)
    first, second = awaiting(followup_at=t), awaiting(followup_at=t + timedelta(seconds=1))
    await insert(store, second, first)
    async with store.write() as tx:
        assert await tx.follow_ups.carry(NOW, limit=1) == 1
    assert set(await live_follow_ups(db)) == {first["id"]}


async def test_a_follow_up_is_sending_while_its_job_runs_under_a_live_lease(
    store: SqlStore,
) -> None:
    [nid] = await insert(store, awaiting())
    async with store.write() as tx:
        await tx.jobs.insert_many([follow_up_jobs.timer(nid, NOW)], NOW)
    async with store.read() as tx:
        assert not await tx.follow_ups.sending(nid, NOW)  # due, not claimed
    async with store.write() as tx:
        [job] = await tx.jobs.claim([JobKind.FOLLOW_UP], now=NOW, limit=5, lease=LEASE)
    async with store.read() as tx:
        assert await tx.follow_ups.sending(nid, NOW)
        assert not await tx.follow_ups.sending(nid, NOW + LEASE)  # expired
        assert not await tx.follow_ups.sending("another", NOW)
    assert job.lease_token is not None
    async with store.write() as tx:
        await tx.jobs.settle_many([follow_up_jobs.settle_done(job.id, job.lease_token)], NOW)
    async with store.read() as tx:
        assert not await tx.follow_ups.sending(nid, NOW)


async def test_follow_up_writes_record_the_step_on_the_row(store: SqlStore) -> None:
    [nid] = await insert(store, awaiting())
    retry_at = NOW + timedelta(seconds=30)
    answer = {"success": False, "retryable": True, "message_id": "", "error": "503"}
    step = StepProgress(StepKind.REMINDER, 1, NOW, 1, {"log": answer}, False)
    async with store.write() as tx:
        await tx.follow_ups.record_progress(moves.RetryFollowUpStep(nid, step, retry_at, None, NOW))
    stored = await fetch(store, nid)
    assert (stored["followup_step"], stored["followup_at"]) == (asdict(step), retry_at)
    assert stored["reminders_sent"] == 0  # not counted until decided

    counts = moves.FollowUpCounts(0, 0).after(StepKind.REMINDER, 1)
    refs = {"log": {"message_id": "m"}}
    async with store.write() as tx:
        fired = moves.SettleFollowUpStep(nid, counts, retry_at, refs, NOW)
        await tx.follow_ups.record_step(fired)
    stored = await fetch(store, nid)
    assert (stored["reminders_sent"], stored["escalations_sent"]) == (1, 0)
    assert stored["followup_step"] is None
    assert stored["followup_at"] == retry_at
    assert {k: ref["json"] for k, ref in stored["provider_refs"].items()} == refs

    async with store.write() as tx:  # nothing due yet: the next time shown
        await tx.follow_ups.look_again(nid, NOW + LEASE)
    assert (await fetch(store, nid))["followup_at"] == NOW + LEASE
    async with store.write() as tx:
        await tx.follow_ups.look_again(nid, None)
    assert (await fetch(store, nid))["followup_at"] is None


async def test_a_staged_rule_is_sending_while_its_job_runs(store: SqlStore) -> None:
    [nid] = await insert(store, awaiting())
    rule = person_rule_jobs.PersonRule("alice", "sms", timedelta(minutes=2), 0, NOW)
    async with store.write() as tx:
        await tx.jobs.insert_many([rule.job(nid, NOW)], NOW)
        [job] = await tx.jobs.claim([JobKind.PERSON_RULE], now=NOW, limit=5, lease=LEASE)
    async with store.read() as tx:
        assert await tx.follow_ups.sending(nid, NOW)  # its message's reference comes later
    assert job.lease_token is not None
    async with store.write() as tx:
        await tx.jobs.settle_many([person_rule_jobs.settle_done(job)], NOW)
    async with store.read() as tx:
        assert not await tx.follow_ups.sending(nid, NOW)


async def test_a_staged_rule_records_its_outcome_and_references(store: SqlStore) -> None:
    [nid] = await insert(store, awaiting())
    outcome = {"channels_succeeded": ["mail@alice"], "staged": [{"state": "SENT"}]}
    refs = {"sms@alice:after:120": {"message_id": "SM1"}}
    async with store.write() as tx:
        await tx.follow_ups.record_person_rule(moves.RecordPersonRule(nid, outcome, refs, NOW))
    stored = await fetch(store, nid)
    assert list(stored["outcome"]["staged"]) == [{"state": "SENT"}]
    assert {k: ref["json"] for k, ref in stored["provider_refs"].items()} == refs
    async with store.write() as tx:  # no new reference: the references stay
        await tx.follow_ups.record_person_rule(moves.RecordPersonRule(nid, outcome, None, NOW))
    assert set((await fetch(store, nid))["provider_refs"]) == set(refs)


def test_a_follow_up_counter_only_moves_forward() -> None:
    counts = moves.FollowUpCounts(reminders_sent=2, escalations_sent=1)
    assert counts.after(StepKind.REMINDER, 1) == counts  # a late close counts nothing
    assert counts.after(StepKind.REMINDER, 3) == moves.FollowUpCounts(3, 1)
    assert counts.after(StepKind.ESCALATION, 2) == moves.FollowUpCounts(2, 2)


# --- acknowledgements -------------------------------------------------------------


async def test_only_a_pending_ack_settles_and_only_once(store: SqlStore) -> None:
    pending, none, acked = await insert(
        store,
        row(ack_status=AckStatus.PENDING.value, deadline=NOW + timedelta(hours=1)),
        row(),
        row(ack_status=AckStatus.ACKED.value, actor="bob"),
    )

    async def settle(nid: str, status: AckStatus, actor: str) -> bool:
        async with store.write() as tx:
            return await tx.acks.settle_pending(
                nid, status=status, actor=actor, metadata={"via": actor}, now=NOW
            )

    assert await settle(pending, AckStatus.ACKED, "carol") is True
    first = await fetch(store, pending)
    assert (first["ack_status"], first["actor"], first["responded_at"]) == ("ACKED", "carol", NOW)
    assert first["response_metadata"] == {"via": "carol"}
    assert await settle(pending, AckStatus.DISMISSED, "dave") is False
    assert await fetch(store, pending) == first
    for nid in (none, acked):
        before = await fetch(store, nid)
        assert await settle(nid, AckStatus.TIMED_OUT, "expiry") is False
        assert await fetch(store, nid) == before
    assert await settle(str(uuid.uuid4()), AckStatus.ACKED, "carol") is False


async def test_an_answer_while_the_delivery_is_in_flight_settles_under_either_lease(
    store: SqlStore,
) -> None:
    # In flight: the running job holds the lease, or (a previous release's) the row does.
    by_job = (await leased_by_its_job(store, require_ack=True)).notification.id
    later = NOW + MINUTE
    by_row, idle = await insert(
        store, row(require_ack=True, next_attempt=later), row(require_ack=True, next_attempt=later)
    )
    await leased_by_its_row(store, by_row)
    async with store.write() as tx:
        settled = {
            nid: await tx.acks.settle_pending(
                nid, status=AckStatus.ACKED, actor="carol", metadata=None, now=NOW
            )
            for nid in (by_job, by_row, idle)
        }
    assert settled == {by_job: True, by_row: True, idle: False}  # idle: no ack owed yet


async def test_only_an_owed_ack_snoozes_and_only_a_snoozed_one_resumes(
    db: Database, store: SqlStore
) -> None:
    later = NOW + timedelta(hours=1)
    pending, acked = await insert(
        store,
        row(ack_status=AckStatus.PENDING.value, deadline=later),
        row(ack_status=AckStatus.ACKED.value, actor="bob", deadline=later),
    )
    async with store.write() as tx:  # a step of it being sent: the snooze stops it
        await tx.jobs.insert_many([follow_up_jobs.timer(pending, NOW)], NOW)
        [step] = await tx.jobs.claim([JobKind.FOLLOW_UP], now=NOW, limit=5, lease=LEASE)
    snooze = Snooze(NOW + timedelta(minutes=30), later + timedelta(minutes=30), 1800)
    async with store.write() as tx:
        assert await tx.acks.snooze(pending, snooze, NOW) is True
        assert await tx.acks.snooze(acked, snooze, NOW) is False
        assert await tx.acks.resume(acked, NOW) is False
    snoozed = await fetch(store, pending)
    assert (snoozed["ack_status"], snoozed["snoozed_until"]) == ("SNOOZED", snooze.until)
    assert (snoozed["deadline"], snoozed["snoozed_seconds"]) == (snooze.deadline, 1800)
    assert (await fetch(store, acked))["ack_status"] == "ACKED"
    assert (await live_follow_ups(db)) == {}  # the running step's job was cancelled
    assert step.lease_token is not None
    async with store.write() as tx:
        assert await tx.jobs.settle_many([follow_up_jobs.done(step)], NOW) == frozenset()
        assert await tx.acks.snooze(pending, snooze, NOW) is True  # snoozed again: owed
        await tx.jobs.insert_many([follow_up_jobs.timer(pending, later)], NOW)  # left waiting
        assert await tx.acks.resume(pending, NOW) is True
        assert await tx.acks.resume(pending, NOW) is False  # PENDING: nothing to resume
    resumed = await fetch(store, pending)
    assert (resumed["ack_status"], resumed["snoozed_until"]) == ("PENDING", None)
    assert resumed["deadline"] == snooze.deadline  # the pause stays in the deadline
    assert resumed["snoozes_ended"] == 1  # the number of this snooze's reminder
    assert (await live_follow_ups(db)) == {}  # the end's own job is the one chain


async def test_due_deadlines_are_pending_acks_past_their_deadline_earliest_first(
    store: SqlStore,
) -> None:
    pending = AckStatus.PENDING.value
    late, later, _future, _settled = await insert(
        store,
        row(ack_status=pending, deadline=NOW - timedelta(minutes=2)),
        row(ack_status=pending, deadline=NOW),
        row(ack_status=pending, deadline=NOW + timedelta(seconds=1)),
        row(ack_status=AckStatus.ACKED.value, deadline=NOW - timedelta(hours=1)),
    )
    async with store.write() as tx:
        assert [r.id for r in await tx.acks.due_deadlines(NOW, 10)] == [late, later]
        assert [r.id for r in await tx.acks.due_deadlines(NOW, 1)] == [late]


async def test_locked_reads_the_named_notifications_that_exist_by_id(store: SqlStore) -> None:
    pending = AckStatus.PENDING.value
    a, b = await insert(store, row(ack_status=pending, deadline=NOW), row())
    async with store.write() as tx:
        found = await tx.acks.locked({b, a, "no-such-notification"})
        assert sorted(found) == sorted([a, b])
        assert (found[a].ack_status, found[a].deadline) == (AckStatus.PENDING, NOW)
        assert found[b].ack_status is None
        assert await tx.acks.locked(set()) == {}


async def test_locked_waits_for_a_writer_holding_the_row_and_reads_its_commit(
    db_url: str, store: SqlStore
) -> None:
    [nid] = await insert(store, row(ack_status=AckStatus.PENDING.value, deadline=NOW))
    holding = asyncio.Event()

    async def answer(tx: Any, _i: int) -> None:
        await tx.acks.locked({nid})
        assert await tx.acks.settle_pending(
            nid, status=AckStatus.ACKED, actor="rita", metadata=None, now=NOW
        )
        holding.set()

    async def expire(tx: Any) -> AckStatus | None:
        return (await tx.acks.locked({nid}))[nid].ack_status

    other = SqlStore(Database(db_url))
    try:
        answering = asyncio.ensure_future(_race(db_url, 1, answer))
        await asyncio.wait_for(holding.wait(), 30)
        async with other.write() as tx:  # waits for the answer's commit (SQLite: its writer)
            seen = await expire(tx)
        await answering
    finally:
        await other.db.dispose()
    assert seen == AckStatus.ACKED


async def _waiting_on_a_lock(store: SqlStore) -> None:
    """Until a transaction of the database waits on a row lock (PostgreSQL; a SQLite
    writer waits on the one writer whenever it starts)."""
    if store.db.writer.dialect.name != "postgresql":
        return
    waiting = text(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    while True:
        async with store.db.read() as conn:
            if (await conn.execute(waiting)).scalar():
                return
        await asyncio.sleep(0.01)


async def committed_while_waiting(db_url: str, store: SqlStore, first: Any, then: Any) -> Any:
    """``first(tx)`` in a write transaction of another connection, committed only once
    ``then()`` waits on a lock it holds; ``then()``'s result."""
    holding, release = asyncio.Event(), asyncio.Event()
    other = SqlStore(Database(db_url))

    async def hold() -> None:
        async with other.write() as tx:
            await first(tx)
            holding.set()
            await release.wait()

    try:
        holder = asyncio.ensure_future(hold())
        await asyncio.wait_for(holding.wait(), 30)
        waiting = asyncio.ensure_future(then())
        await asyncio.wait_for(_waiting_on_a_lock(store), 30)
        release.set()
        await holder
        return await asyncio.wait_for(waiting, 30)
    finally:
        release.set()
        await other.db.dispose()


async def retried_while_waiting(
    db_url: str, store: SqlStore, nid: str, now: datetime, body: Any
) -> Any:
    """``nid`` claimed at ``now``, then its retry (due ``NOW + MINUTE``) settled in a
    transaction that commits only once ``body()`` waits on the row's lock; ``body``'s
    result."""
    [lease] = await claim(store, now=now)

    async def settle(tx: Any) -> None:
        retry = _retry(nid, lease.lease_token, lease.attempt)
        assert await tx.dispatch.settle_many([retry], now) == {nid}

    return await committed_while_waiting(db_url, store, settle, body)


async def test_a_locked_read_that_waited_for_a_settle_reads_the_lease_it_left(
    db_url: str, store: SqlStore
) -> None:
    # The settle commits while the read waits on the row's lock: the read sees the row
    # and its job as the settle left them, lease released. (PostgreSQL locks a row's
    # new version while the rest of the statement reads as of its start.)
    [nid] = await insert(store, row())

    async def get_locked() -> Notification | None:
        async with store.write() as tx:
            return await tx.notifications.get_locked(nid)

    async def acks_locked() -> Notification:
        async with store.write() as tx:
            return (await tx.acks.locked({nid}))[nid]

    for read, now in ((get_locked, NOW), (acks_locked, NOW + MINUTE)):
        found = await retried_while_waiting(db_url, store, nid, now, read)
        assert (found.lease_token, found.lease_until) == (None, None)
        assert found.next_attempt == NOW + MINUTE  # the retry's, as the settle wrote it


async def test_concurrent_expiry_sweeps_take_each_due_ack_once(
    db_url: str, store: SqlStore
) -> None:
    ids = await insert(
        store,
        *(
            row(ack_status=AckStatus.PENDING.value, deadline=NOW - timedelta(seconds=i))
            for i in range(6)
        ),
    )

    async def sweep(tx: Any, _i: int) -> list[str]:
        due = await tx.acks.due_deadlines(NOW, 2)
        for r in due:
            settled = await tx.acks.settle_pending(
                r.id, status=AckStatus.TIMED_OUT, actor="expiry", metadata=None, now=NOW
            )
            assert settled
        return [r.id for r in due]

    swept = await _race(db_url, 3, sweep)

    assert all(isinstance(s, list) for s in swept), swept
    taken = [nid for s in swept for nid in s]
    assert sorted(taken) == sorted(ids)  # each once: none skipped, none timed out twice


# --- the event timeline -----------------------------------------------------------


def _event(
    nid: str, kind: EventKind, payload: dict[str, Any], principal: str = "alice"
) -> NewEvent:
    return NewEvent(nid, principal, "conformance", kind, payload)


async def test_events_read_after_a_cursor_oldest_first(store: SqlStore) -> None:
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    async with store.read() as tx:
        assert await tx.events.high_water() == 0
    async with store.write() as tx:
        await tx.events.append(
            [
                _event(a, EventKind.ACCEPTED, {"n": 1}),
                _event(b, EventKind.ACCEPTED, {"n": 2}, principal="bob"),
            ],
            NOW,
        )
    async with store.write() as tx:
        await tx.events.append([_event(a, EventKind.DELIVERY_RESULT, {"n": 3})], NOW)
    async with store.write() as tx:
        await tx.events.append([], NOW)  # nothing to append: no sequence taken

    async with store.read() as tx:
        every = await tx.events.read_after(0, limit=10)
        sequences = [e.sequence for e in every]
        assert [e.payload["n"] for e in every] == [1, 2, 3]
        assert [e.kind for e in every] == [
            EventKind.ACCEPTED,
            EventKind.ACCEPTED,
            EventKind.DELIVERY_RESULT,
        ]
        assert [e.principal for e in every] == ["alice", "bob", "alice"]
        assert sequences == sorted(sequences) and len(set(sequences)) == 3
        assert await tx.events.high_water() == sequences[-1]
        after_first = await tx.events.read_after(sequences[0], limit=10)
        assert [e.sequence for e in after_first] == sequences[1:]  # the cursor excluded
        assert [e.sequence for e in await tx.events.read_after(0, limit=2)] == sequences[:2]
        assert await tx.events.read_after(sequences[-1], limit=10) == []
        mine = await tx.events.read_after(0, limit=10, principals=["alice"])
        assert [e.payload["n"] for e in mine] == [1, 3]
        assert await tx.events.read_after(0, limit=10, principals=[]) == []
        results = await tx.events.read_after(0, limit=10, kinds=[EventKind.DELIVERY_RESULT.value])
        assert [e.notification_id for e in results] == [a]
        of_b = await tx.events.read_after(0, limit=10, notification_ids=[b])
        assert [e.payload["n"] for e in of_b] == [2]


async def test_concurrent_appends_are_read_in_commit_order(db_url: str, store: SqlStore) -> None:
    """A reader that has seen sequence N never later finds an event below N: sequences
    are handed out in commit order (the advisory lock on PostgreSQL)."""
    writers = [SqlStore(Database(db_url)) for _ in range(3)]
    nid = str(uuid.uuid4())
    seen: list[int] = []
    done = asyncio.Event()

    async def write(writer: SqlStore, w: int) -> None:
        for i in range(8):
            async with writer.write() as tx:
                await tx.events.append([_event(nid, EventKind.ACCEPTED, {"w": w, "i": i})], NOW)
                # Commit late, by a different delay each time: without the ordering
                # rule a later sequence would commit first.
                await asyncio.sleep(0.002 * ((w + i) % 3))

    async def follow() -> None:
        cursor = 0
        while True:
            finished = done.is_set()
            async with store.read() as tx:
                batch = await tx.events.read_after(cursor, limit=100)
            seen.extend(e.sequence for e in batch)
            cursor = seen[-1] if seen else cursor
            if finished:
                return
            await asyncio.sleep(0)

    try:
        follower = asyncio.create_task(follow())
        await asyncio.gather(*(write(w, i) for i, w in enumerate(writers)))
        done.set()
        await follower
    finally:
        for w in writers:
            await w.db.dispose()

    async with store.read() as tx:
        every = [e.sequence for e in await tx.events.read_after(0, limit=100)]
    assert len(every) == 24
    assert seen == every  # nothing skipped, nothing out of order


# --- idempotency keys and dedup windows -------------------------------------------


def _unique_violation(exc: BaseException) -> bool:
    """A unique violation (SQLAlchemy's wrapper or asyncpg's own), which the store's
    lost-race signal, what makes intake retry, recognises."""
    sqlstate = getattr(exc, "sqlstate", None) or getattr(getattr(exc, "orig", None), "sqlstate", "")
    unique = isinstance(exc, IntegrityError) or str(sqlstate).startswith("23")
    return unique and is_lost_race(exc)


async def test_an_idempotency_key_is_held_by_one_row(db_url: str, store: SqlStore) -> None:
    rows = [row(key="k" * 64) for _ in range(3)]

    async def insert_one(tx: Any, i: int) -> str:
        await tx.notifications.insert([record(rows[i])])
        return str(rows[i]["id"])

    results = await _race(db_url, 3, insert_one)

    won = [r for r in results if isinstance(r, str)]
    assert len(won) == 1
    assert all(_unique_violation(r) for r in results if not isinstance(r, str))
    async with store.write() as tx:
        held = await tx.notifications.by_keys(["k" * 64, "absent"])
    assert {k: v.id for k, v in held.items()} == {"k" * 64: won[0]}


async def test_get_reads_a_notification_as_a_typed_record_of_every_column(
    store: SqlStore,
) -> None:
    [nid] = await insert(
        store,
        row(
            ack_status=AckStatus.PENDING.value,
            deadline=NOW + timedelta(hours=1),
            response_metadata={"note": "x"},
            provider_refs={"hook": {"type": "webhook"}},
        ),
    )
    stored = await fetch(store, nid)
    async with store.read() as tx:
        found = await tx.notifications.get(nid)
        assert await tx.notifications.get(str(uuid.uuid4())) is None
    assert isinstance(found, Notification)
    assert {f.name for f in fields(found)} == set(stored)  # every column, no other
    read = {f.name: getattr(found, f.name) for f in fields(found)}
    typed = {k: dataclasses.asdict(v) for k, v in read.items() if dataclasses.is_dataclass(v)}
    assert set(typed) == {"notification", "outcome"}  # JSON columns read as typed records
    assert found.provider_refs is not None
    typed["provider_refs"] = {k: asdict(r) for k, r in found.provider_refs.items()}
    assert read | typed == stored
    assert found.provider_refs["hook"].channel_type == "webhook"
    assert type(found.status) is Status and type(found.ack_status) is AckStatus
    assert type(found.notification) is NotificationDocument
    assert type(found.outcome) is DeliveryOutcome
    assert type(found.delivery_mode) is DeliveryMode


async def test_a_dedup_key_has_one_window_and_its_generations_serialise(
    db_url: str, store: SqlStore
) -> None:
    until = NOW + timedelta(minutes=5)

    async def open_window(tx: Any, i: int) -> str:
        owner = f"owner-{i}"
        await tx.notifications.take_dedup_window(DedupWindowTake("d", owner, 1, until, insert=True))
        return owner

    opened = await _race(db_url, 3, open_window)
    [first_owner] = [r for r in opened if isinstance(r, str)]
    assert all(_unique_violation(r) for r in opened if not isinstance(r, str))

    async def lead_next(tx: Any, i: int) -> int:
        window = await tx.notifications.locked_dedup_window("d")  # until commit
        assert window is not None
        generation = window.generation + 1
        change = DedupWindowTake("d", f"next-{i}", generation, until, insert=False)
        await tx.notifications.take_dedup_window(change)
        return generation

    generations = await _race(db_url, 4, lead_next)

    assert sorted(generations) == [2, 3, 4, 5]  # no two transactions led the same one
    async with store.write() as tx:
        window = await tx.notifications.locked_dedup_window("d")
    assert window is not None and window.generation == 5
    assert window.owner_id == f"next-{generations.index(5)}"
    assert first_owner.startswith("owner-")


async def test_intake_takes_a_window_under_its_lock_one_generation_at_a_time(
    db_url: str, store: SqlStore
) -> None:
    """Intake's path (``domain.admission``): read the window locked, then take it."""
    until = NOW + timedelta(minutes=5)

    async def open_window(tx: Any, i: int) -> str:
        await tx.notifications.take_dedup_window(
            DedupWindowTake("w", f"owner-{i}", 1, until, insert=True)
        )
        return f"owner-{i}"

    opened = await _race(db_url, 3, open_window)
    assert len([r for r in opened if isinstance(r, str)]) == 1
    assert all(_unique_violation(r) for r in opened if not isinstance(r, str))

    async def lead_next(tx: Any, i: int) -> int:
        window = await tx.notifications.locked_dedup_window("w")
        assert window is not None and window.key == "w" and window.until == until
        generation = window.generation + 1
        change = DedupWindowTake("w", f"next-{i}", generation, until, insert=False)
        await tx.notifications.take_dedup_window(change)
        return generation

    generations = await _race(db_url, 4, lead_next)

    assert sorted(generations) == [2, 3, 4, 5]
    async with store.write() as tx:
        window = await tx.notifications.locked_dedup_window("w")
        assert await tx.notifications.locked_dedup_window("absent") is None
    assert window is not None and window.generation == 5
    assert window.owner_id == f"next-{generations.index(5)}"


async def test_a_window_owner_is_read_as_it_stands(store: SqlStore) -> None:
    [leader] = await insert(store, row(status=Status.DELIVERED.value))
    async with store.write() as tx:
        assert await tx.notifications.window_owner(leader) == WindowOwner(leader, Status.DELIVERED)
        assert await tx.notifications.window_owner(str(uuid.uuid4())) is None


# --- retention --------------------------------------------------------------------

CUTOFF = NOW - timedelta(days=30)
WEEK = timedelta(days=7)

# One generated row: its states, whether it went quiet before the cutoff, whether an
# event came after it.
_rows = st.lists(
    st.tuples(
        st.sampled_from(list(Status)),
        st.booleans(),
        st.sampled_from([None, *AckStatus]),
        st.booleans(),
        st.booleans(),
    ),
    max_size=12,
)


@settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(generated=_rows)
async def test_retention_selects_exactly_the_rows_the_domain_lets_go(
    store: SqlStore, generated: list[tuple[Status, bool, AckStatus | None, bool, bool]]
) -> None:
    """Every retention query that asks "is this row settled?" agrees with
    ``domain.retention.holds_work``: rows, their old events, their dedup windows,
    their idempotency keys."""
    async with store.db.write() as raw:  # one database for every example: start empty
        for table in (events_table, dedup_table, notifications_table):
            await raw.conn.execute(delete(table))
    rows, late_events, old_events, expected = [], [], [], set()
    for status, dead_letter, ack_status, quiet, late_event in generated:
        updated = CUTOFF - timedelta(days=1) if quiet else CUTOFF + timedelta(seconds=1)
        r = row(
            status=status.value,
            dead_letter=dead_letter,
            ack_status=None if ack_status is None else ack_status.value,
            created_at=min(updated, CUTOFF - timedelta(days=2)),
            updated_at=updated,
        )
        rows.append(r)
        old_events.append(_event(r["id"], EventKind.ACCEPTED, {}))
        if late_event:
            late_events.append(_event(r["id"], EventKind.ACCEPTED, {}))
        if quiet and not late_event and not holds_work(status, dead_letter, r["ack_status"]):
            expected.add(r["id"])
    settled = {
        r["id"] for r in rows if not holds_work(r["status"], r["dead_letter"], r["ack_status"])
    }
    await insert(store, *rows)
    async with store.write() as tx:
        for r in rows:  # each row owns a window that ended long ago
            window = DedupWindowTake(f"w-{r['id']}", r["id"], 1, CUTOFF - WEEK, insert=True)
            await tx.notifications.take_dedup_window(window)
        await tx.events.append(old_events, CUTOFF - WEEK)
    async with store.write() as tx:
        await tx.events.append(late_events, CUTOFF)  # at the cutoff: not before it

    async with store.read() as tx:
        selected = {r.id for r in await tx.retention.settled_before(CUTOFF, 100)}
        stale, _ = await tx.retention.stale_events(CUTOFF, [])
        windows = set(await tx.retention.expired_windows(CUTOFF))
    assert selected == expected
    assert stale == len(settled)  # each row's one old event, when the row is settled
    assert windows == {f"w-{nid}" for nid in settled}
    async with store.write() as tx:
        assert await tx.retention.expire_keys(CUTOFF) == len(settled)
    for r in rows:
        expired = (await fetch(store, r["id"]))["key"] != r["key"]
        assert expired == (r["id"] in settled)
    # The delete repeats the guard: asked to delete everything, it keeps every row
    # that holds work.
    async with store.write() as tx:
        deleted = await tx.retention.delete_notifications([r["id"] for r in rows])
    async with store.read() as tx:
        kept = await tx.retention.existing_ids([r["id"] for r in rows])
    assert kept == {r["id"] for r in rows} - settled
    assert deleted == len(settled)


async def test_retention_selects_oldest_first_up_to_the_limit(store: SqlStore) -> None:
    settled = {"status": Status.DELIVERED.value, "created_at": CUTOFF - timedelta(days=9)}
    old, older, oldest = await insert(
        store,
        row(**settled, updated_at=CUTOFF - timedelta(days=1)),
        row(**settled, updated_at=CUTOFF - timedelta(days=2)),
        row(**settled, updated_at=CUTOFF - timedelta(days=3)),
    )
    async with store.read() as tx:
        ordered = [r.id for r in await tx.retention.settled_before(CUTOFF, 10)]
        assert ordered == [oldest, older, old]
        assert [r.id for r in await tx.retention.settled_before(CUTOFF, 2)] == ordered[:2]
        assert await tx.retention.settled_before(CUTOFF - timedelta(days=3), 10) == []


# Delivery jobs (SPEC §7 "One work engine"): one live ``delivery`` job per due leader,
# claimed with its leader under the leader's token, moved by the settle that lands.


async def raw(store: SqlStore, nid: str) -> dict[str, Any]:
    """The notification's own columns, as stored (not as the port reads them)."""
    t = notifications_table
    async with store.db.read() as conn:
        return dict((await conn.execute(select(t).where(t.c.id == nid))).mappings().one())


async def delivery_leases(store: SqlStore, nid: str) -> list[tuple[Any, ...]]:
    """(state, lease_token, lease_until) of each live delivery job of ``nid``."""
    t = jobs_table
    q = (
        select(t.c.state, t.c.lease_token, t.c.lease_until)
        .where(t.c.notification_id == nid, t.c.kind == JobKind.DELIVERY.value)
        .where(t.c.state.in_([s.value for s in LIVE]))
    )
    async with store.db.read() as conn:
        return [tuple(r) for r in (await conn.execute(q)).all()]


async def delivery_jobs(store: SqlStore, nid: str) -> list[tuple[Any, ...]]:
    """(state, attempt, scheduled_at, lease_token) of each delivery job of ``nid``."""
    t = jobs_table
    q = (
        select(t.c.state, t.c.attempt, t.c.scheduled_at, t.c.lease_token)
        .where(t.c.notification_id == nid, t.c.kind == JobKind.DELIVERY.value)
        .order_by(t.c.id)
    )
    async with store.db.read() as conn:
        return [tuple(r) for r in (await conn.execute(q)).all()]


async def test_a_due_leader_has_one_delivery_job_and_a_follower_none(store: SqlStore) -> None:
    leader, later = await insert(
        store, row(priority=3), row(next_attempt=NOW + timedelta(minutes=5))
    )
    [follower] = await insert(store, row(dedup_key="k", dedup_owner_id=leader))
    assert await delivery_jobs(store, leader) == [("available", 0, NOW - SECOND, None)]
    assert await delivery_jobs(store, later) == [("available", 0, NOW + 5 * MINUTE, None)]
    assert await delivery_jobs(store, follower) == []
    async with store.read() as tx:
        assert await tx.dispatch.next_due_at(WEBHOOK) == NOW - SECOND


async def test_the_claim_runs_the_job_under_the_leaders_token(store: SqlStore) -> None:
    [nid] = await insert(store, row())
    [lease] = await claim(store)
    assert await delivery_jobs(store, nid) == [("running", 1, NOW - SECOND, lease.lease_token)]
    async with store.read() as tx:
        assert await tx.dispatch.next_due_at(WEBHOOK) is None  # running: nothing due
    # A retry lands: the job is due again at the retry's time.
    async with store.write() as tx:
        assert await tx.dispatch.settle_many([_retry(nid, lease.lease_token)], NOW) == {nid}
    assert await delivery_jobs(store, nid) == [("retryable", 1, NOW + MINUTE, None)]
    [again] = await claim(store, now=NOW + MINUTE)
    # A stale token moves neither the row nor its job.
    async with store.write() as tx:
        stale = _delivered(nid, lease.lease_token, 2)
        assert await tx.dispatch.settle_many([stale], NOW) == frozenset()
    assert await delivery_jobs(store, nid) == [("running", 2, NOW + MINUTE, again.lease_token)]
    async with store.write() as tx:
        now_settled = _delivered(nid, again.lease_token, 2)
        assert await tx.dispatch.settle_many([now_settled], NOW) == {nid}
    assert await delivery_jobs(store, nid) == [("completed", 2, NOW + MINUTE, None)]


async def test_an_expired_delivery_is_rescued_and_claimed_as_a_recovery(store: SqlStore) -> None:
    [nid] = await insert(store, row())
    [first] = await claim(store)
    # The rescuer finds the expired lease first: the job is due again at once.
    async with store.write() as tx:
        rescued = await tx.jobs.rescue_expired([JobKind.DELIVERY], now=NOW + LEASE, limit=10)
    assert [(j.notification_id, j.state) for j in rescued] == [(nid, JobState.RETRYABLE)]
    [second] = await claim(store, now=NOW + LEASE)
    assert second.recovered and second.notification.lease_token == first.lease_token
    assert (await fetch(store, nid))["provider_effect_may_have_occurred"]


async def test_carry_gives_jobless_leaders_a_job_and_cancels_stale_ones(
    store: SqlStore,
) -> None:
    # Rows a replica of the previous release wrote: no delivery job.
    jobless, also = row(), row()
    async with store.db.write() as tx:
        await tx.conn.execute(
            notifications_table.insert(),
            [records.notification_row(record(r)) for r in (jobless, also)],
        )
    [other] = await insert(store, row())
    async with store.db.write() as tx:  # that replica delivered this one
        q = notifications_table.update().where(notifications_table.c.id == other)
        await tx.conn.execute(q.values(status=Status.DELIVERED.value))
    async with store.write() as tx:
        assert await tx.dispatch.carry(NOW, limit=10) == 3  # two carried, one cancelled
    assert await delivery_jobs(store, jobless["id"]) == [("available", 0, NOW - SECOND, None)]
    assert [j[0] for j in await delivery_jobs(store, other)] == ["cancelled"]
    async with store.write() as tx:
        assert await tx.dispatch.carry(NOW, limit=10) == 0  # nothing left to carry
    claimed = claimed_ids(await claim(store))
    assert sorted(claimed) == sorted([jobless["id"], also["id"]])


async def test_a_withdrawal_cancels_the_job_and_a_replay_makes_one(store: SqlStore) -> None:
    a, b = await insert(store, row(), row())
    async with store.write() as tx:
        applied = await tx.moves.withdraw(
            WithdrawRows((a,), Scope.NOTIFICATION, Status.PENDING, "oscar", "", NOW)
        )
    assert applied.ids == (a,)
    assert [j[0] for j in await delivery_jobs(store, a)] == ["cancelled"]
    [lease] = await claim(store)
    assert lease.notification.id == b
    async with store.write() as tx:
        dead = moves.ExhaustAttempt(b, lease.lease_token, Status.FAILED, True, {}, 0, 0)
        assert await tx.dispatch.settle_many([dead], NOW) == {b}
    assert [j[0] for j in await delivery_jobs(store, b)] == ["discarded"]
    async with store.write() as tx:
        replayed = await tx.moves.replay(moves.DeadLetterReplay(b, 1, NOW + MINUTE))
    assert not replayed.lost
    assert [j[:3] for j in await delivery_jobs(store, b)] == [
        ("discarded", 1, NOW - SECOND),
        ("available", 0, NOW + MINUTE),
    ]


async def test_a_record_reads_the_lease_its_running_job_holds_else_its_rows(
    store: SqlStore,
) -> None:
    # Every read that builds a record: the lease of the running job (the row's own
    # columns cleared), or of the row itself (its job not running: a previous release's).
    lease = await leased_by_its_job(store, dedup_key="k", dedup_generation=1)
    by_job = lease.notification
    [by_row_id] = await insert(store, row(next_attempt=NOW + MINUTE))
    token = await leased_by_its_row(store, by_row_id)
    until = NOW + LEASE
    want = {by_job.id: (lease.lease_token, until), by_row_id: (token, until)}
    assert await delivery_jobs(store, by_job.id) == [
        ("running", 1, NOW - SECOND, lease.lease_token)
    ]
    assert [j[0] for j in await delivery_jobs(store, by_row_id)] == ["available"]

    def leases(found: Sequence[Notification | None]) -> dict[str, tuple[Any, Any]]:
        return {n.id: (n.lease_token, n.lease_until) for n in found if n is not None}

    async with store.write() as tx:
        read = tx.notifications
        await read.take_dedup_window(DedupWindowTake("k", by_job.id, 1, until, insert=True))
        by_row = await read.get(by_row_id)
        assert by_row is not None
        assert leases([await read.get(nid) for nid in want]) == want
        assert leases([await read.get_locked(nid) for nid in want]) == want
        assert leases([await read.by_key(by_job.key), await read.by_key(by_row.key)]) == want
        assert leases(list((await read.by_keys([by_job.key, by_row.key])).values())) == want
        page = await read.list_page(conditions=[], after=None, limit=10)
        assert leases(page) == want
        assert leases(list((await tx.acks.locked(set(want))).values())) == want
        owned = await tx.dispatch.window_owner("k")
        assert owned is not None and leases([owned[1]]) == {by_job.id: want[by_job.id]}


async def test_the_claim_reads_the_jobs_and_rechecks_each_leader(store: SqlStore) -> None:
    # The claim picks jobs from uns_jobs alone (served by the channels each carries),
    # then leases the leaders that are still due: a job whose notification stopped
    # being a due leader behind its back is cancelled, and one whose leader a replica
    # of the previous release holds leased waits until that lease ends.
    ok, gone, held, sms = await insert(store, row(), row(), row(), row(channels=("sms",)))
    async with store.read() as tx:
        assert await tx.dispatch.next_due_at(("sms",)) == NOW - SECOND
    t = notifications_table
    async with store.db.write() as tx:
        await tx.conn.execute(
            t.update().where(t.c.id == gone).values(status=Status.DELIVERED.value)
        )
        await tx.conn.execute(
            t.update()
            .where(t.c.id == held)
            .values(lease_token=str(uuid.uuid4()), lease_until=NOW + LEASE)
        )
    assert claimed_ids(await claim(store)) == [ok]  # sms is not served here
    assert [j[0] for j in await delivery_jobs(store, gone)] == ["cancelled"]
    assert await delivery_jobs(store, held) == [("available", 0, NOW + LEASE, None)]
    assert [j[0] for j in await delivery_jobs(store, sms)] == ["available"]
    async with store.read() as tx:
        assert await tx.dispatch.next_due_at(WEBHOOK) == NOW + LEASE
    # That lease ends unsettled (as does this claim's own lease of ``ok``): both are
    # claimed again, as recoveries.
    late = await claim(store, now=NOW + LEASE)
    assert {a.notification.id: a.recovered for a in late} == {ok: True, held: True}
    [sent] = await claim(store, now=NOW + LEASE, channels=("sms", "webhook"))
    assert sent.notification.id == sms

"""The ``Moves`` port (``store.port``; SQL in ``store.moves``) on SQLite and PostgreSQL:
each typed move changes only rows still in the state it expects, and says how many
(and which)."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select

from tests.store.test_conformance import LEASE, NOW, fetch, insert, row
from uns_server.domain import follow_up_jobs
from uns_server.domain import moves as m
from uns_server.domain.enums import AckStatus, Status
from uns_server.domain.jobs import JobKind, JobState
from uns_server.domain.outcomes import DeliveryOutcome
from uns_server.domain.withdrawal import Scope, WithdrawRows
from uns_server.store import port, records
from uns_server.store.db import Database
from uns_server.store.sql_store import SqlStore
from uns_server.store.tables import dedup as dedup_table
from uns_server.store.tables import jobs as jobs_table

LATER = NOW + timedelta(minutes=5)
Method = Callable[[port.Moves], Callable[[Any], Awaitable[m.Applied]]]


async def apply(store: SqlStore, method: Method, move: object) -> m.Applied:
    """``method`` of the transaction's ``Moves`` port, applied to ``move``."""
    async with store.write() as tx:
        return await method(tx.moves)(move)


def dead_letter(**overrides: Any) -> dict[str, Any]:
    return row(
        status=Status.FAILED.value,
        dead_letter=True,
        cycle=2,
        cycle_attempts=4,
        lease_token="t",
        outcome={"channels_failed": ["webhook"]},
        **overrides,
    )


async def test_replay_opens_the_next_cycle_of_that_dead_letter_only(store: SqlStore) -> None:
    nid, stale, resolved = await insert(store, dead_letter(), dead_letter(), dead_letter())

    applied = await apply(store, lambda moves: moves.replay, m.DeadLetterReplay(nid, 2, NOW))
    assert applied == m.Applied(1, 1)
    applied.expect("replay")  # changed as named: nothing to raise
    after = await fetch(store, nid)
    assert (after["status"], after["dead_letter"], after["cycle"]) == (Status.PENDING, False, 3)
    assert (after["cycle_attempts"], after["next_attempt"], after["lease_token"]) == (0, NOW, None)
    assert after["outcome"] == dataclasses.asdict(DeliveryOutcome())  # none yet this cycle

    not_its_cycle = m.DeadLetterReplay(stale, 1, NOW)
    lost = await apply(store, lambda moves: moves.replay, not_its_cycle)
    assert lost.lost and (await fetch(store, stale))["status"] == Status.FAILED
    # A caller that read the row under its lock cannot go on after a lost move.
    with pytest.raises(m.MoveLost, match="replay of x: 0 of 1 rows"):
        lost.expect("replay of x")
    applied_again = await apply(store, lambda moves: moves.replay, m.DeadLetterReplay(nid, 3, NOW))
    assert applied_again == m.Applied(1, 0)

    assert not (
        await apply(store, lambda moves: moves.resolve_failure, m.ResolveFailure(resolved, NOW))
    ).lost
    after = await fetch(store, resolved)
    assert (after["status"], after["dead_letter"], after["cycle"]) == (Status.FAILED, False, 2)
    assert (
        await apply(store, lambda moves: moves.resolve_failure, m.ResolveFailure(resolved, NOW))
    ).lost


async def test_a_withdrawal_fences_leases_and_moves_only_the_expected_state(
    store: SqlStore,
) -> None:
    pending, delivered, settled = await insert(
        store,
        row(lease_token="t", lease_until=LATER, followup_lease_token="f"),
        row(status=Status.DELIVERED.value, ack_status=AckStatus.PENDING.value, deadline=LATER),
        row(status=Status.DELIVERED.value, ack_status=AckStatus.ACKED.value),
    )
    notification = WithdrawRows((pending,), Scope.NOTIFICATION, Status.PENDING, "op", "r", NOW)
    assert (await apply(store, lambda moves: moves.withdraw, notification)).ids == (pending,)
    after = await fetch(store, pending)
    assert (after["status"], after["withdrawn_by"], after["withdraw_reason"]) == (
        Status.WITHDRAWN,
        "op",
        "r",
    )
    assert after["lease_token"] is None and after["followup_lease_token"] is None
    assert after["followup_at"] is None

    ack = WithdrawRows((delivered, settled), Scope.ACK, Status.DELIVERED, "op", "", NOW)
    applied = await apply(store, lambda moves: moves.withdraw, ack)
    assert applied.lost and applied.ids == (delivered,)  # the settled ack stays ACKED
    after = await fetch(store, delivered)
    assert (after["ack_status"], after["actor"], after["responded_at"]) == (
        AckStatus.WITHDRAWN,
        "op",
        NOW,
    )
    assert after["followup_at"] == NOW  # a step between retries is closed at once
    assert (await fetch(store, settled))["ack_status"] == AckStatus.ACKED


async def test_a_withdrawal_cancels_a_step_being_sent_and_makes_the_others_due(
    db: Database, store: SqlStore
) -> None:
    acked = {"status": Status.DELIVERED.value, "deadline": LATER}
    sending, waiting, untouched = await insert(
        store, *(row(**acked, ack_status=AckStatus.PENDING.value) for _ in range(3))
    )
    async with store.write() as tx:
        await tx.jobs.insert_many([follow_up_jobs.timer(sending, NOW)], NOW)
        [step] = await tx.jobs.claim([JobKind.FOLLOW_UP], now=NOW, limit=5, lease=LEASE)
        timers = [follow_up_jobs.timer(nid, LATER) for nid in (waiting, untouched)]
        await tx.jobs.insert_many(timers, NOW)
    ack = WithdrawRows((sending, waiting), Scope.ACK, Status.DELIVERED, "op", "", NOW)
    applied = await apply(store, lambda moves: moves.withdraw, ack)
    assert applied.ids == tuple(sorted((sending, waiting)))

    async with db.read() as conn:
        found = [records.job(r) for r in (await conn.execute(select(jobs_table))).mappings()]
    jobs = {j.notification_id: j for j in found}
    assert (jobs[sending].state, jobs[sending].lease_token) == (JobState.CANCELLED, None)
    assert (jobs[waiting].state, jobs[waiting].scheduled_at) == (JobState.AVAILABLE, NOW)
    assert (jobs[untouched].state, jobs[untouched].scheduled_at) == (JobState.AVAILABLE, LATER)
    assert step.lease_token is not None
    async with store.write() as tx:  # the step's settle finds its fence lost
        done = follow_up_jobs.settle_done(step.id, step.lease_token)
        assert await tx.jobs.settle_many([done], NOW) == frozenset()


async def test_followers_move_only_while_they_follow_the_named_owner(store: SqlStore) -> None:
    leader, other = await insert(store, row(), row())
    a, b, c, gone = await insert(
        store,
        *(row(dedup_owner_id=leader) for _ in range(3)),
        row(dedup_owner_id=leader, status=Status.WITHDRAWN.value),
    )
    satisfied = await apply(
        store, lambda moves: moves.satisfy_followers, m.SatisfyFollowers(leader, (a, gone), NOW)
    )
    assert satisfied == m.Applied(2, 1, (a,))
    assert (await fetch(store, a))["status"] == Status.DEDUPLICATED
    assert (await fetch(store, gone))["status"] == Status.WITHDRAWN

    assert (
        await apply(store, lambda moves: moves.promote, m.Promote(b, other, NOW))
    ).lost  # not its owner
    assert not (await apply(store, lambda moves: moves.promote, m.Promote(b, leader, NOW))).lost
    promoted = await fetch(store, b)
    assert (promoted["dedup_owner_id"], promoted["next_attempt"]) == (None, NOW)

    relinked = await apply(store, lambda moves: moves.relink, m.Relink((c, a), leader, b, NOW))
    assert relinked.ids == (c,)  # the satisfied one is no longer a pending follower
    assert (await fetch(store, c))["dedup_owner_id"] == b

    assert not (
        await apply(store, lambda moves: moves.record_successor, m.RecordSuccessor(leader, b))
    ).lost
    assert (await fetch(store, leader))["dedup_successor_id"] == b


async def test_window_moves_keep_a_window_a_newer_leader_took(store: SqlStore) -> None:
    async with store.db.write() as raw:
        await raw.conn.execute(
            dedup_table.insert().values(key="k", owner_id="old", generation=1, until=NOW)
        )
    extend = m.ExtendWindow("k", "old", LATER)
    assert not (await apply(store, lambda moves: moves.extend_window, extend)).lost
    assert (await apply(store, lambda moves: moves.move_window, m.MoveWindow("k", "x", "new"))).lost
    assert not (
        await apply(store, lambda moves: moves.move_window, m.MoveWindow("k", "old", "new"))
    ).lost
    assert (await apply(store, lambda moves: moves.extend_window, extend)).lost  # "new" keeps it
    async with store.db.read() as conn:
        window = (await conn.execute(dedup_table.select())).mappings().one()
    assert (window["owner_id"], window["until"]) == ("new", LATER)

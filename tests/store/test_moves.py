"""The ``Moves`` port (``store.moves``) on SQLite and PostgreSQL: each typed move
changes only rows still in the state it expects, and says how many (and which)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from tests.store.test_conformance import NOW, fetch, insert, row
from uns_server.domain import moves
from uns_server.domain.enums import AckStatus, Status
from uns_server.domain.outcomes import DeliveryOutcome
from uns_server.domain.withdrawal import Scope, WithdrawRows
from uns_server.store import moves as store_moves
from uns_server.store import port
from uns_server.store.db import Database
from uns_server.store.tables import dedup as dedup_table

MOVES: port.Moves = store_moves
LATER = NOW + timedelta(minutes=5)


async def apply(db: Database, method: Any, move: Any) -> moves.Applied:
    async with db.write() as tx:
        applied: moves.Applied = await method(tx.conn, move)
    return applied


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


async def test_replay_opens_the_next_cycle_of_that_dead_letter_only(db: Database) -> None:
    nid, stale, resolved = await insert(db, dead_letter(), dead_letter(), dead_letter())

    applied = await apply(db, MOVES.replay, moves.Replay(nid, 2, NOW))
    assert applied == moves.Applied(1, 1)
    applied.expect("replay")  # changed as named: nothing to raise
    after = await fetch(db, nid)
    assert (after["status"], after["dead_letter"], after["cycle"]) == (Status.PENDING, False, 3)
    assert (after["cycle_attempts"], after["next_attempt"], after["lease_token"]) == (0, NOW, None)
    assert after["outcome"] == dataclasses.asdict(DeliveryOutcome())  # none yet this cycle

    lost = await apply(db, MOVES.replay, moves.Replay(stale, 1, NOW))  # not its cycle
    assert lost.lost and (await fetch(db, stale))["status"] == Status.FAILED
    # A caller that read the row under its lock cannot go on after a lost move.
    with pytest.raises(moves.MoveLost, match="replay of x: 0 of 1 rows"):
        lost.expect("replay of x")
    assert await apply(db, MOVES.replay, moves.Replay(nid, 3, NOW)) == moves.Applied(1, 0)

    assert not (await apply(db, MOVES.resolve_failure, moves.ResolveFailure(resolved, NOW))).lost
    after = await fetch(db, resolved)
    assert (after["status"], after["dead_letter"], after["cycle"]) == (Status.FAILED, False, 2)
    assert (await apply(db, MOVES.resolve_failure, moves.ResolveFailure(resolved, NOW))).lost


async def test_a_withdrawal_fences_leases_and_moves_only_the_expected_state(db: Database) -> None:
    pending, delivered, settled = await insert(
        db,
        row(lease_token="t", lease_until=LATER, followup_lease_token="f"),
        row(status=Status.DELIVERED.value, ack_status=AckStatus.PENDING.value, deadline=LATER),
        row(status=Status.DELIVERED.value, ack_status=AckStatus.ACKED.value),
    )
    notification = WithdrawRows((pending,), Scope.NOTIFICATION, Status.PENDING, "op", "r", NOW)
    assert (await apply(db, MOVES.withdraw, notification)).ids == (pending,)
    after = await fetch(db, pending)
    assert (after["status"], after["withdrawn_by"], after["withdraw_reason"]) == (
        Status.WITHDRAWN,
        "op",
        "r",
    )
    assert after["lease_token"] is None and after["followup_lease_token"] is None
    assert after["followup_at"] is None

    ack = WithdrawRows((delivered, settled), Scope.ACK, Status.DELIVERED, "op", "", NOW)
    applied = await apply(db, MOVES.withdraw, ack)
    assert applied.lost and applied.ids == (delivered,)  # the settled ack stays ACKED
    after = await fetch(db, delivered)
    assert (after["ack_status"], after["actor"], after["responded_at"]) == (
        AckStatus.WITHDRAWN,
        "op",
        NOW,
    )
    assert after["followup_at"] == NOW  # a step between retries is closed at once
    assert (await fetch(db, settled))["ack_status"] == AckStatus.ACKED


async def test_followers_move_only_while_they_follow_the_named_owner(db: Database) -> None:
    leader, other = await insert(db, row(), row())
    a, b, c, gone = await insert(
        db,
        *(row(dedup_owner_id=leader) for _ in range(3)),
        row(dedup_owner_id=leader, status=Status.WITHDRAWN.value),
    )
    satisfied = await apply(
        db, MOVES.satisfy_followers, moves.SatisfyFollowers(leader, (a, gone), NOW)
    )
    assert satisfied == moves.Applied(2, 1, (a,))
    assert (await fetch(db, a))["status"] == Status.DEDUPLICATED
    assert (await fetch(db, gone))["status"] == Status.WITHDRAWN

    assert (await apply(db, MOVES.promote, moves.Promote(b, other, NOW))).lost  # not its owner
    assert not (await apply(db, MOVES.promote, moves.Promote(b, leader, NOW))).lost
    promoted = await fetch(db, b)
    assert (promoted["dedup_owner_id"], promoted["next_attempt"]) == (None, NOW)

    relinked = await apply(db, MOVES.relink, moves.Relink((c, a), leader, b, NOW))
    assert relinked.ids == (c,)  # the satisfied one is no longer a pending follower
    assert (await fetch(db, c))["dedup_owner_id"] == b

    assert not (await apply(db, MOVES.record_successor, moves.RecordSuccessor(leader, b))).lost
    assert (await fetch(db, leader))["dedup_successor_id"] == b


async def test_window_moves_keep_a_window_a_newer_leader_took(db: Database) -> None:
    async with db.write() as tx:
        await tx.conn.execute(
            dedup_table.insert().values(key="k", owner_id="old", generation=1, until=NOW)
        )
    extend = moves.ExtendWindow("k", "old", LATER)
    assert not (await apply(db, MOVES.extend_window, extend)).lost
    assert (await apply(db, MOVES.move_window, moves.MoveWindow("k", "x", "new"))).lost
    assert not (await apply(db, MOVES.move_window, moves.MoveWindow("k", "old", "new"))).lost
    assert (await apply(db, MOVES.extend_window, extend)).lost  # "new" keeps it
    async with db.read() as conn:
        window = (await conn.execute(dedup_table.select())).mappings().one()
    assert (window["owner_id"], window["until"]) == ("new", LATER)

"""``domain.withdrawal``: who may withdraw what, table-driven, plus properties."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from uns_server.domain.enums import ACK_OWED, AckStatus, Status
from uns_server.domain.errors import NotWithdrawable
from uns_server.domain.withdrawal import (
    Repeat,
    Scope,
    Withdraw,
    WithdrawalRow,
    decide_withdrawal,
    followers_withdrawn,
    rows_withdrawn,
)

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
LATER = NOW + timedelta(hours=1)
EARLIER = NOW - timedelta(seconds=1)


def target(
    status: Status,
    ack: AckStatus | None = None,
    *,
    dead_letter: bool = False,
    deadline: datetime | None = None,
    owner: str | None = None,
    withdrawn_by: str | None = None,
) -> WithdrawalRow:
    return WithdrawalRow("n1", status, ack, dead_letter, deadline, owner, withdrawn_by)


W = "WITHDRAW"
NW = "NOT_WITHDRAWABLE"
REPEAT = "REPEAT"

CASES = [
    ("pending leader", target(Status.PENDING), W, Scope.NOTIFICATION),
    ("pending follower", target(Status.PENDING, owner="lead"), W, Scope.NOTIFICATION),
    ("dead letter", target(Status.FAILED, dead_letter=True), W, Scope.NOTIFICATION),
    ("failed, resolved", target(Status.FAILED), NW, None),
    ("delivered, no ack", target(Status.DELIVERED), NW, None),
    ("ack pending", target(Status.DELIVERED, AckStatus.PENDING, deadline=LATER), W, Scope.ACK),
    ("snoozed", target(Status.DELIVERED, AckStatus.SNOOZED, deadline=LATER), W, Scope.ACK),
    ("ack past deadline", target(Status.DELIVERED, AckStatus.PENDING, deadline=NOW), NW, None),
    ("acked", target(Status.DELIVERED, AckStatus.ACKED, deadline=LATER), NW, None),
    ("dismissed", target(Status.DELIVERED, AckStatus.DISMISSED, deadline=LATER), NW, None),
    ("timed out", target(Status.DELIVERED, AckStatus.TIMED_OUT, deadline=EARLIER), NW, None),
    ("deduplicated", target(Status.DEDUPLICATED, owner="lead"), NW, None),
    ("withdrawn by me", target(Status.WITHDRAWN, withdrawn_by="alice"), REPEAT, None),
    ("withdrawn by other", target(Status.WITHDRAWN, withdrawn_by="oscar"), NW, None),
    (
        "ack withdrawn by me",
        target(Status.DELIVERED, AckStatus.WITHDRAWN, withdrawn_by="alice"),
        REPEAT,
        None,
    ),
]


@pytest.mark.parametrize(("name", "row", "want", "scope"), CASES, ids=[c[0] for c in CASES])
def test_decision_table(name: str, row: WithdrawalRow, want: str, scope: Scope | None) -> None:
    if want == NW:
        with pytest.raises(NotWithdrawable) as exc:
            decide_withdrawal(row, caller="alice", pending_followers=(), now=NOW)
        assert exc.value.metadata["notification_id"] == "n1"
        return
    decision = decide_withdrawal(row, caller="alice", pending_followers=(), now=NOW)
    if want == REPEAT:
        assert isinstance(decision, Repeat)
    else:
        assert isinstance(decision, Withdraw) and decision.scope == scope


def test_a_deduplicated_follower_names_its_leader() -> None:
    with pytest.raises(NotWithdrawable) as exc:
        decide_withdrawal(
            target(Status.DEDUPLICATED, owner="lead"), caller="a", pending_followers=(), now=NOW
        )
    assert exc.value.metadata["dedup_owner_id"] == "lead"


def test_a_pending_leader_takes_its_pending_followers_along() -> None:
    decision = decide_withdrawal(
        target(Status.PENDING), caller="a", pending_followers=("f1", "f2"), now=NOW
    )
    assert decision == Withdraw(Scope.NOTIFICATION, ("f1", "f2"))


@given(
    status=st.sampled_from(list(Status)),
    ack=st.sampled_from([None, *AckStatus]),
    dead_letter=st.booleans(),
    deadline_offset=st.integers(-3600, 3600),
    caller=st.sampled_from(["alice", "oscar"]),
)
def test_withdrawal_never_reopens_and_always_fences(
    status: Status, ack: AckStatus | None, dead_letter: bool, deadline_offset: int, caller: str
) -> None:
    row = target(
        status,
        ack,
        dead_letter=dead_letter,
        deadline=NOW + timedelta(seconds=deadline_offset),
        withdrawn_by="alice" if Status.WITHDRAWN in (status, ack) else None,
    )
    try:
        decision = decide_withdrawal(row, caller=caller, pending_followers=(), now=NOW)
    except NotWithdrawable:
        return
    if isinstance(decision, Repeat):
        assert row.withdrawn_by == caller
        return
    move = rows_withdrawn(row, decision, actor=caller, reason="r", now=NOW)
    assert move.notification_ids == (row.id,) and move.scope == decision.scope
    assert (move.actor, move.reason, move.at) == (caller, "r", NOW)
    # The store applies it only to a row still in the state it was decided from.
    if decision.scope == Scope.ACK:
        assert status == Status.DELIVERED and ack in ACK_OWED
        assert move.expected_status == Status.DELIVERED
        assert move.ack_status == AckStatus.WITHDRAWN
    else:
        assert status == Status.PENDING or (status == Status.FAILED and dead_letter)
        assert move.expected_status == status and move.ack_status is None
    followers = followers_withdrawn(decision, actor=caller, reason="r", now=NOW)
    assert followers.notification_ids == decision.followers
    assert (followers.scope, followers.expected_status) == (Scope.NOTIFICATION, Status.PENDING)

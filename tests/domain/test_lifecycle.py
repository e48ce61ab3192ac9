"""The claim and hand-off rules of ``uns_server.domain.lifecycle``, table-driven."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from uns_server.domain import moves
from uns_server.domain.enums import DeliveryMode, Status
from uns_server.domain.errors import NotDeadLettered, ReplayBlocked
from uns_server.domain.lifecycle import (
    DedupOwner,
    Follower,
    HandOff,
    SettleExhausted,
    StartAttempt,
    check_dead_lettered,
    check_replay_unblocked,
    coalesces,
    decide_claim,
    decide_hand_off,
    interrupted_outcome,
)

NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
G, B = DeliveryMode.GUARANTEED.value, DeliveryMode.BEST_EFFORT.value


@pytest.mark.parametrize(
    ("attempts", "cycle_attempts", "max_attempts", "recovered", "mode", "expected"),
    [
        # a fresh claim starts the next attempt
        (0, 0, 1, False, G, StartAttempt(1, 1, False)),
        (4, 1, 3, False, G, StartAttempt(5, 2, False)),
        # a recovered one too, while attempts are left; its effect is flagged unknown
        (1, 1, 3, True, G, StartAttempt(2, 2, True)),
        (6, 2, 3, True, B, StartAttempt(7, 3, True)),
        # the interrupted attempt was the last: settle, do not attempt again
        (1, 1, 1, True, G, SettleExhausted(1, 1, True, Status.FAILED, True)),
        (1, 1, 1, True, B, SettleExhausted(1, 1, True, Status.FAILED, False)),
        (7, 3, 3, True, G, SettleExhausted(7, 3, True, Status.FAILED, True)),
        # a lowered max_attempts never means more attempts
        (5, 5, 3, True, B, SettleExhausted(5, 5, True, Status.FAILED, False)),
        (2, 2, 2, False, G, SettleExhausted(2, 2, False, Status.FAILED, True)),
    ],
)
def test_decide_claim(
    attempts: int,
    cycle_attempts: int,
    max_attempts: int,
    recovered: bool,
    mode: str,
    expected: StartAttempt | SettleExhausted,
) -> None:
    decision = decide_claim(
        attempts=attempts,
        cycle_attempts=cycle_attempts,
        max_attempts=max_attempts,
        recovered=recovered,
        delivery_mode=mode,
    )
    assert decision == expected
    if isinstance(decision, StartAttempt):
        assert decision.cycle_attempt <= max_attempts  # never beyond the budget


def test_interrupted_outcome_keeps_earlier_successes_and_names_the_attempt() -> None:
    outcome = interrupted_outcome(attempt=3, cycle=2, succeeded=["slack"], unconfirmed=["hook"])
    assert outcome["channels_succeeded"] == ["slack"]
    assert outcome["channels_attempted"] == outcome["channels_failed"] == ["hook"]
    assert "attempt 3 was interrupted" in str(outcome["error_message"])
    assert "cycle 2" in str(outcome["error_message"])


def owner(
    status: Status, generation: int = 2, until: datetime = NOW + timedelta(minutes=5)
) -> DedupOwner:
    return DedupOwner("newer", status, generation, until)


FOLLOWERS = [Follower("f1", 1), Follower("f2", 1), Follower("f3", 1)]


@pytest.mark.parametrize(
    ("followers", "window_owner", "expected"),
    [
        # the first pending follower is promoted, the rest relinked to it
        (FOLLOWERS, None, HandOff("f1", 1, True, ("f2", "f3"))),
        (FOLLOWERS[:1], None, HandOff("f1", 1, True, ())),
        # followers come first even when a newer owner exists
        (FOLLOWERS[:1], owner(Status.PENDING), HandOff("f1", 1, True, ())),
        # no follower: a newer owner that still coalesces takes the obligation
        ([], owner(Status.PENDING), HandOff("newer", 2, False)),
        ([], owner(Status.PENDING, until=NOW - timedelta(hours=1)), HandOff("newer", 2, False)),
        ([], owner(Status.DELIVERED), HandOff("newer", 2, False)),
        # ... but not one that would not coalesce a send now
        ([], owner(Status.DELIVERED, until=NOW), None),
        ([], owner(Status.FAILED), None),
        # ... nor the leader itself, nor an owner of an older or the same generation
        ([], DedupOwner("leader", Status.PENDING, 1, NOW), None),
        ([], owner(Status.PENDING, generation=1), None),
        ([], owner(Status.PENDING, generation=0), None),
        # no dedup window at all
        ([], None, None),
    ],
)
def test_decide_hand_off(
    followers: list[Follower], window_owner: DedupOwner | None, expected: HandOff | None
) -> None:
    decision = decide_hand_off(
        leader_id="leader",
        leader_generation=1,
        pending_followers=followers,
        window_owner=window_owner,
        now=NOW,
    )
    assert decision == expected


@pytest.mark.parametrize(
    ("status", "until", "expected"),
    [
        (Status.PENDING, NOW - timedelta(days=1), True),  # pending ownership survives expiry
        (Status.DELIVERED, NOW + timedelta(seconds=1), True),
        (Status.DELIVERED, NOW, False),
        (Status.FAILED, NOW + timedelta(days=1), False),
        (Status.DEDUPLICATED, NOW + timedelta(days=1), False),
    ],
)
def test_coalesces(status: Status, until: datetime, expected: bool) -> None:
    assert coalesces(status, until, NOW) is expected


@pytest.mark.parametrize(
    ("status", "dead_letter", "refused"),
    [
        (Status.FAILED, True, False),
        (Status.FAILED, False, True),  # resolved already, or BEST_EFFORT
        (Status.PENDING, False, True),
        (Status.DELIVERED, False, True),
        (Status.DEDUPLICATED, False, True),
    ],
)
def test_only_dead_letters_leave_the_queue(
    status: Status, dead_letter: bool, refused: bool
) -> None:
    if not refused:
        check_dead_lettered("n", status, dead_letter)
        return
    with pytest.raises(NotDeadLettered) as exc:
        check_dead_lettered("n", status, dead_letter)
    assert exc.value.metadata == {
        "notification_id": "n",
        "state": status.value,
        "dead_letter": str(dead_letter).lower(),
    }


@pytest.mark.parametrize(
    ("successor_id", "successor_status", "blocked"),
    [
        (None, None, False),
        ("s", None, False),  # the successor is gone (retention)
        ("s", Status.FAILED, False),  # it failed too: replaying is the way on
        ("s", Status.PENDING, True),
        ("s", Status.DELIVERED, True),
        ("s", Status.DEDUPLICATED, True),
    ],
)
def test_replay_is_blocked_while_a_successor_carries_the_obligation(
    successor_id: str | None, successor_status: Status | None, blocked: bool
) -> None:
    if not blocked:
        check_replay_unblocked("n", successor_id, successor_status)
        return
    with pytest.raises(ReplayBlocked) as exc:
        check_replay_unblocked("n", successor_id, successor_status)
    assert exc.value.metadata["dedup_successor_id"] == "s"


def test_replay_opens_the_next_cycle_afresh_and_resolve_only_clears_the_flag() -> None:
    replay = moves.DeadLetterReplay("n", from_cycle=2, at=NOW)
    assert replay.cycle == 3
    resolve = moves.ResolveFailure("n", NOW)
    assert (resolve.notification_id, resolve.at) == ("n", NOW)

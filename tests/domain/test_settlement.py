"""The settle decision of ``uns_server.domain.lifecycle.decide_settlement``, table-driven."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from uns_server.domain import moves
from uns_server.domain.enums import AckStatus, DeliveryMode, Status
from uns_server.domain.lifecycle import (
    RETRY_AFTER_CAP_SECONDS,
    ChannelAnswer,
    Settlement,
    Settling,
    decide_settlement,
)
from uns_server.domain.schedule import QuietHours
from uns_server.store import leased_moves

NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
G, B = DeliveryMode.GUARANTEED.value, DeliveryMode.BEST_EFFORT.value
ROW = Settling(
    channels=("slack", "email"),
    succeeded_before=(),
    cycle_attempt=1,
    max_attempts=3,
    delivery_mode=G,
    require_ack=False,
    ack_timeout_minutes=30,
)
OK = ChannelAnswer("slack", True)
OK_EMAIL = ChannelAnswer("email", True)
TRANSIENT = ChannelAnswer("email", False, True, "503")
PERMANENT = ChannelAnswer("email", False, False, "550 no such user")


def _columns(s: Settlement) -> dict[str, object]:
    """The columns the store writes for this settlement (``store.leased_moves``)."""
    return leased_moves.columns(moves.SettleAttempt("n", "t", s, 1, 1), NOW)


def _outcome(
    attempted: list[str], succeeded: list[str], failed: list[str], error: str | None
) -> dict[str, object]:
    return {
        "channels_attempted": attempted,
        "channels_succeeded": succeeded,
        "channels_failed": failed,
        "error_message": error,
    }


@pytest.mark.parametrize(
    ("row", "answers", "status", "dead_letter"),
    [
        # every channel accepted, now or earlier in the cycle
        (ROW, [OK, OK_EMAIL], Status.DELIVERED, False),
        (replace(ROW, succeeded_before=("email",)), [OK], Status.DELIVERED, False),
        # a transient failure with attempts left: retry
        (ROW, [OK, TRANSIENT], Status.PENDING, False),
        (replace(ROW, cycle_attempt=2), [TRANSIENT], Status.PENDING, False),
        # ... on the cycle's last attempt: failed, dead-lettered when GUARANTEED
        (replace(ROW, cycle_attempt=3), [OK, TRANSIENT], Status.FAILED, True),
        (replace(ROW, cycle_attempt=3, delivery_mode=B), [TRANSIENT], Status.FAILED, False),
        # a lowered max_attempts never means more attempts
        (replace(ROW, cycle_attempt=4), [TRANSIENT], Status.FAILED, True),
        # a permanent rejection fails at once, whatever is left
        (ROW, [OK, PERMANENT], Status.FAILED, True),
        (replace(ROW, delivery_mode=B), [PERMANENT], Status.FAILED, False),
    ],
)
def test_decide_settlement_outcomes(
    row: Settling, answers: list[ChannelAnswer], status: Status, dead_letter: bool
) -> None:
    s = decide_settlement(row, answers, NOW, rand=lambda: 0.0)
    assert (s.status, s.dead_letter) == (status, dead_letter)
    assert (s.delivered_at is not None) == (status == Status.DELIVERED)
    assert (s.next_attempt is not None) == (status == Status.PENDING)
    assert s.ack_status is None and s.deadline is None


def test_outcome_lists_this_attempt_and_keeps_earlier_successes() -> None:
    row = replace(ROW, channels=("slack", "email", "sms"), succeeded_before=("sms",))
    s = decide_settlement(row, [OK, TRANSIENT], NOW, rand=lambda: 0.0)
    assert s.outcome == _outcome(["slack", "email"], ["sms", "slack"], ["email"], "email: 503")
    both = [ChannelAnswer("slack", False, True, "429"), TRANSIENT]
    s = decide_settlement(row, both, NOW, rand=lambda: 0.0)
    assert s.outcome["error_message"] == "slack: 429; email: 503"


def test_delivered_with_require_ack_opens_the_ack() -> None:
    s = decide_settlement(replace(ROW, require_ack=True), [OK, OK_EMAIL], NOW, rand=lambda: 0.0)
    assert s == Settlement(
        Status.DELIVERED,
        False,
        _outcome(["slack", "email"], ["slack", "email"], [], None),
        delivered_at=NOW,
        ack_status=AckStatus.PENDING,
        deadline=NOW + timedelta(minutes=30),
    )
    assert _columns(s) == {  # the lease is the delivery job's (released with it)
        "updated_at": NOW,
        "attempts": 1,
        "cycle_attempts": 1,
        "outcome": s.outcome,
        "status": "DELIVERED",
        "delivered_at": NOW,
        "ack_status": "PENDING",
        "deadline": NOW + timedelta(minutes=30),
    }


@pytest.mark.parametrize(
    ("cycle_attempt", "rand", "retry_after", "due_in"),
    [
        (1, 0.0, None, 0.5),  # equal jitter: half of base 1s
        (1, 1.0, None, 1.0),
        (3, 0.0, None, 2.0),  # half of 4s
        (1, 0.0, 30.0, 30.0),  # Retry-After is a floor
        (1, 0.0, 1e9, RETRY_AFTER_CAP_SECONDS),  # ... capped
    ],
)
def test_retry_is_due_after_the_backoff(
    cycle_attempt: int, rand: float, retry_after: float | None, due_in: float
) -> None:
    answer = replace(TRANSIENT, retry_after_seconds=retry_after)
    row = replace(ROW, cycle_attempt=cycle_attempt, max_attempts=10)
    s = decide_settlement(row, [OK, answer], NOW, rand=lambda: rand)
    assert s.next_attempt == NOW + timedelta(seconds=due_in)
    values = _columns(s)
    assert values["status"] == "PENDING" and values["next_attempt"] == s.next_attempt
    assert "dead_letter" not in values and "delivered_at" not in values


@pytest.mark.parametrize(("intent", "held"), [("INFORMATIONAL", True), ("SAFETY", False)])
def test_quiet_hours_hold_a_retry_unless_exempt(intent: str, held: bool) -> None:
    quiet, problems = QuietHours.parse("UTC", "08:00", "18:00", "q")
    assert not problems
    row = replace(ROW, quiet_hours=quiet, intent=intent)
    s = decide_settlement(row, [OK, TRANSIENT], NOW, rand=lambda: 0.0)
    expected = datetime(2026, 12, 2, 18, 0, tzinfo=UTC) if held else NOW + timedelta(seconds=0.5)
    assert s.next_attempt == expected


def test_failed_values_and_result_payload() -> None:
    s = decide_settlement(ROW, [PERMANENT], NOW, rand=lambda: 0.0)
    values = _columns(s)
    assert values["status"] == "FAILED" and values["dead_letter"] is True
    assert "next_attempt" not in values and "delivered_at" not in values
    base: dict[str, object] = {"attempt": 4, "cycle": 2, "cycle_attempt": 1}
    assert s.result_payload(base) == {
        **base,
        "status": "FAILED",
        "dead_letter": True,
        "outcome": s.outcome,
    }


HELD_UNTIL = NOW + timedelta(hours=7)


def test_a_held_persons_message_keeps_the_row_pending_and_gives_the_attempt_back() -> None:
    row = replace(ROW, held={"mail@alice": HELD_UNTIL, "mail@bob": HELD_UNTIL + timedelta(1)})
    s = decide_settlement(row, [OK, OK_EMAIL], NOW, rand=lambda: 0.5)
    assert (s.status, s.next_attempt, s.gives_back_attempt) == (Status.PENDING, HELD_UNTIL, True)
    move = moves.SettleAttempt("n", "t", s, attempts=1, cycle_attempts=0)
    assert leased_moves.columns(move, NOW)["cycle_attempts"] == 0
    # Nothing else to send at all (every message held): the same.
    only_held = replace(row, channels=())
    assert decide_settlement(only_held, [], NOW, rand=lambda: 0.5) == Settlement(
        Status.PENDING,
        False,
        _outcome([], [], [], None),
        next_attempt=HELD_UNTIL,
        gives_back_attempt=True,
    )


def test_a_hold_beside_a_failure_counts_the_attempt() -> None:
    row = replace(ROW, held={"mail@alice": HELD_UNTIL})
    s = decide_settlement(row, [OK, TRANSIENT], NOW, rand=lambda: 0.5)
    assert s.status == Status.PENDING and not s.gives_back_attempt
    assert s.next_attempt is not None and s.next_attempt < HELD_UNTIL  # the backoff first
    failed = decide_settlement(row, [OK, PERMANENT], NOW, rand=lambda: 0.5)
    assert failed.status == Status.FAILED

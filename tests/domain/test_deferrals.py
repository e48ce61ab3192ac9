"""Deferrals in ``lifecycle.decide_settlement`` (issue 41 item 2): a provider's 429
(throttled) or this process's full bulkhead (busy) defers the work without spending
an attempt, within the cycle's bound; past it a throttle spends one."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from uns_server.domain import moves
from uns_server.domain.enums import DeliveryMode, Status
from uns_server.domain.lifecycle import (
    BUSY_RETRY_SECONDS,
    RETRY_AFTER_CAP_SECONDS,
    ChannelAnswer,
    Settling,
    decide_settlement,
)
from uns_server.domain.outcomes import DeliveryOutcome
from uns_server.domain.schedule import QuietHours
from uns_server.store import leased_moves

NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
ROW = Settling(
    channels=("hook",),
    succeeded_before=(),
    cycle_attempt=1,
    max_attempts=3,
    delivery_mode=DeliveryMode.GUARANTEED.value,
    require_ack=False,
    ack_timeout_minutes=30,
    max_throttle_deferrals=2,
)
THROTTLED = ChannelAnswer("hook", False, True, "HTTP 429", 30.0, throttled=True)
BUSY = ChannelAnswer("hook", False, True, "not sent: bulkhead full", busy=True)
FAILED_503 = ChannelAnswer("other", False, True, "HTTP 503", 5.0)


def _decide(row: Settling, *answers: ChannelAnswer) -> tuple[Status, bool, datetime | None]:
    s = decide_settlement(row, answers, NOW, rand=lambda: 0.0)
    return s.status, s.gives_back_attempt, s.next_attempt


def test_a_throttle_defers_without_spending_the_attempt_until_retry_after() -> None:
    s = decide_settlement(ROW, [THROTTLED], NOW, rand=lambda: 0.0)
    assert (s.status, s.gives_back_attempt) == (Status.PENDING, True)
    assert s.next_attempt == NOW + timedelta(seconds=30)
    assert s.outcome["throttle_deferrals"] == 1
    assert s.outcome["channels_deferred"] == ["hook"]
    assert s.outcome["channels_failed"] == []
    assert s.outcome["error_message"] == "hook: HTTP 429"
    # Stored: the cycle's counter back to what it was before the claim.
    move = moves.SettleAttempt("n", "t", s, attempts=1, cycle_attempts=0)
    values = leased_moves.columns(move, NOW)
    assert (values["attempts"], values["cycle_attempts"]) == (1, 0)  # made, not spent
    # ... and read back, the count carries to the next attempt of the cycle.
    assert DeliveryOutcome.from_json(s.outcome).throttle_deferrals == 1


def test_a_throttle_on_the_last_attempt_still_defers() -> None:
    last = replace(ROW, cycle_attempt=3)
    assert _decide(last, THROTTLED)[:2] == (Status.PENDING, True)


@pytest.mark.parametrize(
    ("row", "status", "dead_letter"),
    [
        # the bound reached: the throttle spends the attempt, retried with Retry-After
        (replace(ROW, throttle_deferrals=2), Status.PENDING, False),
        # ... and on the cycle's last attempt ends as the policy says
        (replace(ROW, throttle_deferrals=2, cycle_attempt=3), Status.FAILED, True),
        (
            replace(
                ROW,
                throttle_deferrals=2,
                cycle_attempt=3,
                delivery_mode=DeliveryMode.BEST_EFFORT.value,
            ),
            Status.FAILED,
            False,
        ),
        # a bound of 0: every throttle is a failure
        (replace(ROW, max_throttle_deferrals=0, cycle_attempt=3), Status.FAILED, True),
    ],
)
def test_past_the_bound_a_throttle_spends_an_attempt(
    row: Settling, status: Status, dead_letter: bool
) -> None:
    s = decide_settlement(row, [THROTTLED], NOW, rand=lambda: 0.0)
    assert (s.status, s.dead_letter, s.gives_back_attempt) == (status, dead_letter, False)
    assert "channels_deferred" not in s.outcome
    assert s.outcome.get("throttle_deferrals", 0) == row.throttle_deferrals
    if status == Status.PENDING:
        assert s.next_attempt == NOW + timedelta(seconds=30)  # Retry-After, a floor


def test_a_busy_channel_defers_and_is_never_counted() -> None:
    s = decide_settlement(replace(ROW, cycle_attempt=3), [BUSY], NOW, rand=lambda: 0.0)
    assert (s.status, s.gives_back_attempt) == (Status.PENDING, True)
    assert s.next_attempt == NOW + timedelta(seconds=BUSY_RETRY_SECONDS)
    assert "throttle_deferrals" not in s.outcome
    assert s.outcome["channels_attempted"] == []  # not called
    # however many times: a busy channel is not a failure and not a throttle
    spent = replace(ROW, throttle_deferrals=2, cycle_attempt=3)
    assert _decide(spent, BUSY)[:2] == (Status.PENDING, True)


def test_a_wait_beside_a_real_failure_spends_the_attempt() -> None:
    row = replace(ROW, channels=("hook", "other"))
    s = decide_settlement(row, [THROTTLED, FAILED_503], NOW, rand=lambda: 0.0)
    assert (s.status, s.gives_back_attempt) == (Status.PENDING, False)
    assert s.next_attempt == NOW + timedelta(seconds=30)  # the longest wait asked
    assert "throttle_deferrals" not in s.outcome  # no deferral was made
    last = replace(row, cycle_attempt=3)
    assert _decide(last, BUSY, FAILED_503)[0] == Status.FAILED


def test_a_wait_beside_a_success_keeps_the_success_and_defers_the_rest() -> None:
    row = replace(ROW, channels=("hook", "other"))
    ok = ChannelAnswer("other", True)
    s = decide_settlement(row, [THROTTLED, ok], NOW, rand=lambda: 0.0)
    assert (s.status, s.gives_back_attempt) == (Status.PENDING, True)
    assert s.outcome["channels_succeeded"] == ["other"]


@pytest.mark.parametrize(
    ("retry_after", "deferrals_before", "due_in"),
    [
        (None, 0, 0.5),  # no Retry-After: the backoff of deferral 1 (half of 1 s)
        (None, 1, 1.0),  # deferral 2: half of 2 s
        (0.0, 0, 0.0),  # Retry-After 0: at once
        (1e9, 0, RETRY_AFTER_CAP_SECONDS),  # a bogus Retry-After is capped
    ],
)
def test_how_long_a_throttle_defers(
    retry_after: float | None, deferrals_before: int, due_in: float
) -> None:
    answer = replace(THROTTLED, retry_after_seconds=retry_after)
    row = replace(ROW, throttle_deferrals=deferrals_before)
    s = decide_settlement(row, [answer], NOW, rand=lambda: 0.0)
    assert s.next_attempt == NOW + timedelta(seconds=due_in)
    assert s.outcome["throttle_deferrals"] == deferrals_before + 1


def test_quiet_hours_hold_a_deferral() -> None:
    quiet, problems = QuietHours.parse("UTC", "08:00", "18:00", "q")
    assert not problems
    row = replace(ROW, quiet_hours=quiet, intent="INFORMATIONAL")
    assert _decide(row, THROTTLED)[2] == datetime(2026, 12, 2, 18, 0, tzinfo=UTC)


def test_the_count_survives_a_later_settlement_of_the_cycle() -> None:
    s = decide_settlement(replace(ROW, throttle_deferrals=1), [FAILED_503], NOW, rand=lambda: 0.0)
    assert s.outcome["throttle_deferrals"] == 1

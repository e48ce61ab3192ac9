"""The message-update lifecycle rules (``domain.message_updates``), table-driven."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from uns_server.domain.message_updates import (
    MAX_ATTEMPTS,
    Done,
    GiveUp,
    RetryAt,
    Settle,
    decide_settle,
)

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
SECOND = timedelta(seconds=1)


def _decide(
    *, success: bool = False, retryable: bool = True, attempts: int = 1, retry_after: float = 0.0
) -> Settle:
    return decide_settle(
        success=success,
        retryable=retryable,
        error=None if success else "boom",
        retry_after_seconds=retry_after,
        attempts=attempts,
        now=NOW,
        rand=lambda: 0.0,
    )


@pytest.mark.parametrize(
    ("success", "retryable", "attempts", "expected"),
    [
        (True, False, 1, Done()),
        (True, False, MAX_ATTEMPTS, Done()),  # the last attempt may still succeed
        (False, True, 1, RetryAt(NOW + SECOND / 2, "boom")),  # backoff of attempt 1
        (False, True, MAX_ATTEMPTS - 1, RetryAt(NOW + timedelta(seconds=128), "boom")),
        (False, True, MAX_ATTEMPTS, GiveUp("boom")),  # attempts used up
        (False, False, 1, GiveUp("boom")),  # permanent: no retry
    ],
)
def test_decide_settle(success: bool, retryable: bool, attempts: int, expected: Settle) -> None:
    assert _decide(success=success, retryable=retryable, attempts=attempts) == expected


def test_a_providers_retry_after_is_a_floor() -> None:
    decision = _decide(retry_after=60.0)
    assert isinstance(decision, RetryAt) and decision.at == NOW + 60 * SECOND

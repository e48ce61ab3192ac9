"""Retry schedule: exact values with a fixed random source, bounds, monotonicity."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from uns_server.domain.retry import backoff_seconds, next_attempt_at

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.mark.parametrize(
    ("attempt", "r", "seconds"),
    [
        (1, 0.0, 0.5),
        (1, 1.0, 1.0),
        (2, 0.0, 1.0),
        (2, 0.5, 1.5),
        (3, 1.0, 4.0),
        (9, 0.0, 128.0),
        (10, 0.0, 150.0),  # 512 capped to 300
        (10, 1.0, 300.0),
        (1000, 0.25, 187.5),  # far beyond the cap, no overflow
    ],
)
def test_schedule_with_a_fixed_rand(attempt: int, r: float, seconds: float) -> None:
    assert next_attempt_at(NOW, attempt, rand=lambda: r) == NOW + timedelta(seconds=seconds)


def test_base_and_cap_are_configurable() -> None:
    assert backoff_seconds(3, base_seconds=2.0, cap_seconds=5.0, rand=lambda: 0.0) == 2.5
    assert backoff_seconds(2, base_seconds=2.0, cap_seconds=5.0, rand=lambda: 1.0) == 4.0


@pytest.mark.parametrize("r", [0.0, 0.3, 0.999, 1.0])
def test_delays_grow_monotonically_within_bounds(r: float) -> None:
    delays = [backoff_seconds(n, rand=lambda: r) for n in range(1, 40)]
    assert delays == sorted(delays)
    for n, delay in enumerate(delays, start=1):
        ceiling = min(300.0, 2.0 ** (n - 1))
        assert ceiling / 2 <= delay <= ceiling
    assert delays[-1] == 150.0 + r * 150.0


@given(
    attempt=st.integers(min_value=1, max_value=10_000),
    r=st.floats(min_value=0.0, max_value=1.0),
)
def test_never_immediate_never_beyond_the_cap(attempt: int, r: float) -> None:
    delay = backoff_seconds(attempt, rand=lambda: r)
    assert 0.5 <= delay <= 300.0


@pytest.mark.parametrize(
    ("retry_after", "seconds"),
    [
        (None, 2.0),
        (0.0, 2.0),
        (-5.0, 2.0),
        (1.0, 2.0),  # backoff already later
        (30.0, 30.0),  # never earlier than the provider asked
        (3600.0, 3600.0),  # even beyond the cap
    ],
)
def test_retry_after_is_a_floor(retry_after: float | None, seconds: float) -> None:
    at = next_attempt_at(NOW, 3, rand=lambda: 0.0, retry_after_seconds=retry_after)
    assert at == NOW + timedelta(seconds=seconds)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"cycle_attempt": 0},
        {"cycle_attempt": -1},
        {"base_seconds": 0.0},
        {"base_seconds": 10.0, "cap_seconds": 5.0},
        {"rand": lambda: 1.5},
        {"rand": lambda: -0.1},
    ],
)
def test_rejects_invalid_input(kwargs: dict[str, object]) -> None:
    args: dict[str, object] = {"cycle_attempt": 1, "rand": lambda: 0.5} | kwargs
    with pytest.raises(ValueError):
        backoff_seconds(**args)  # type: ignore[arg-type]

"""Pure timing rules of the obligation over time (``domain.schedule``): table-driven
cases and Hypothesis properties, across DST changes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from uns_server.domain import schedule

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
PARIS = ZoneInfo("Europe/Paris")
NEW_YORK = ZoneInfo("America/New_York")


def local(zone: ZoneInfo, *args: int, fold: int = 0) -> datetime:
    return datetime(*args, tzinfo=zone, fold=fold).astimezone(UTC)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("schedule_time", "expected"),
    [
        (None, NOW),
        (NOW - timedelta(days=1), NOW),
        (NOW + timedelta(hours=3), NOW + timedelta(hours=3)),
        (NOW + timedelta(days=90), NOW + timedelta(days=90)),
    ],
)
def test_first_attempt_at(schedule_time: datetime | None, expected: datetime) -> None:
    assert schedule.first_attempt_at(NOW, schedule_time) == expected


@pytest.mark.parametrize(
    ("ahead", "refused"),
    [
        (timedelta(days=-400), False),
        (timedelta(days=90), False),
        (timedelta(days=90, seconds=1), True),
    ],
)
def test_schedule_at_most_90_days_ahead(ahead: timedelta, refused: bool) -> None:
    violations = schedule.schedule_violations(NOW + ahead, NOW)
    assert [v.field for v in violations] == (["schedule_time"] if refused else [])

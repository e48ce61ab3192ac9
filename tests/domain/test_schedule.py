"""Pure timing rules of the obligation over time (``domain.schedule``): table-driven
cases and Hypothesis properties, across DST changes."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from uns_server.domain import schedule
from uns_server.domain.schedule import QuietHours

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


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


def quiet(zone: str, start: str, end: str) -> QuietHours:
    q, problems = QuietHours.parse(zone, start, end, "spec.quiet_hours")
    assert q is not None, problems
    return q


NIGHT_PARIS = quiet("Europe/Paris", "22:00", "07:00")
NIGHT_NY = quiet("America/New_York", "22:00", "07:00")

# (name, quiet hours, instant, intent, expected instant) — instants in UTC.
QUIET_CASES = [
    ("daytime passes", NIGHT_PARIS, datetime(2026, 6, 1, 10, tzinfo=UTC), "WARNING", None),
    (
        "evening held to the morning (CEST)",
        NIGHT_PARIS,
        datetime(2026, 6, 1, 21, tzinfo=UTC),  # 23:00 CEST
        "WARNING",
        datetime(2026, 6, 2, 5, tzinfo=UTC),  # 07:00 CEST
    ),
    (
        "after midnight held to the same morning",
        NIGHT_PARIS,
        datetime(2026, 1, 10, 2, tzinfo=UTC),  # 03:00 CET
        "INFORMATIONAL",
        datetime(2026, 1, 10, 6, tzinfo=UTC),  # 07:00 CET
    ),
    (
        "start is inclusive",
        NIGHT_PARIS,
        datetime(2026, 1, 10, 21, tzinfo=UTC),  # 22:00 CET
        "WARNING",
        datetime(2026, 1, 11, 6, tzinfo=UTC),
    ),
    ("end is exclusive", NIGHT_PARIS, datetime(2026, 1, 10, 6, tzinfo=UTC), "WARNING", None),
    (
        "spring forward night is an hour shorter (EU)",
        NIGHT_PARIS,
        datetime(2026, 3, 28, 22, tzinfo=UTC),  # 23:00 CET, Sat
        "ACTION_REQUIRED",
        datetime(2026, 3, 29, 5, tzinfo=UTC),  # 07:00 CEST, Sun
    ),
    (
        "fall back night is an hour longer (EU)",
        NIGHT_PARIS,
        datetime(2026, 10, 24, 23, tzinfo=UTC),  # 01:00 CEST, Sun
        "ACTION_REQUIRED",
        datetime(2026, 10, 25, 6, tzinfo=UTC),  # 07:00 CET
    ),
    (
        "spring forward (US)",
        NIGHT_NY,
        datetime(2026, 3, 8, 6, 30, tzinfo=UTC),  # 01:30 EST
        "WARNING",
        datetime(2026, 3, 8, 11, tzinfo=UTC),  # 07:00 EDT
    ),
    (
        "end inside the skipped hour ends at the jump",
        quiet("America/New_York", "01:00", "02:30"),
        datetime(2026, 3, 8, 6, 30, tzinfo=UTC),  # 01:30 EST
        "WARNING",
        datetime(2026, 3, 8, 7, tzinfo=UTC),  # 03:00 EDT, the jump
    ),
    (
        "ambiguous end: the first reading",
        quiet("America/New_York", "00:00", "01:30"),
        datetime(2026, 11, 1, 4, 30, tzinfo=UTC),  # 00:30 EDT
        "WARNING",
        datetime(2026, 11, 1, 5, 30, tzinfo=UTC),  # 01:30 EDT
    ),
    (
        "ambiguous end: inside the repeated hour, the second reading",
        quiet("America/New_York", "00:00", "01:30"),
        datetime(2026, 11, 1, 6, 10, tzinfo=UTC),  # 01:10 EST
        "WARNING",
        datetime(2026, 11, 1, 6, 30, tzinfo=UTC),  # 01:30 EST
    ),
    (
        "a window inside one day",
        quiet("Asia/Kolkata", "12:00", "13:00"),
        datetime(2026, 5, 5, 7, tzinfo=UTC),  # 12:30 IST
        "WARNING",
        datetime(2026, 5, 5, 7, 30, tzinfo=UTC),
    ),
    ("SAFETY is never held", NIGHT_PARIS, datetime(2026, 6, 1, 21, tzinfo=UTC), "SAFETY", None),
    (
        "ESCALATION is never held",
        NIGHT_PARIS,
        datetime(2026, 6, 1, 21, tzinfo=UTC),
        "ESCALATION",
        None,
    ),
]


@pytest.mark.parametrize(
    ("name", "q", "t", "intent", "expected"), QUIET_CASES, ids=[c[0] for c in QUIET_CASES]
)
def test_next_allowed(
    name: str, q: QuietHours, t: datetime, intent: str, expected: datetime | None
) -> None:
    assert schedule.next_allowed(t, q, intent) == (expected or t)


@pytest.mark.parametrize(
    ("zone", "start", "end", "bad"),
    [
        ("Mars/Olympus", "22:00", "07:00", ["spec.quiet_hours.time_zone"]),
        ("", "22:00", "07:00", ["spec.quiet_hours.time_zone"]),
        ("Europe/Paris", "24:00", "7:00", ["spec.quiet_hours.start", "spec.quiet_hours.end"]),
        ("Europe/Paris", "22:00", "22:00", ["spec.quiet_hours.end"]),
        ("UTC", "00:00", "23:59", []),
    ],
)
def test_quiet_hours_validation(zone: str, start: str, end: str, bad: list[str]) -> None:
    q, problems = QuietHours.parse(zone, start, end, "spec.quiet_hours")
    assert [p.field for p in problems] == bad
    assert (q is None) == bool(bad)


ZONES = ["Europe/Paris", "America/New_York", "Australia/Lord_Howe", "UTC", "Asia/Kolkata"]
minutes = st.integers(0, 24 * 60 - 1)
# DST changes of the zones above in 2026 (UTC), where the interesting cases are.
TRANSITIONS = [
    datetime(2026, 3, 29, 1, tzinfo=UTC),  # EU spring forward
    datetime(2026, 10, 25, 1, tzinfo=UTC),  # EU fall back
    datetime(2026, 3, 8, 7, tzinfo=UTC),  # US spring forward
    datetime(2026, 11, 1, 6, tzinfo=UTC),  # US fall back
    datetime(2026, 4, 4, 15, tzinfo=UTC),  # Lord Howe: back 30 minutes
    datetime(2026, 10, 3, 15, 30, tzinfo=UTC),  # Lord Howe: forward 30 minutes
]
instants = st.one_of(
    st.datetimes(
        min_value=datetime(2026, 1, 1), max_value=datetime(2027, 12, 31), timezones=st.just(UTC)
    ),
    st.builds(
        lambda base, seconds: base + timedelta(seconds=seconds),
        st.sampled_from(TRANSITIONS),
        st.integers(-2 * 86400, 2 * 86400),
    ),
)


@given(
    zone=st.sampled_from(ZONES),
    start=minutes,
    end=minutes,
    t=instants,
    intent=st.sampled_from(["WARNING", "INFORMATIONAL", "ACTION_REQUIRED", None]),
)
def test_next_allowed_properties(
    zone: str, start: int, end: int, t: datetime, intent: str | None
) -> None:
    if start == end:
        return
    q = QuietHours(zone, time(start // 60, start % 60), time(end // 60, end % 60))
    allowed = schedule.next_allowed(t, q, intent)
    # Two days at most: a window that ends inside a skipped hour and starts right
    # after it does not end at all that day.
    assert allowed >= t and allowed - t <= timedelta(hours=48)
    assert not schedule.is_quiet(allowed, q)
    assert schedule.next_allowed(allowed, q, intent) == allowed
    if allowed > t:  # held: quiet right up to the end of the window
        assert schedule.is_quiet(t, q)
        assert schedule.is_quiet(allowed - timedelta(seconds=1), q)
        assert schedule.is_quiet(t + (allowed - t) / 2, q)

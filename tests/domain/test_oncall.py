"""Rotation arithmetic (``domain.oncall``): table-driven across daylight-saving changes,
and properties (Hypothesis): one person at every instant, overrides win, ``until`` is
after the instant and agrees with the next query."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uns_server.domain.oncall import boundary, on_call, shift_index
from uns_server.domain.people import Override, Rotation

PARIS = ZoneInfo("Europe/Paris")
NEW_YORK = ZoneInfo("America/New_York")


def local(zone: ZoneInfo, *parts: int) -> datetime:
    return datetime(*parts, tzinfo=zone)  # type: ignore[misc]


def daily(zone: str, start: datetime, members: tuple[str, ...] = ("a", "b", "c")) -> Rotation:
    return Rotation("r", members, start, timedelta(days=1), zone)


@pytest.mark.parametrize(
    ("zone", "start", "k", "expected_local", "expected_hours"),
    [
        # Paris springs forward on 2026-03-29 (02:00 -> 03:00): the 09:00 hand-off
        # stays at 09:00 local; that shift lasts 23 h.
        ("Europe/Paris", local(PARIS, 2026, 3, 28, 9), 1, (2026, 3, 29, 9), 23),
        ("Europe/Paris", local(PARIS, 2026, 3, 28, 9), 2, (2026, 3, 30, 9), 24),
        # Paris falls back on 2026-10-25 (03:00 -> 02:00): 25 h.
        ("Europe/Paris", local(PARIS, 2026, 10, 24, 9), 1, (2026, 10, 25, 9), 25),
        # New York: 2026-03-08 and 2026-11-01.
        ("America/New_York", local(NEW_YORK, 2026, 3, 7, 9), 1, (2026, 3, 8, 9), 23),
        ("America/New_York", local(NEW_YORK, 2026, 10, 31, 9), 1, (2026, 11, 1, 9), 25),
        # Counting backwards across the change is the same arithmetic.
        ("Europe/Paris", local(PARIS, 2026, 3, 30, 9), -1, (2026, 3, 29, 9), 23),
        ("Europe/Paris", local(PARIS, 2026, 3, 30, 9), -2, (2026, 3, 28, 9), 24),
    ],
)
def test_day_shifts_hand_off_at_the_same_local_time_across_dst(
    zone: str,
    start: datetime,
    k: int,
    expected_local: tuple[int, int, int, int],
    expected_hours: int,
) -> None:
    rotation = daily(zone, start)
    at = boundary(rotation, k)
    assert at.astimezone(ZoneInfo(zone)).replace(tzinfo=None) == datetime(*expected_local)
    before = boundary(rotation, k - 1)  # the shift that ends at ``at``
    assert (at - before) == timedelta(hours=expected_hours)
    assert shift_index(rotation, at) == k
    assert shift_index(rotation, at - timedelta(microseconds=1)) == k - 1


def test_a_start_in_the_skipped_hour_hands_off_just_after_the_jump() -> None:
    # 02:30 does not exist in Paris on 2026-03-29: read with the offset before the
    # change, i.e. 03:30 CEST; the day after it is 02:30 again.
    rotation = daily("Europe/Paris", local(PARIS, 2026, 3, 28, 2, 30))
    assert boundary(rotation, 1) == datetime(2026, 3, 29, 1, 30, tzinfo=UTC)
    assert boundary(rotation, 2) == local(PARIS, 2026, 3, 30, 2, 30)


def test_hour_shifts_count_elapsed_time_across_dst() -> None:
    start = local(PARIS, 2026, 3, 28, 20)
    rotation = Rotation("r", ("a", "b", "c"), start, timedelta(hours=8), "Europe/Paris")
    for k in range(-5, 10):
        assert boundary(rotation, k) - boundary(rotation, k - 1) == timedelta(hours=8)


@pytest.mark.parametrize(
    ("at_hours", "who", "until_hours", "override", "next_who"),
    [
        (0, "a", 24, False, "b"),
        (23.5, "a", 24, False, "b"),
        (24, "b", 30, False, "z"),  # the override starts at 30 h
        (30, "z", 34, True, "y"),  # the later override wins from 34 h
        (34, "y", 36, True, "z"),  # ... and ends at 36 h: the earlier one still holds
        (36, "z", 40, True, "b"),
        (40, "b", 48, False, "c"),
        (-1, "c", 0, False, "a"),  # before the start: counted backwards
    ],
)
def test_overrides_win_and_the_later_one_wins(
    at_hours: float, who: str, until_hours: float, override: bool, next_who: str
) -> None:
    start = datetime(2026, 6, 1, 9, tzinfo=UTC)
    h = timedelta(hours=1)
    rotation = Rotation(
        "r",
        ("a", "b", "c"),
        start,
        timedelta(days=1),
        "UTC",
        (
            Override("z", start + 30 * h, start + 40 * h),
            Override("y", start + 34 * h, start + 36 * h),
        ),
    )
    answer = on_call(rotation, start + at_hours * h)
    assert (answer.recipient_id, answer.until, answer.override, answer.next_recipient_id) == (
        who,
        start + until_hours * h,
        override,
        next_who,
    )


def test_a_one_member_rotation_answers_until_the_end_of_the_shift() -> None:
    start = datetime(2026, 6, 1, 9, tzinfo=UTC)
    rotation = Rotation("r", ("solo",), start, timedelta(days=7), "UTC")
    answer = on_call(rotation, start + timedelta(days=1))
    assert (answer.recipient_id, answer.until, answer.next_recipient_id) == (
        "solo",
        start + timedelta(days=7),
        "solo",
    )


ZONES = ["UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"]
BASE = datetime(2026, 1, 1, tzinfo=UTC)
instants = st.integers(min_value=-400 * 86400, max_value=400 * 86400).map(
    lambda s: BASE + timedelta(seconds=s)
)


@st.composite
def rotations(draw: st.DrawFn) -> Rotation:
    members = tuple(draw(st.lists(st.sampled_from("abcde"), min_size=1, max_size=5)))
    shift = draw(
        st.one_of(
            st.integers(1, 14).map(lambda d: timedelta(days=d)),
            st.integers(60, 3 * 86400).map(lambda s: timedelta(seconds=s)),
        )
    )
    overrides = []
    for _ in range(draw(st.integers(0, 4))):
        begin = draw(instants)
        length = timedelta(seconds=draw(st.integers(1, 10 * 86400)))
        overrides.append(Override(draw(st.sampled_from("xyz")), begin, begin + length))
    return Rotation(
        "r", members, draw(instants), shift, draw(st.sampled_from(ZONES)), tuple(overrides)
    )


@settings(max_examples=300, deadline=None)
@given(rotations(), instants)
def test_one_person_until_a_later_instant_that_agrees_with_the_next_query(
    rotation: Rotation, t: datetime
) -> None:
    answer = on_call(rotation, t)
    assert answer.until > t
    assert answer.recipient_id in rotation.referenced()
    # The same person on call just before the hand-off, the next one at it.
    just_before = answer.until - timedelta(microseconds=1)
    assert on_call(rotation, just_before).recipient_id == answer.recipient_id
    assert on_call(rotation, answer.until).recipient_id == answer.next_recipient_id
    # Shift boundaries bracket the instant.
    k = shift_index(rotation, t)
    assert boundary(rotation, k) <= t < boundary(rotation, k + 1)


@settings(max_examples=300, deadline=None)
@given(rotations(), instants)
def test_the_latest_override_covering_an_instant_wins(rotation: Rotation, t: datetime) -> None:
    covering = [o for o in rotation.overrides if o.start <= t < o.end]
    answer = on_call(rotation, t)
    if covering:
        assert (answer.recipient_id, answer.override) == (covering[-1].recipient_id, True)
    else:
        k = shift_index(rotation, t)
        assert answer.recipient_id == rotation.members[k % len(rotation.members)]
        assert not answer.override


@settings(max_examples=200, deadline=None)
@given(rotations(), instants, st.integers(1, 5))
def test_walking_the_hand_offs_visits_every_shift_in_order(
    rotation: Rotation, t: datetime, steps: int
) -> None:
    """Without overrides, successive answers are successive members."""
    plain = Rotation("r", rotation.members, rotation.start, rotation.shift, rotation.time_zone)
    at = t
    for _ in range(steps):
        answer = on_call(plain, at)
        assert answer.until > at
        at = answer.until
        k = shift_index(plain, at)
        assert boundary(plain, k) == at  # every hand-off is a shift boundary

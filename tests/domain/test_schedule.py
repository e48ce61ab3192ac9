"""Pure timing rules of the obligation over time (``domain.schedule``): table-driven
cases and Hypothesis properties, across DST changes."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, time, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from uns_server.domain import schedule
from uns_server.domain.moves import FollowUpCounts
from uns_server.domain.outcomes import provider_refs_from_json
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


# -- reminders and escalation steps ------------------------------------------------------

D = datetime(2026, 6, 1, 12, tzinfo=UTC)  # delivered (14:00 in Paris)
TIMING = schedule.Timing(
    channels=("slack",),
    require_ack=True,
    ack_timeout=timedelta(hours=1),
    reminder=schedule.Reminder(timedelta(minutes=10), 2.0, 5),
    escalation=(
        schedule.EscalationStep(timedelta(minutes=20), ("pagerduty",)),
        schedule.EscalationStep(timedelta(minutes=30), ("pagerduty", "email")),
    ),
)


def test_reminders_taper() -> None:
    offsets = schedule.Reminder(timedelta(minutes=10), 2.0, 4).offsets()
    assert offsets == [minutes(10), minutes(30), minutes(70), minutes(150)]
    assert schedule.Reminder(timedelta(minutes=5), 1.0, 3).offsets() == [
        minutes(5),
        minutes(10),
        minutes(15),
    ]


def minutes(m: float) -> timedelta:
    return timedelta(minutes=m)


def test_follow_ups_in_order_and_before_the_deadline() -> None:
    steps = schedule.follow_ups(D, TIMING, "WARNING")
    R, E = schedule.StepKind.REMINDER, schedule.StepKind.ESCALATION
    assert [(s.kind, s.number, s.at - D) for s in steps] == [
        (R, 1, minutes(10)),
        (E, 1, minutes(20)),
        (E, 2, minutes(30)),  # the same time as reminder 2: the escalation goes first
        (R, 2, minutes(30)),
    ]
    assert steps[2].channels == ("pagerduty", "email") and steps[0].channels == ("slack",)
    # Reminder 3 (at 70 minutes) falls after the deadline: not planned.
    assert schedule.follow_ups(D, replace(TIMING, require_ack=False), "WARNING") == []


@pytest.mark.parametrize(
    ("reminders", "escalations", "now", "want"),
    [
        (0, 0, D + minutes(5), schedule.Wait(D + minutes(10))),
        (0, 0, D + minutes(10), "R1"),
        (0, 0, D + minutes(45), "R1"),  # late (worker down): the earliest first
        (1, 0, D + minutes(15), schedule.Wait(D + minutes(20))),
        (1, 1, D + minutes(30), "E2"),
        (1, 2, D + minutes(30), "R2"),
        (2, 1, D + minutes(30), "E2"),
        (2, 2, D + minutes(59), schedule.Wait(None)),
    ],
)
def test_decide_follow_up(reminders: int, escalations: int, now: datetime, want: object) -> None:
    decision = schedule.decide_follow_up(
        delivered_at=D,
        timing=TIMING,
        intent="WARNING",
        reminders_sent=reminders,
        escalations_sent=escalations,
        now=now,
    )
    if isinstance(want, str):
        assert isinstance(decision, schedule.Fire)
        assert f"{decision.step.kind.value[0]}{decision.step.number}" == want
    else:
        assert decision == want


def test_quiet_hours_hold_follow_ups_but_not_for_escalation_intents() -> None:
    # 14:05-14:30 Paris is quiet: R1 and E1 wait until 14:30, when R2 and E2 are due.
    quiet_timing = replace(TIMING, quiet=QuietHours("Europe/Paris", time(14, 5), time(14, 30)))
    steps = schedule.follow_ups(D, quiet_timing, "WARNING")
    assert all(s.at == D + minutes(30) for s in steps)
    assert [(s.kind.value[0], s.number, s.held) for s in steps] == [
        ("E", 1, True),
        ("E", 2, False),
        ("R", 1, True),
        ("R", 2, False),
    ]
    assert schedule.follow_ups(D, quiet_timing, "ESCALATION") == schedule.follow_ups(
        D, TIMING, "ESCALATION"
    )


def test_plan_lists_delivery_follow_ups_and_deadline() -> None:
    accepted = D - minutes(1)
    plan = schedule.plan(accepted, D, TIMING, "WARNING")
    assert plan[0] == schedule.Step(schedule.StepKind.DELIVERY, 1, D, ("slack",), False)
    assert plan[1:-1] == schedule.follow_ups(D, TIMING, "WARNING")
    assert plan[-1] == schedule.Step(schedule.StepKind.DEADLINE, 1, D + timedelta(hours=1), ())


@given(
    first=st.integers(1, 3600),
    multiplier=st.floats(1.0, 10.0),
    count=st.integers(1, 20),
    afters=st.lists(st.integers(1, 7200), max_size=5),
    timeout=st.integers(60, 7200),
    sent=st.tuples(st.integers(0, 20), st.integers(0, 5)),
    elapsed=st.integers(0, 8000),
)
def test_follow_up_properties(
    first: int,
    multiplier: float,
    count: int,
    afters: list[int],
    timeout: int,
    sent: tuple[int, int],
    elapsed: int,
) -> None:
    timing = schedule.Timing(
        channels=("a",),
        require_ack=True,
        ack_timeout=timedelta(seconds=timeout),
        reminder=schedule.Reminder(timedelta(seconds=first), multiplier, count),
        escalation=tuple(schedule.EscalationStep(timedelta(seconds=a), ("b",)) for a in afters),
    )
    steps = schedule.follow_ups(D, timing, "WARNING")
    assert all(D < s.at < D + timing.ack_timeout for s in steps)
    assert [s.at for s in steps] == sorted(s.at for s in steps)
    reminders = [s.number for s in steps if s.kind == schedule.StepKind.REMINDER]
    assert reminders == list(range(1, len(reminders) + 1)) and len(reminders) <= count
    now = D + timedelta(seconds=elapsed)
    decision = schedule.decide_follow_up(
        delivered_at=D,
        timing=timing,
        intent="WARNING",
        reminders_sent=sent[0],
        escalations_sent=sent[1],
        now=now,
    )
    pending = schedule.pending_follow_ups(steps, *sent)
    if isinstance(decision, schedule.Fire):
        assert decision.step == pending[0] and decision.step.at <= now
    else:
        assert decision.at == (pending[0].at if pending else None)
        assert decision.at is None or decision.at > now


# -- retrying one step -------------------------------------------------------------------

OK = schedule.StepAnswer(success=True, retryable=False)
BUSY = schedule.StepAnswer(success=False, retryable=True)  # 503, 429, timeout, transport
NO = schedule.StepAnswer(success=False, retryable=False)  # a rejection
SLOW = schedule.StepAnswer(success=False, retryable=True, retry_after_seconds=120.0)
NIGHT = QuietHours("Europe/Paris", time(22, 0), time(7, 0))
SENT, GAVE_UP, STOPPED = (
    schedule.StepDecided(schedule.StepOutcome.SENT),
    schedule.StepDecided(schedule.StepOutcome.GAVE_UP),
    schedule.StepDecided(schedule.StepOutcome.STOPPED),
)
PD_EMAIL = ("pagerduty", "email")


def after(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("answers", "attempts", "max_attempts", "pending", "deadline", "quiet", "want"),
    [
        # Decided by the answers alone.
        ({"pagerduty": OK, "email": OK}, 1, 5, True, after(3600), None, SENT),
        ({"pagerduty": OK, "email": NO}, 1, 5, True, after(3600), None, GAVE_UP),
        ({"pagerduty": NO, "email": NO}, 1, 5, True, after(3600), None, GAVE_UP),
        # Answered for good beats a settled ack: the event says what happened.
        ({"pagerduty": OK, "email": OK}, 1, 5, False, after(3600), None, SENT),
        # A transient failure retries that channel alone; rand 0 means half the delay
        # (1s base after call 1, 2s after call 2).
        ({"pagerduty": OK, "email": BUSY}, 1, 5, True, after(3600), None, ("email", 0.5)),
        ({"pagerduty": BUSY, "email": BUSY}, 2, 5, True, after(3600), None, (PD_EMAIL, 1.0)),
        ({"pagerduty": NO, "email": BUSY}, 1, 5, True, after(3600), None, ("email", 0.5)),
        # A channel with no answer (never called) is called.
        ({"pagerduty": OK}, 1, 5, True, after(3600), None, ("email", 0.5)),
        # Retry-After is a floor.
        ({"pagerduty": OK, "email": SLOW}, 1, 5, True, after(3600), None, ("email", 120.0)),
        # Bounded: the policy's max_attempts, capped at STEP_ATTEMPTS_MAX.
        ({"pagerduty": OK, "email": BUSY}, 3, 3, True, after(3600), None, GAVE_UP),
        ({"pagerduty": OK, "email": BUSY}, 1, 1, True, after(3600), None, GAVE_UP),
        ({"pagerduty": OK, "email": BUSY}, 5, 10, True, after(3600), None, GAVE_UP),
        ({"pagerduty": OK, "email": BUSY}, 4, 10, True, after(3600), None, ("email", 4.0)),
        # A retry that would not come before the deadline is not made.
        ({"pagerduty": OK, "email": BUSY}, 1, 5, True, after(0.5), None, GAVE_UP),
        ({"pagerduty": OK, "email": SLOW}, 1, 5, True, after(60), None, GAVE_UP),
        # The ack ended while a channel waited to retry.
        ({"pagerduty": OK, "email": BUSY}, 1, 5, False, after(3600), None, STOPPED),
        # 13:00 in Paris is outside the night window: not held (see the test below).
        ({"pagerduty": BUSY, "email": OK}, 1, 5, True, after(3600), NIGHT, ("pagerduty", 0.5)),
    ],
)
def test_decide_step_attempt(
    answers: dict[str, schedule.StepAnswer],
    attempts: int,
    max_attempts: int,
    pending: bool,
    deadline: datetime,
    quiet: QuietHours | None,
    want: object,
) -> None:
    got = schedule.decide_step_attempt(
        channels=PD_EMAIL,
        answers=answers,
        attempts=attempts,
        max_attempts=max_attempts,
        ack_pending=pending,
        now=NOW,
        deadline=deadline,
        quiet=quiet,
        intent="ACTION_REQUIRED",
        rand=lambda: 0.0,
    )
    if isinstance(want, tuple):
        channels, seconds = want
        channels = (channels,) if isinstance(channels, str) else channels
        assert got == schedule.RetryStep(after(seconds), channels)
    else:
        assert got == want


def test_a_retry_in_quiet_hours_waits_for_the_window_to_end() -> None:
    late = datetime(2026, 3, 1, 20, 59, 59, 800000, tzinfo=UTC)  # 21:59:59.8 in Paris
    answers = {"pagerduty": BUSY}
    kwargs = dict(
        channels=("pagerduty",),
        answers=answers,
        attempts=1,
        max_attempts=5,
        ack_pending=True,
        now=late,
        quiet=NIGHT,
        rand=lambda: 0.0,
    )
    held = schedule.decide_step_attempt(
        **kwargs, deadline=late + timedelta(hours=12), intent="ACTION_REQUIRED"
    )
    assert held == schedule.RetryStep(datetime(2026, 3, 2, 6, tzinfo=UTC), ("pagerduty",))
    # Past the deadline once held: given up. SAFETY is never held.
    short = late + timedelta(hours=1)
    assert schedule.decide_step_attempt(**kwargs, deadline=short, intent="ACTION_REQUIRED") == (
        GAVE_UP
    )
    assert schedule.decide_step_attempt(**kwargs, deadline=short, intent="SAFETY") == (
        schedule.RetryStep(late + timedelta(seconds=0.5), ("pagerduty",))
    )


@given(
    answers=st.dictionaries(
        st.sampled_from(PD_EMAIL), st.sampled_from([OK, BUSY, NO, SLOW]), min_size=1
    ),
    attempts=st.integers(1, 12),
    max_attempts=st.integers(1, 12),
    pending=st.booleans(),
    rand=st.floats(0.0, 1.0),
)
def test_decide_step_attempt_properties(
    answers: dict[str, schedule.StepAnswer],
    attempts: int,
    max_attempts: int,
    pending: bool,
    rand: float,
) -> None:
    deadline = after(3600)
    got = schedule.decide_step_attempt(
        channels=PD_EMAIL,
        answers=answers,
        attempts=attempts,
        max_attempts=max_attempts,
        ack_pending=pending,
        now=NOW,
        deadline=deadline,
        quiet=None,
        intent=None,
        rand=lambda: rand,
    )
    if isinstance(got, schedule.RetryStep):
        # Only channels not yet answered for good, within the bound and the deadline,
        # while the ack is pending, never immediately.
        assert pending and attempts < min(max_attempts, schedule.STEP_ATTEMPTS_MAX)
        assert got.channels and all(
            ch not in answers or answers[ch].transient for ch in got.channels
        )
        assert NOW < got.at < deadline
    elif got.outcome == schedule.StepOutcome.SENT:
        assert all(ch in answers and answers[ch].success for ch in PD_EMAIL)
    elif got.outcome == schedule.StepOutcome.STOPPED:
        assert not pending


def test_held_until_holds_only_people_in_their_quiet_hours() -> None:
    night = quiet("Asia/Tokyo", "22:00", "07:00")
    at = datetime(2026, 12, 2, 14, 0, tzinfo=UTC)  # 23:00 in Tokyo
    wake = datetime(2026, 12, 2, 22, 0, tzinfo=UTC)  # 07:00 in Tokyo
    people = {"mail@alice": night, "mail@bob": None, "mail@carol": quiet("UTC", "22:00", "07:00")}
    assert schedule.held_until(people, at, "WARNING") == {"mail@alice": wake}
    for exempt in schedule.QUIET_EXEMPT:
        assert schedule.held_until(people, at, exempt) == {}


T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
TAPER = schedule.Reminder(timedelta(minutes=10), 3.0, 3)


def _ref(
    rid: str, at: datetime, kind: str = "", number: int = 0, due: str = ""
) -> dict[str, object]:
    ref: dict[str, object] = {"recipient_id": rid, "at": at.isoformat(), "channel": "mail"}
    if kind:
        ref |= {"follow_up": kind, "follow_up_number": number}
    if due:
        ref["due_time"] = due
    return ref


def test_nag_states_count_each_persons_reminders_once_per_number() -> None:
    r1 = (T0 + minutes(10)).isoformat()
    refs = {
        "mail@alice": _ref("alice", T0),
        "mail@alice:reminder:1": _ref("alice", T0 + minutes(11), "REMINDER", 1, r1),
        "mail@alice+2:reminder:1": _ref("alice", T0 + minutes(11), "REMINDER", 1, r1),
        "mail@alice:escalation:1": _ref("alice", T0 + minutes(36), "ESCALATION", 1),
        "mail@bob": _ref("bob", T0),
        "hook": {"channel": "hook", "at": T0.isoformat()},  # a shared channel: nobody's
    }
    assert schedule.nag_states(provider_refs_from_json(refs) or {}) == {
        "alice": schedule.NagState(T0 + minutes(36), 1),
        "bob": schedule.NagState(T0, 0),
    }


def test_a_snooze_reminder_leaves_the_policy_reminders_their_times() -> None:
    refs = {
        "mail@bob": _ref("bob", T0),
        "mail@bob:snooze_reminder:1": _ref("bob", T0 + minutes(9), "SNOOZE_REMINDER", 1),
    }
    assert schedule.nag_states(provider_refs_from_json(refs) or {}) == {
        "bob": schedule.NagState(T0, 0)
    }
    counts = FollowUpCounts(2, 1)
    assert counts.after(schedule.StepKind.SNOOZE_REMINDER, 3) == counts


@pytest.mark.parametrize(
    ("state", "due"),
    [
        (schedule.NagState(T0, 0), T0 + minutes(10)),
        (schedule.NagState(T0, 1), T0 + minutes(30)),
        (schedule.NagState(T0, 2), T0 + minutes(90)),
        (schedule.NagState(T0, 3), None),  # max_count reached
    ],
)
def test_reminder_due_tapers_on_the_persons_own_count(
    state: schedule.NagState, due: datetime | None
) -> None:
    assert schedule.reminder_due(TAPER, state) == due


def test_not_due_lists_only_people_asked_too_recently() -> None:
    states = {"alice": schedule.NagState(T0, 1), "bob": schedule.NagState(T0, 0)}
    now = T0 + minutes(20)
    # alice (once reminded) is due at +30; bob at +10; carol was never asked.
    assert schedule.not_due(TAPER, states, ["alice", "bob", "carol"], now) == {
        "alice": T0 + minutes(30)
    }
    assert schedule.not_due(TAPER, {"a": schedule.NagState(T0, 3)}, ["a"], now) == {"a": None}


def test_a_step_with_nobody_to_call_is_skipped() -> None:
    decided = schedule.decide_step_attempt(
        channels=(),
        answers={},
        attempts=1,
        max_attempts=3,
        ack_pending=True,
        now=T0,
        deadline=T0 + minutes(60),
        quiet=None,
        intent=None,
        rand=lambda: 0.5,
    )
    assert decided == schedule.StepDecided(schedule.StepOutcome.SKIPPED)

"""Who each planned step asks (``domain.planned_people``), the pure part of Simulate's
plan for people: the cases the gRPC tests (tests/api/test_plan_people.py) do not reach."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, time, timedelta

from uns_server.domain.enums import Urgency
from uns_server.domain.people import Recipient, Rotation
from uns_server.domain.planned_people import plan_people
from uns_server.domain.schedule import EscalationStep, QuietHours, Reminder, StepKind, Timing
from uns_server.domain.staged_rules import NotificationRule
from uns_server.domain.targets import Target

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
# Alice sleeps 12:00-13:00 UTC; bob never.
ASLEEP = QuietHours("UTC", time(12, 0), time(13, 0))
PEOPLE = {
    "alice": Recipient("alice", "Alice", "UTC", quiet_hours=ASLEEP),
    "bob": Recipient("bob", "Bob", "UTC"),
}


def timing(targets: tuple[Target, ...], reminder: Reminder | None = None) -> Timing:
    return Timing((), True, timedelta(hours=4), reminder=reminder, targets=targets)


def minutes(m: float) -> datetime:
    return T0 + timedelta(minutes=m)


def test_a_rotation_handing_off_during_a_hold_sends_to_the_new_person_then() -> None:
    # Alice on call 11:30-12:30, then bob: alice is held at the first attempt; at
    # 13:00, when her hold ends, the rotation asks bob, and the delivery completes.
    primary = Rotation("primary", ("alice", "bob"), minutes(-30), timedelta(hours=1), "UTC")
    plan = plan_people(
        T0, None, timing((Target(rotation_id="primary"),)), "WARNING", {"primary": primary}, PEOPLE
    )
    delivery = plan.asked[(StepKind.DELIVERY, 1)]
    assert (delivery.sent, dict(delivery.held)) == ((), {"alice": minutes(60)})
    [deadline] = [s for s in plan.steps if s.kind == StepKind.DEADLINE]
    assert deadline.at == minutes(60) + timedelta(hours=4)


def test_a_person_held_at_a_reminder_is_reckoned_from_their_last_message() -> None:
    # Bob is sent the delivery at 12:10; alice's waits for 13:00, so reminders count
    # from 13:00: 13:30 and 14:00 remind both (each is due again by then).
    everyone = (Target(recipient_id="alice"), Target(recipient_id="bob"))
    reminder = Reminder(timedelta(minutes=30), 1.0, 2)
    plan = plan_people(minutes(10), None, timing(everyone, reminder), "WARNING", {}, PEOPLE)
    first = plan.asked[(StepKind.DELIVERY, 1)]
    assert (first.sent, dict(first.held)) == (("bob",), {"alice": minutes(60)})
    r1, r2 = (plan.asked[(StepKind.REMINDER, n)] for n in (1, 2))
    assert (r1.sent, r2.sent) == (("alice", "bob"), ("alice", "bob"))
    assert [s.at for s in plan.steps if s.kind == StepKind.REMINDER] == [
        minutes(90),
        minutes(120),
    ]


def test_a_person_asleep_at_a_reminder_is_not_sent_it_and_is_due_at_the_next() -> None:
    # Delivered at 11:00 to alice (awake); her reminder at 12:10 falls in her quiet
    # hours: held, not sent, so not counted; at 13:20 she is due (since 12:10, 70
    # minutes after her last message), and reminded.
    reminder = Reminder(timedelta(minutes=70), 1.0, 2)
    plan = plan_people(
        minutes(-60), None, timing((Target(recipient_id="alice"),), reminder), "WARNING", {}, PEOPLE
    )
    r1, r2 = (plan.asked[(StepKind.REMINDER, n)] for n in (1, 2))
    assert (r1.sent, dict(r1.held), dict(r1.not_due)) == ((), {"alice": minutes(60)}, {})
    assert (r2.sent, dict(r2.held), dict(r2.not_due)) == (("alice",), {}, {})


def test_a_person_first_asked_by_an_escalation_step_has_their_later_rules_from_it() -> None:
    # Carol (push at once, sms after 2 minutes) is asked first by the step at 10
    # minutes: the step sends her push, her sms is planned at 12, not at 2.
    rules = (
        NotificationRule("push", timedelta(0), Urgency.HIGH),
        NotificationRule("sms", timedelta(minutes=2), Urgency.HIGH),
    )
    people = {**PEOPLE, "carol": Recipient("carol", "Carol", "UTC", notification_rules=rules)}
    step = EscalationStep(timedelta(minutes=10), (), (Target(recipient_id="carol"),))
    plan_timing = replace(timing((Target(recipient_id="bob"),)), escalation=(step,))
    plan = plan_people(minutes(60), None, plan_timing, "ACTION_REQUIRED", {}, people)
    assert plan.asked[(StepKind.ESCALATION, 1)].sent == ("carol",)
    [rule] = [s for s in plan.steps if s.kind == StepKind.PERSON_RULE]
    assert (rule.at, rule.channels, rule.targets) == (
        minutes(72),
        ("sms",),
        (Target(recipient_id="carol"),),
    )

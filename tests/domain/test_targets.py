"""Targets, escalation loops and the per-person view, as pure rules (SPEC §6)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from uns_server.domain.oncall import resolve_targets
from uns_server.domain.outcomes import DeliveryOutcome, provider_refs_from_json
from uns_server.domain.people import Rotation
from uns_server.domain.schedule import EscalationStep, StepKind, Timing, follow_ups
from uns_server.domain.targets import Target, people_sent, target_violations
from uns_server.services.policy_documents import spec_from_mapping

T0 = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)


def m(n: float) -> timedelta:
    return timedelta(minutes=n)


def test_loops_repeat_the_steps_after_the_latest_one_until_the_deadline() -> None:
    timing = Timing(
        channels=("log",),
        require_ack=True,
        ack_timeout=m(100),
        escalation=(EscalationStep(m(10), ("a",)), EscalationStep(m(30), ("b",))),
        escalation_loops=9,
    )
    steps = follow_ups(T0, timing, None)
    assert [(s.kind, s.number, s.at - T0, s.channels) for s in steps] == [
        (StepKind.ESCALATION, 1, m(10), ("a",)),
        (StepKind.ESCALATION, 2, m(30), ("b",)),
        (StepKind.ESCALATION, 3, m(40), ("a",)),
        (StepKind.ESCALATION, 4, m(60), ("b",)),
        (StepKind.ESCALATION, 5, m(70), ("a",)),
        (StepKind.ESCALATION, 6, m(90), ("b",)),
    ]  # pass 3 would start at 100 minutes: the deadline


def test_a_rotation_asks_whoever_is_on_call_then_and_a_missing_one_nobody() -> None:
    rotation = Rotation("primary", ("alice", "bob"), T0, timedelta(hours=1), "UTC")
    targets = [
        Target(rotation_id="primary"),
        Target(recipient_id="carol"),
        Target(rotation_id="gone"),
    ]
    assert resolve_targets(targets, T0 + m(5), {"primary": rotation}) == ("alice", "carol")
    assert resolve_targets(targets, T0 + m(65), {"primary": rotation}) == ("bob", "carol")
    # Asked twice (by name and on call): once.
    assert resolve_targets([*targets, Target("bob")], T0 + m(65), {"primary": rotation}) == (
        "bob",
        "carol",
    )


def test_target_shape() -> None:
    bad = [Target(), Target("a", "b"), Target("Not Ok"), Target(rotation_id="ok")]
    assert [v.field for v in target_violations(bad, "spec.targets")] == [
        "spec.targets[0]",
        "spec.targets[1]",
        "spec.targets[2].recipient_id",
    ]


def test_policy_files_name_targets_and_loops() -> None:
    spec = spec_from_mapping(
        {
            "delivery_mode": "GUARANTEED",
            "require_ack": True,
            "targets": [{"rotation_id": "primary"}],
            "escalation": [{"after": "15m", "targets": [{"recipient_id": "carol"}]}],
            "escalation_loops": 2,
        }
    )
    assert spec.channels == ()
    assert spec.targets == (Target(rotation_id="primary"),)
    assert spec.escalation[0].targets == (Target(recipient_id="carol"),)
    assert spec.escalation_loops == 2


def test_people_sent_reads_routes_references_reminders_and_the_unreachable() -> None:
    outcome = {
        "channels_succeeded": ["hook", "mail@alice"],
        "channels_attempted": ["hook", "mail@alice", "chat@alice"],
        "channels_failed": ["chat@alice"],
        "recipients_unreachable": [{"recipient_id": "carol", "reason": "no contact"}],
    }
    refs = {
        "hook": {"channel": "hook", "at": T0.isoformat()},
        "mail@alice:reminder:1": {
            "channel": "mail",
            "recipient_id": "alice",
            "at": (T0 + m(3)).isoformat(),
            "follow_up": "REMINDER",
            "follow_up_number": 1,
        },
        "mail@alice": {"channel": "mail", "recipient_id": "alice", "at": (T0 + m(1)).isoformat()},
    }
    typed = provider_refs_from_json(refs)
    assert typed is not None
    [alice, carol] = people_sent(DeliveryOutcome.from_json(outcome), typed)
    assert (alice.recipient_id, alice.channels_tried, alice.channels_accepted) == (
        "alice",
        ["mail", "chat"],
        ["mail"],
    )
    assert alice.references == [
        typed["mail@alice"],
        typed["mail@alice:reminder:1"],
    ]  # in time order
    assert alice.reminders_sent == 1
    assert (carol.recipient_id, carol.unreachable_reason, carol.references) == (
        "carol",
        "no contact",
        [],
    )

"""Policy specs, content hashes and per-request resolution, table-driven."""

from __future__ import annotations

import hashlib
from dataclasses import fields, replace
from datetime import UTC, datetime, time, timedelta
from typing import Any

import pytest

from uns_server.domain.enums import DeliveryMode, Intent, Priority, Urgency
from uns_server.domain.errors import FieldViolation, InvalidRequest, NoPolicy, PolicyOverride
from uns_server.domain.policy import (
    EffectivePolicy,
    PolicyRevision,
    PolicySpec,
    ServerDefaults,
    content_hash,
    normalize_spec,
    resolve,
)
from uns_server.domain.policy.rules import RoutingRule
from uns_server.domain.requests import SendRequest
from uns_server.domain.schedule import EscalationStep, QuietHours, Reminder
from uns_server.domain.targets import Target
from uns_server.domain.templates import Template

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def request(**changes: Any) -> SendRequest:
    req = SendRequest(
        notification_type="trading.circuit_breaker",
        intent=Intent.SAFETY,
        title="t",
        message="m",
        source="router",
    )
    return replace(req, **changes)


def spec(**changes: Any) -> PolicySpec:
    s = PolicySpec(
        channels=("slack", "webhook"),
        delivery_mode=DeliveryMode.BEST_EFFORT,
        require_ack=True,
        ack_timeout_minutes=15,
        priority=Priority.HIGH,
        dedup_window_seconds=60,
        max_attempts=3,
    )
    return replace(s, **changes)


def revision(s: PolicySpec | None = None, **changes: Any) -> PolicyRevision:
    s = s or spec()
    r = PolicyRevision(
        policy_id="pol-1",
        notification_type="trading.circuit_breaker",
        revision=2,
        spec=s,
        content_hash=content_hash(s),
        active=True,
        created_by="ops",
        created_at=T0,
        activated_at=T0,
    )
    return replace(r, **changes)


# -- PolicySpec.build ---------------------------------------------------------------------


def test_build_fills_documented_defaults() -> None:
    built = PolicySpec.build(["log"], DeliveryMode.GUARANTEED, False)
    assert built == PolicySpec(
        channels=("log",),
        delivery_mode=DeliveryMode.GUARANTEED,
        require_ack=False,
        ack_timeout_minutes=60,
        priority=Priority.NORMAL,
        dedup_window_seconds=300,
        max_attempts=5,
    )
    assert normalize_spec(["log"], DeliveryMode.GUARANTEED, False) == built


def test_build_keeps_explicit_values_and_dedups_channels_in_order() -> None:
    built = PolicySpec.build(
        ["webhook", "slack", "webhook", "email", "slack"],
        DeliveryMode.BEST_EFFORT,
        True,
        ack_timeout_minutes=10080,
        priority=Priority.LOW,
        dedup_window_seconds=86400,
        max_attempts=100,
    )
    assert built == PolicySpec(
        channels=("webhook", "slack", "email"),
        delivery_mode=DeliveryMode.BEST_EFFORT,
        require_ack=True,
        ack_timeout_minutes=10080,
        priority=Priority.LOW,
        dedup_window_seconds=86400,
        max_attempts=100,
    )
    lows = PolicySpec.build(["a" * 64, "0_-"], DeliveryMode.GUARANTEED, False, 1, None, 1, 1)
    assert (lows.ack_timeout_minutes, lows.dedup_window_seconds, lows.max_attempts) == (1, 1, 1)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"channels": []}, "spec.channels"),
        ({"channels": ["log", "Slack"]}, "spec.channels[1]"),
        ({"channels": [""]}, "spec.channels[0]"),
        ({"channels": ["a" * 65]}, "spec.channels[0]"),
        ({"channels": ["has space"]}, "spec.channels[0]"),
        ({"channels": ["dots.no"]}, "spec.channels[0]"),
        ({"channels": ["log"] * 65}, "spec.channels"),  # at most 64, repeats included
        ({"channels": ["Bad!"] * 100_000}, "spec.channels"),  # one violation, not 100k
        ({"delivery_mode": None}, "spec.delivery_mode"),
        ({"ack_timeout_minutes": -1}, "spec.ack_timeout_minutes"),
        ({"ack_timeout_minutes": 10081}, "spec.ack_timeout_minutes"),
        ({"dedup_window_seconds": -1}, "spec.dedup_window_seconds"),
        ({"dedup_window_seconds": 86401}, "spec.dedup_window_seconds"),
        ({"max_attempts": -1}, "spec.max_attempts"),
        ({"max_attempts": 101}, "spec.max_attempts"),
    ],
)
def test_build_rejects(kwargs: dict[str, Any], field: str) -> None:
    args: dict[str, Any] = {
        "channels": ["log"],
        "delivery_mode": DeliveryMode.GUARANTEED,
        "require_ack": False,
    } | kwargs
    with pytest.raises(InvalidRequest) as exc:
        PolicySpec.build(**args)
    assert [v.field for v in exc.value.violations] == [field]
    assert exc.value.metadata == {"fields": field}


def test_build_reports_every_problem() -> None:
    with pytest.raises(InvalidRequest) as exc:
        PolicySpec.build(["ok", "BAD"], None, False, -1, None, 99999, 101)
    assert [v.field for v in exc.value.violations] == [
        "spec.channels[1]",
        "spec.delivery_mode",
        "spec.ack_timeout_minutes",
        "spec.dedup_window_seconds",
        "spec.max_attempts",
    ]


# -- content_hash -------------------------------------------------------------------------


def test_content_hash_known_value_and_stability() -> None:
    expected = hashlib.sha256(
        b'{"ack_timeout_minutes":15,"channels":["slack","webhook"],'
        b'"dedup_window_seconds":60,"delivery_mode":"BEST_EFFORT","max_attempts":3,'
        b'"priority":"HIGH","require_ack":true}'
    ).hexdigest()
    assert content_hash(spec()) == expected
    # Equal content built differently hashes equally.
    rebuilt = PolicySpec.build(
        ["slack", "webhook", "slack"], DeliveryMode.BEST_EFFORT, True, 15, Priority.HIGH, 60, 3
    )
    assert content_hash(rebuilt) == expected
    assert content_hash(PolicySpec.from_json(spec().to_json())) == expected


SPEC_CHANGES: dict[str, Any] = {
    "channels": ("webhook", "slack"),
    "delivery_mode": DeliveryMode.GUARANTEED,
    "require_ack": False,
    "ack_timeout_minutes": 16,
    "priority": Priority.CRITICAL,
    "dedup_window_seconds": 61,
    "max_attempts": 4,
    "quiet_hours": QuietHours("Europe/Paris", time(22), time(7)),
    "reminder": Reminder(timedelta(minutes=5), 2.0, 3),
    "escalation": (EscalationStep(timedelta(minutes=10), ("pagerduty",)),),
    "targets": (Target(recipient_id="alice"), Target(rotation_id="primary")),
    "escalation_loops": 2,
    "allowed_principals": ("alice",),
    "rules": (RoutingRule.parse("metadata.cluster = prod", ("pagerduty",)),),
    "urgency": Urgency.HIGH,
    "templates": (Template(channel_type="ntfy", title="[{{ source }}] {{ title }}"),),
}
# Left out of the canonical JSON when unset (older revisions keep their hash).
OPTIONAL = {
    "quiet_hours",
    "reminder",
    "escalation",
    "targets",
    "escalation_loops",
    "allowed_principals",
    "rules",
    "urgency",
    "templates",
}


def test_time_blocks_round_trip_and_are_left_out_when_unset() -> None:
    full = spec(**{k: SPEC_CHANGES[k] for k in OPTIONAL})
    assert PolicySpec.from_json(full.to_json()) == full
    assert full.to_json()["quiet_hours"] == {
        "time_zone": "Europe/Paris",
        "start": "22:00",
        "end": "07:00",
    }
    # Revisions written before the blocks existed keep their content hash.
    assert set(spec().to_json()) == set(SPEC_CHANGES) - OPTIONAL


@pytest.mark.parametrize(
    ("changes", "bad"),
    [
        ({"reminder": Reminder(timedelta(0), 2.0, 3)}, ["spec.reminder.first_after"]),
        (
            {"reminder": Reminder(timedelta(minutes=1), 0.5, 0)},
            ["spec.reminder.multiplier", "spec.reminder.max_count"],
        ),
        (
            {"reminder": Reminder(timedelta(minutes=1), 2.0, 3), "require_ack": False},
            ["spec.reminder"],
        ),
        (
            {"escalation": [EscalationStep(timedelta(hours=2), ("p",))]},
            ["spec.escalation[0].after"],
        ),
        (
            {"escalation": [EscalationStep(timedelta(minutes=1), ())]},
            ["spec.escalation[0].channels"],
        ),
        (
            {"escalation": [EscalationStep(timedelta(minutes=1), ("P!",))]},
            ["spec.escalation[0].channels[0]"],
        ),
        (
            {"quiet_hours": {"time_zone": "Nowhere/City", "start": "22:00", "end": "07:00"}},
            ["spec.quiet_hours.time_zone"],
        ),
    ],
)
def test_time_blocks_are_validated(changes: dict[str, Any], bad: list[str]) -> None:
    args: dict[str, Any] = {"require_ack": True, "ack_timeout_minutes": 60, **changes}
    with pytest.raises(InvalidRequest) as exc:
        PolicySpec.build(["log"], DeliveryMode.GUARANTEED, **args)
    assert [v.field for v in exc.value.violations] == bad


def test_spec_change_table_covers_every_field() -> None:
    assert set(SPEC_CHANGES) == {f.name for f in fields(PolicySpec)}


@pytest.mark.parametrize(("field", "value"), SPEC_CHANGES.items())
def test_content_hash_depends_on_every_field(field: str, value: Any) -> None:
    assert content_hash(spec(**{field: value})) != content_hash(spec())


LOG_DEFAULTS = ServerDefaults(channels=("log",))  # scripts/serve's --default-channels log


def test_default_build_hash_matches_server_defaults() -> None:
    d = LOG_DEFAULTS
    built = PolicySpec.build(list(d.channels), d.delivery_mode, d.require_ack)
    assert resolve(request(), None, d).effective_hash == content_hash(built)


# -- resolve ------------------------------------------------------------------------------


def test_without_policy_or_default_channels_the_type_is_refused() -> None:
    with pytest.raises(NoPolicy) as refused:
        resolve(request(notification_type="dmeo.alert"), None, ServerDefaults())
    assert refused.value.reason == "NO_POLICY"
    assert refused.value.metadata == {"notification_type": "dmeo.alert"}
    assert "'dmeo.alert'" in refused.value.message


def test_defaults_apply_without_policy() -> None:
    eff = resolve(request(), None, LOG_DEFAULTS)
    assert eff == EffectivePolicy(
        channels=("log",),
        delivery_mode=DeliveryMode.GUARANTEED,
        require_ack=False,
        ack_timeout_minutes=60,
        priority=Priority.NORMAL,
        dedup_window_seconds=300,
        max_attempts=5,
        policy_id=None,
        policy_revision=0,
        policy_hash=None,
        effective_hash=eff.effective_hash,
    )
    assert len(eff.effective_hash) == 64


def test_configured_defaults_apply_without_policy() -> None:
    defaults = ServerDefaults(channels=("webhook",), max_attempts=9, dedup_window_seconds=10)
    eff = resolve(request(), None, defaults)
    assert (eff.channels, eff.max_attempts, eff.dedup_window_seconds) == (("webhook",), 9, 10)


@pytest.mark.parametrize(
    ("declared", "expected"),
    [
        ({"delivery_mode": DeliveryMode.BEST_EFFORT}, {"delivery_mode": DeliveryMode.BEST_EFFORT}),
        ({"require_ack": True}, {"require_ack": True}),
        ({"require_ack": False}, {"require_ack": False}),
        ({"priority": Priority.CRITICAL}, {"priority": Priority.CRITICAL}),
        (
            {
                "delivery_mode": DeliveryMode.BEST_EFFORT,
                "require_ack": True,
                "priority": Priority.LOW,
            },
            {
                "delivery_mode": DeliveryMode.BEST_EFFORT,
                "require_ack": True,
                "priority": Priority.LOW,
            },
        ),
    ],
)
def test_declared_values_override_defaults_without_policy(
    declared: dict[str, Any], expected: dict[str, Any]
) -> None:
    eff = resolve(request(**declared), None, LOG_DEFAULTS)
    defaults = resolve(request(), None, LOG_DEFAULTS)
    assert eff == replace(defaults, **expected, effective_hash=eff.effective_hash)
    assert eff.effective_hash == content_hash(eff.spec)


def test_active_policy_applies() -> None:
    eff = resolve(request(), revision(), ServerDefaults())
    assert eff == EffectivePolicy(
        channels=("slack", "webhook"),
        delivery_mode=DeliveryMode.BEST_EFFORT,
        require_ack=True,
        ack_timeout_minutes=15,
        priority=Priority.HIGH,
        dedup_window_seconds=60,
        max_attempts=3,
        policy_id="pol-1",
        policy_revision=2,
        policy_hash=content_hash(spec()),
        effective_hash=content_hash(spec()),
    )


def test_an_active_revision_is_resolved_once_and_only_for_its_own_spec() -> None:
    first = resolve(request(), revision(), ServerDefaults())
    assert resolve(request(), revision(), ServerDefaults()) is first  # memoised
    # The same id, number and hash over another spec (no store makes one; a test can):
    # the memo answers for the spec it was computed from, never for another.
    other = revision(spec(max_attempts=9), content_hash=content_hash(spec()))
    assert resolve(request(), other, ServerDefaults()).max_attempts == 9
    assert resolve(request(), revision(), ServerDefaults()) == first


@pytest.mark.parametrize(
    "declared",
    [
        {"delivery_mode": DeliveryMode.BEST_EFFORT},
        {"require_ack": True},
        {"priority": Priority.HIGH},
        {"delivery_mode": DeliveryMode.BEST_EFFORT, "require_ack": True, "priority": Priority.HIGH},
    ],
)
def test_equal_declared_values_are_accepted_with_policy(declared: dict[str, Any]) -> None:
    assert resolve(request(**declared), revision(), ServerDefaults()) == resolve(
        request(), revision(), ServerDefaults()
    )


@pytest.mark.parametrize(
    ("declared", "field", "shown", "policy_value"),
    [
        ({"delivery_mode": DeliveryMode.GUARANTEED}, "delivery_mode", "GUARANTEED", "BEST_EFFORT"),
        ({"require_ack": False}, "require_ack", "false", "true"),
        ({"priority": Priority.NORMAL}, "priority", "NORMAL", "HIGH"),
    ],
)
def test_conflicting_declared_value_is_a_policy_override(
    declared: dict[str, Any], field: str, shown: str, policy_value: str
) -> None:
    with pytest.raises(PolicyOverride) as exc:
        resolve(request(**declared), revision(), ServerDefaults())
    assert exc.value.reason == "POLICY_OVERRIDE"
    assert exc.value.metadata == {
        "field": field,
        "declared": shown,
        "policy_value": policy_value,
        "notification_type": "trading.circuit_breaker",
        "policy_id": "pol-1",
        "policy_revision": "2",
    }
    assert [v.field for v in exc.value.violations] == [field]
    assert shown in exc.value.message and policy_value in exc.value.message


def test_override_lists_every_conflict_and_names_the_first() -> None:
    req = request(
        delivery_mode=DeliveryMode.BEST_EFFORT,  # equal: fine
        require_ack=False,
        priority=Priority.LOW,
    )
    with pytest.raises(PolicyOverride) as exc:
        resolve(req, revision(), ServerDefaults())
    assert exc.value.metadata["field"] == "require_ack"
    assert exc.value.violations == (
        FieldViolation("require_ack", "must be unset or true (ACTIVE policy)"),
        FieldViolation("priority", "must be unset or HIGH (ACTIVE policy)"),
    )


def test_override_of_false_require_ack_policy() -> None:
    rev = revision(spec(require_ack=False))
    assert resolve(request(require_ack=False), rev, ServerDefaults()).require_ack is False
    with pytest.raises(PolicyOverride):
        resolve(request(require_ack=True), rev, ServerDefaults())


@pytest.mark.parametrize(
    "rev",
    [
        revision(active=False),
        revision(notification_type="other.type"),
    ],
)
def test_resolve_refuses_a_revision_that_is_not_the_active_one(rev: PolicyRevision) -> None:
    with pytest.raises(ValueError):
        resolve(request(), rev, ServerDefaults())


def test_effective_hash_ignores_policy_id_and_revision() -> None:
    a = resolve(request(), revision(), ServerDefaults())
    b = resolve(
        request(), revision(policy_id="pol-9", revision=7, content_hash="x"), ServerDefaults()
    )
    assert a.effective_hash == b.effective_hash
    assert (a.policy_id, a.policy_revision) != (b.policy_id, b.policy_revision)


def test_defaults_and_policy_with_equal_values_share_the_effective_hash() -> None:
    d = LOG_DEFAULTS
    same = PolicySpec(
        d.channels,
        d.delivery_mode,
        d.require_ack,
        d.ack_timeout_minutes,
        d.priority,
        d.dedup_window_seconds,
        d.max_attempts,
    )
    with_policy = resolve(request(), revision(same), d)
    without = resolve(request(), None, d)
    assert with_policy.effective_hash == without.effective_hash
    assert with_policy.policy_hash is not None and without.policy_hash is None


# Routing rules are not an effective value: the one that matches is applied (its
# channels, targets, urgency), which tests/domain/test_routing_rules.py checks.
@pytest.mark.parametrize(
    ("field", "value"), [(k, v) for k, v in SPEC_CHANGES.items() if k != "rules"]
)
def test_effective_hash_depends_on_every_effective_value(field: str, value: Any) -> None:
    changed = resolve(request(), revision(spec(**{field: value})), ServerDefaults())
    assert changed.effective_hash != resolve(request(), revision(), ServerDefaults()).effective_hash


# -- JSON round trip ----------------------------------------------------------------------


def test_effective_policy_json_round_trip() -> None:
    for eff in (
        resolve(request(), revision(), ServerDefaults()),
        resolve(request(priority=Priority.LOW), None, LOG_DEFAULTS),
    ):
        data = eff.to_json()
        assert EffectivePolicy.from_json(data) == eff
        # The matched rule, like the optional blocks, only when there is one.
        matched = {"matched_rule", "matched_rule_filter"}
        assert set(data) == {f.name for f in fields(EffectivePolicy)} - OPTIONAL - matched
    data = resolve(request(), None, LOG_DEFAULTS).to_json()
    assert data == {
        "channels": ["log"],
        "delivery_mode": "GUARANTEED",
        "require_ack": False,
        "ack_timeout_minutes": 60,
        "priority": "NORMAL",
        "dedup_window_seconds": 300,
        "max_attempts": 5,
        "policy_id": None,
        "policy_revision": 0,
        "policy_hash": None,
        "effective_hash": data["effective_hash"],
    }


def test_an_effective_policys_json_is_built_once_and_each_caller_gets_its_own() -> None:
    eff = resolve(request(), revision(), ServerDefaults())
    first = eff.to_json()
    first["policy_id"] = "changed by a caller"  # the top level is the caller's own
    again = eff.to_json()
    assert again["policy_id"] == eff.policy_id and again is not first
    assert again["channels"] is eff.to_json()["channels"]  # built once, shared below
    assert resolve(request(), revision(), ServerDefaults()) is eff  # one per ACTIVE revision


def test_from_json_keeps_the_frozen_effective_hash() -> None:
    data = resolve(request(), revision(), ServerDefaults()).to_json() | {"effective_hash": "f" * 64}
    assert EffectivePolicy.from_json(data).effective_hash == "f" * 64

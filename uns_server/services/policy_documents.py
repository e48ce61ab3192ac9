"""Policy files (``uns-admin policies put --file``): documents to validated inputs.

A document has the shape of ``uns.v1.PolicySpec`` as JSON/YAML; enum values are names,
with or without their wire prefix. Every problem is reported at once, under the field
it concerns. :func:`revision_to_json` is the matching plain view of a revision.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from enum import StrEnum
from typing import Any, TypeVar

from uns_server.domain.enums import DeliveryMode, Priority, Urgency
from uns_server.domain.errors import FieldViolation, InvalidRequest
from uns_server.domain.policy import PolicyRevision, PolicySpec
from uns_server.domain.policy.rules import RoutingRule
from uns_server.domain.schedule import EscalationStep, Reminder
from uns_server.domain.targets import Target
from uns_server.domain.templates import Template
from uns_server.domain.validation import _notification_type
from uns_server.services.policies import PolicyInput

E = TypeVar("E", bound=StrEnum)

_SPEC_FIELDS = (
    "channels",
    "delivery_mode",
    "require_ack",
    "ack_timeout_minutes",
    "priority",
    "dedup_window_seconds",
    "max_attempts",
    "quiet_hours",
    "reminder",
    "escalation",
    "targets",
    "escalation_loops",
    "allowed_principals",
    "rules",
    "urgency",
    "templates",
)


def inputs_from_document(document: Any) -> list[PolicyInput]:
    """``{notification_type, spec}`` or a list of them -> validated inputs.

    Enum values are names, with or without their wire prefix (``GUARANTEED`` or
    ``DELIVERY_MODE_GUARANTEED``). Raises ``InvalidRequest`` listing every problem,
    fields named ``[i].spec.channels`` etc. for lists.
    """
    entries = document if isinstance(document, list) else [document]
    if not entries:
        raise InvalidRequest.of_field("policies", "the file holds no policy")
    many = isinstance(document, list)
    violations: list[FieldViolation] = []
    inputs: list[PolicyInput] = []
    for i, entry in enumerate(entries):
        at = f"[{i}]." if many else ""
        try:
            inputs.append(_input_from_entry(entry, at))
        except InvalidRequest as exc:
            violations.extend(exc.violations)
    if violations:
        fields = ",".join(dict.fromkeys(v.field for v in violations))
        raise InvalidRequest(
            "; ".join(f"{v.field}: {v.description}" for v in violations),
            metadata={"fields": fields},
            violations=violations,
        )
    return inputs


def _input_from_entry(entry: Any, at: str) -> PolicyInput:
    if not isinstance(entry, Mapping):
        raise InvalidRequest.of_field(
            at.rstrip(".") or "policy", "must be a mapping {notification_type, spec}"
        )
    violations: list[FieldViolation] = []
    unknown = sorted(set(entry) - {"notification_type", "spec"})
    violations += [FieldViolation(f"{at}{k}", "unknown field") for k in unknown]
    notification_type = entry.get("notification_type")
    if not isinstance(notification_type, str):
        violations.append(FieldViolation(f"{at}notification_type", "must be a string"))
    else:
        violations += [
            FieldViolation(f"{at}notification_type", p)
            for p in _notification_type(notification_type)
        ]
    spec: PolicySpec | None = None
    raw = entry.get("spec")
    if not isinstance(raw, Mapping):
        violations.append(FieldViolation(f"{at}spec", "must be a mapping"))
    else:
        try:
            spec = spec_from_mapping(raw)
        except InvalidRequest as exc:
            violations += [FieldViolation(at + v.field, v.description) for v in exc.violations]
    if violations or spec is None or not isinstance(notification_type, str):
        raise InvalidRequest(violations=violations)
    return PolicyInput(notification_type, spec)


def spec_from_mapping(raw: Mapping[str, Any]) -> PolicySpec:
    """A JSON/YAML spec -> ``PolicySpec.build`` (fields named ``spec.<field>``)."""
    violations: list[FieldViolation] = [
        FieldViolation(f"spec.{k}", "unknown field") for k in sorted(set(raw) - set(_SPEC_FIELDS))
    ]
    channels = raw.get("channels", [])
    if isinstance(channels, str) or not isinstance(channels, list):
        violations.append(FieldViolation("spec.channels", "must be a list of channel names"))
        channels = []
    elif not all(isinstance(c, str) for c in channels):
        violations.append(FieldViolation("spec.channels", "must be a list of channel names"))
        channels = [str(c) for c in channels]
    delivery_mode = _enum(raw, "delivery_mode", DeliveryMode, "DELIVERY_MODE_", violations)
    priority = _enum(raw, "priority", Priority, "PRIORITY_", violations)
    require_ack = raw.get("require_ack", False)
    if not isinstance(require_ack, bool):
        violations.append(FieldViolation("spec.require_ack", "must be true or false"))
        require_ack = False
    numbers: dict[str, int] = {}
    for name in ("ack_timeout_minutes", "dedup_window_seconds", "max_attempts"):
        value = raw.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, int):
            violations.append(FieldViolation(f"spec.{name}", "must be an integer"))
            value = 0
        numbers[name] = value
    quiet_hours = _quiet_hours(raw.get("quiet_hours"), violations)
    reminder = _reminder(raw.get("reminder"), violations)
    escalation = _escalation(raw.get("escalation"), violations)
    targets = _targets(raw.get("targets"), "spec.targets", violations)
    principals = raw.get("allowed_principals", [])
    if not isinstance(principals, list) or not all(isinstance(p, str) for p in principals):
        violations.append(
            FieldViolation("spec.allowed_principals", "must be a list of principal names")
        )
        principals = []
    rules = _rules(raw.get("rules"), violations)
    templates = _templates(raw.get("templates"), violations)
    urgency = _enum(raw, "urgency", Urgency, "URGENCY_", violations)
    loops = raw.get("escalation_loops", 0)
    if isinstance(loops, bool) or not isinstance(loops, int):
        violations.append(FieldViolation("spec.escalation_loops", "must be an integer"))
        loops = 0
    try:
        spec = PolicySpec.build(
            channels,
            delivery_mode,
            require_ack,
            priority=priority,
            ack_timeout_minutes=numbers["ack_timeout_minutes"],
            dedup_window_seconds=numbers["dedup_window_seconds"],
            max_attempts=numbers["max_attempts"],
            quiet_hours=quiet_hours,
            reminder=reminder,
            escalation=escalation,
            targets=targets,
            escalation_loops=loops,
            allowed_principals=principals,
            rules=rules,
            urgency=urgency,
            templates=templates,
        )
    except InvalidRequest as exc:
        # delivery_mode is reported once, by _enum, when it was present but wrong.
        seen = {v.field for v in violations}
        violations += [v for v in exc.violations if v.field not in seen]
    if violations:
        fields = ",".join(dict.fromkeys(v.field for v in violations))
        raise InvalidRequest(metadata={"fields": fields}, violations=violations)
    return spec


def _quiet_hours(value: Any, violations: list[FieldViolation]) -> dict[str, str] | None:
    """``{time_zone, start, end}`` (times as "HH:MM" text; validated by the domain)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        violations.append(FieldViolation("spec.quiet_hours", "must be {time_zone, start, end}"))
        return None
    violations += [
        FieldViolation(f"spec.quiet_hours.{k}", "unknown field")
        for k in sorted(set(value) - {"time_zone", "start", "end"})
    ]
    out = {}
    for name in ("time_zone", "start", "end"):
        item = value.get(name, "")
        if isinstance(item, int) and name != "time_zone":  # YAML 1.1 reads 22:00 as 1320
            item = f"{item // 60:02d}:{item % 60:02d}"
        if not isinstance(item, str):
            violations.append(FieldViolation(f"spec.quiet_hours.{name}", "must be text"))
            item = ""
        out[name] = item
    return out


def _reminder(value: Any, violations: list[FieldViolation]) -> Reminder | None:
    """``{first_after, multiplier, max_count}``; durations as in :func:`parse_duration`."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        violations.append(
            FieldViolation("spec.reminder", "must be {first_after, multiplier, max_count}")
        )
        return None
    violations += [
        FieldViolation(f"spec.reminder.{k}", "unknown field")
        for k in sorted(set(value) - {"first_after", "multiplier", "max_count"})
    ]
    first_after = _duration(value.get("first_after"), "spec.reminder.first_after", violations)
    multiplier = value.get("multiplier", 1)
    if isinstance(multiplier, bool) or not isinstance(multiplier, int | float):
        violations.append(FieldViolation("spec.reminder.multiplier", "must be a number"))
        multiplier = 1
    max_count = value.get("max_count", 1)
    if isinstance(max_count, bool) or not isinstance(max_count, int):
        violations.append(FieldViolation("spec.reminder.max_count", "must be an integer"))
        max_count = 1
    if first_after is None:
        return None
    return Reminder(first_after, float(multiplier or 1), max_count)


def _rules(value: Any, violations: list[FieldViolation]) -> list[RoutingRule]:
    """``[{filter, channels, targets, urgency}]`` (filters parsed by the domain)."""
    if value is None:
        return []
    if not isinstance(value, list):
        violations.append(FieldViolation("spec.rules", "must be a list of {filter, channels}"))
        return []
    rules = []
    for i, item in enumerate(value):
        at = f"spec.rules[{i}]"
        if not isinstance(item, Mapping):
            violations.append(FieldViolation(at, "must be {filter, channels, targets, urgency}"))
            continue
        violations += [
            FieldViolation(f"{at}.{k}", "unknown field")
            for k in sorted(set(item) - {"filter", "channels", "targets", "urgency"})
        ]
        text = item.get("filter", "")
        if not isinstance(text, str):
            violations.append(FieldViolation(f"{at}.filter", "must be text"))
            text = ""
        channels = item.get("channels", [])
        if not isinstance(channels, list) or not all(isinstance(c, str) for c in channels):
            violations.append(FieldViolation(f"{at}.channels", "must be a list of channel names"))
            channels = []
        targets = _targets(item.get("targets"), f"{at}.targets", violations)
        urgency = _enum(item, "urgency", Urgency, "URGENCY_", violations, at=at)
        rules.append(RoutingRule(text, tuple(channels), targets, urgency))
    return rules


_TEMPLATE_FIELDS = ("channel_type", "locale", "title", "body")


def _templates(value: Any, violations: list[FieldViolation]) -> list[Template]:
    """``[{channel_type, locale, title, body}]`` (compiled by the domain)."""
    if value is None:
        return []
    if not isinstance(value, list):
        violations.append(FieldViolation("spec.templates", "must be a list of templates"))
        return []
    out = []
    for i, item in enumerate(value):
        at = f"spec.templates[{i}]"
        if not isinstance(item, Mapping):
            violations.append(FieldViolation(at, "must be {channel_type, locale, title, body}"))
            continue
        violations += [
            FieldViolation(f"{at}.{k}", "unknown field")
            for k in sorted(set(item) - set(_TEMPLATE_FIELDS))
        ]
        texts = {k: item.get(k, "") for k in _TEMPLATE_FIELDS}
        bad = [k for k, v in texts.items() if not isinstance(v, str)]
        violations += [FieldViolation(f"{at}.{k}", "must be text") for k in bad]
        out.append(Template(**{k: "" if k in bad else v for k, v in texts.items()}))
    return out


def _targets(value: Any, field: str, violations: list[FieldViolation]) -> tuple[Target, ...]:
    """``[{recipient_id: alice}, {rotation_id: primary}]`` (shape checked by the domain)."""
    if value is None:
        return ()
    if not isinstance(value, list):
        violations.append(
            FieldViolation(field, "must be a list of {recipient_id} or {rotation_id}")
        )
        return ()
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, Mapping) or not all(isinstance(v, str) for v in item.values()):
            violations.append(
                FieldViolation(f"{field}[{i}]", "must be {recipient_id} or {rotation_id}")
            )
            continue
        violations += [
            FieldViolation(f"{field}[{i}].{k}", "unknown field")
            for k in sorted(set(item) - {"recipient_id", "rotation_id"})
        ]
        out.append(Target(item.get("recipient_id", ""), item.get("rotation_id", "")))
    return tuple(dict.fromkeys(out))


def _escalation(value: Any, violations: list[FieldViolation]) -> list[EscalationStep]:
    """``[{after, channels, targets}]``."""
    if value is None:
        return []
    if not isinstance(value, list):
        violations.append(FieldViolation("spec.escalation", "must be a list of {after, channels}"))
        return []
    steps = []
    for i, item in enumerate(value):
        at = f"spec.escalation[{i}]"
        if not isinstance(item, Mapping):
            violations.append(FieldViolation(at, "must be {after, channels}"))
            continue
        violations += [
            FieldViolation(f"{at}.{k}", "unknown field")
            for k in sorted(set(item) - {"after", "channels", "targets"})
        ]
        after = _duration(item.get("after"), f"{at}.after", violations)
        channels = item.get("channels", [])
        if not isinstance(channels, list) or not all(isinstance(c, str) for c in channels):
            violations.append(FieldViolation(f"{at}.channels", "must be a list of channel names"))
            channels = []
        targets = _targets(item.get("targets"), f"{at}.targets", violations)
        if after is not None:
            steps.append(EscalationStep(after, tuple(dict.fromkeys(channels)), targets))
    return steps


_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: Any) -> timedelta | None:
    """Seconds as a number, or text: ``"90s"``, ``"15m"``, ``"2h"``, ``"1d"`` (also the
    protobuf JSON form ``"900s"``, and fractions such as ``"1.5h"``). None if unreadable."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return timedelta(seconds=value)
    if isinstance(value, str) and len(value) > 1 and value[-1] in _DURATION_UNITS:
        try:
            return timedelta(seconds=float(value[:-1]) * _DURATION_UNITS[value[-1]])
        except (ValueError, OverflowError):
            return None
    return None


def _duration(value: Any, field: str, violations: list[FieldViolation]) -> timedelta | None:
    duration = parse_duration(value)
    if duration is None:
        violations.append(
            FieldViolation(field, 'must be a duration: seconds, or "90s", "15m", "2h", "1d"')
        )
    return duration


def _enum(
    raw: Mapping[str, Any],
    name: str,
    cls: type[E],
    prefix: str,
    violations: list[FieldViolation],
    *,
    at: str = "spec",
) -> E | None:
    value = raw.get(name)
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return cls(value.strip().upper().removeprefix(prefix))
        except ValueError:
            pass
    choices = ", ".join(m.value for m in cls)
    violations.append(FieldViolation(f"{at}.{name}", f"must be one of {choices}"))
    return None


def revision_to_json(revision: PolicyRevision) -> dict[str, Any]:
    """A plain JSON view of a revision (uns-admin output)."""
    return {
        "policy_id": revision.policy_id,
        "notification_type": revision.notification_type,
        "revision": revision.revision,
        "state": "ACTIVE" if revision.active else "INACTIVE",
        "spec": revision.spec.to_json(),
        "content_hash": revision.content_hash,
        "created_by": revision.created_by,
        "create_time": revision.created_at.isoformat(),
        "activate_time": revision.activated_at.isoformat() if revision.activated_at else None,
    }

"""A policy revision's content: its values, their validation and defaults, its hash.

:meth:`PolicySpec.build` checks operator input and fills in the documented defaults;
:func:`content_hash` is the SHA-256 of the canonical JSON, so equal content has an
equal hash whatever revision holds it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from uns_server.domain.digests import sha256_hex
from uns_server.domain.enums import DeliveryMode, Priority, Urgency
from uns_server.domain.errors import FieldViolation, InvalidRequest
from uns_server.domain.fields import text_problems
from uns_server.domain.policy.rules import RULES_MAX, RoutingRule, rule_violations
from uns_server.domain.schedule import (
    ESCALATION_LOOPS_MAX,
    ESCALATION_STEPS_MAX,
    EscalationStep,
    QuietHours,
    Reminder,
    Timing,
    reminder_violations,
)
from uns_server.domain.targets import (
    Target,
    target_violations,
    targets_from_json,
    targets_json,
)
from uns_server.domain.templates import Template, canonical_templates, template_violations

ACK_TIMEOUT_MINUTES_DEFAULT = 60
ACK_TIMEOUT_MINUTES_MAX = 10080
DEDUP_WINDOW_SECONDS_DEFAULT = 300
DEDUP_WINDOW_SECONDS_MAX = 86400
MAX_ATTEMPTS_DEFAULT = 5
MAX_ATTEMPTS_MAX = 100
PRIORITY_DEFAULT = Priority.NORMAL
DELIVERY_MODE_DEFAULT = DeliveryMode.GUARANTEED

_CHANNEL = re.compile(r"[a-z0-9_-]{1,64}")
# Channels one policy may list. Real policies name a handful; a 1 MiB request holds
# ~100k names, and checking and storing them held the event loop for 200+ ms.
CHANNELS_MAX = 64
ALLOWED_PRINCIPALS_MAX = 100
PRINCIPAL_MAX_CHARS = 255
"""A principal's name, as the keys' and notifications' ``principal`` columns hold it."""


@dataclass(frozen=True)
class PolicySpec:
    """The content of a policy revision, defaults filled in (``uns.v1.PolicySpec``)."""

    channels: tuple[str, ...]
    delivery_mode: DeliveryMode
    require_ack: bool
    ack_timeout_minutes: int
    priority: Priority
    dedup_window_seconds: int
    max_attempts: int
    # The obligation over time (``domain.schedule``); absent from ``to_json`` when
    # unset, so revisions written before them keep their content hash.
    quiet_hours: QuietHours | None = None
    reminder: Reminder | None = None
    escalation: tuple[EscalationStep, ...] = ()
    # People and on-call (SPEC §6); absent from ``to_json`` when unset, as above.
    targets: tuple[Target, ...] = ()
    escalation_loops: int = 0
    # Who may send this type (empty: anyone); absent from ``to_json`` when empty.
    allowed_principals: tuple[str, ...] = ()
    # What the message says and where it goes (SPEC §7); absent from ``to_json`` when
    # unset. An effective policy has no rules: the matched one is applied.
    rules: tuple[RoutingRule, ...] = ()
    urgency: Urgency | None = None
    templates: tuple[Template, ...] = ()

    def allows(self, principal: str) -> bool:
        """Whether ``principal`` may send notifications of this type."""
        return not self.allowed_principals or principal in self.allowed_principals

    @classmethod
    def build(
        cls,
        channels: Sequence[str],
        delivery_mode: DeliveryMode | None,
        require_ack: bool,
        ack_timeout_minutes: int = 0,
        priority: Priority | None = None,
        dedup_window_seconds: int = 0,
        max_attempts: int = 0,
        *,
        quiet_hours: Mapping[str, str] | None = None,
        reminder: Reminder | None = None,
        escalation: Sequence[EscalationStep] = (),
        targets: Sequence[Target] = (),
        escalation_loops: int = 0,
        allowed_principals: Sequence[str] = (),
        rules: Sequence[RoutingRule] = (),
        urgency: Urgency | None = None,
        templates: Sequence[Template] = (),
    ) -> PolicySpec:
        """Validate operator input and fill in the documented defaults.

        Zero means the default (60 minutes, 300 seconds, 5 attempts), ``None`` priority
        means NORMAL; duplicate channels are dropped, first occurrence wins. Quiet hours
        come as ``{time_zone, start, end}`` text. Reminders and escalation steps need
        ``require_ack`` and must fall before the ack deadline. A policy needs
        ``channels`` or ``targets`` (a step and a routing rule likewise); whether a
        target exists is checked on the database (``services.policies``). ``rules``
        come unparsed (their filters are parsed here). Raises ``InvalidRequest``
        listing every problem under ``spec.<field>``.
        """
        violations: list[FieldViolation] = []
        parsed_rules, problems = _parse_rules(rules)
        violations += problems
        violations += template_violations(templates)
        quiet: QuietHours | None = None
        if quiet_hours is not None:
            quiet, problems = QuietHours.parse(
                quiet_hours.get("time_zone", ""),
                quiet_hours.get("start", ""),
                quiet_hours.get("end", ""),
                "spec.quiet_hours",
            )
            violations += problems
        violations += _follow_up_violations(
            require_ack,
            timedelta(minutes=ack_timeout_minutes or ACK_TIMEOUT_MINUTES_DEFAULT),
            reminder,
            escalation,
        )
        violations += target_violations(targets, "spec.targets")
        if not 0 <= escalation_loops <= ESCALATION_LOOPS_MAX:
            violations.append(
                FieldViolation(
                    "spec.escalation_loops", f"must be between 0 and {ESCALATION_LOOPS_MAX}"
                )
            )
        elif escalation_loops and not escalation:
            violations.append(FieldViolation("spec.escalation_loops", "needs escalation steps"))
        violations += _principals_violations(allowed_principals)
        if not channels and not targets:
            violations.append(
                FieldViolation("spec.channels", "at least one channel or target is required")
            )
        if len(channels) > CHANNELS_MAX:
            violations.append(
                FieldViolation("spec.channels", f"must list at most {CHANNELS_MAX} channels")
            )
            channels = ()  # not checked one by one
        for i, name in enumerate(channels):
            if _CHANNEL.fullmatch(name) is None:
                violations.append(
                    FieldViolation(f"spec.channels[{i}]", "must be 1-64 characters of [a-z0-9_-]")
                )
        if delivery_mode is None:
            violations.append(FieldViolation("spec.delivery_mode", "is required"))
        ranges = (
            ("spec.ack_timeout_minutes", ack_timeout_minutes, ACK_TIMEOUT_MINUTES_MAX),
            ("spec.dedup_window_seconds", dedup_window_seconds, DEDUP_WINDOW_SECONDS_MAX),
            ("spec.max_attempts", max_attempts, MAX_ATTEMPTS_MAX),
        )
        for field, value, maximum in ranges:
            if not 0 <= value <= maximum:
                violations.append(
                    FieldViolation(field, f"must be between 1 and {maximum} (0 for the default)")
                )
        if violations or delivery_mode is None:
            fields = ",".join(dict.fromkeys(v.field for v in violations))
            raise InvalidRequest(metadata={"fields": fields}, violations=violations)
        return cls(
            channels=tuple(dict.fromkeys(channels)),
            delivery_mode=delivery_mode,
            require_ack=require_ack,
            ack_timeout_minutes=ack_timeout_minutes or ACK_TIMEOUT_MINUTES_DEFAULT,
            priority=PRIORITY_DEFAULT if priority is None else priority,
            dedup_window_seconds=dedup_window_seconds or DEDUP_WINDOW_SECONDS_DEFAULT,
            max_attempts=max_attempts or MAX_ATTEMPTS_DEFAULT,
            quiet_hours=quiet,
            reminder=reminder,
            escalation=tuple(escalation),
            targets=tuple(dict.fromkeys(targets)),
            escalation_loops=escalation_loops,
            allowed_principals=tuple(dict.fromkeys(allowed_principals)),
            rules=parsed_rules,
            urgency=urgency,
            templates=canonical_templates(templates),
        )

    def to_json(self) -> dict[str, Any]:
        """Plain JSON object: snake_case keys, enums by value; the time blocks only
        when set."""
        out: dict[str, Any] = {
            "channels": list(self.channels),
            "delivery_mode": self.delivery_mode.value,
            "require_ack": self.require_ack,
            "ack_timeout_minutes": self.ack_timeout_minutes,
            "priority": self.priority.value,
            "dedup_window_seconds": self.dedup_window_seconds,
            "max_attempts": self.max_attempts,
        }
        if self.quiet_hours is not None:
            out["quiet_hours"] = self.quiet_hours.to_json()
        if self.reminder is not None:
            out["reminder"] = self.reminder.to_json()
        if self.escalation:
            out["escalation"] = [step.to_json() for step in self.escalation]
        if self.targets:
            out["targets"] = targets_json(self.targets)
        if self.escalation_loops:
            out["escalation_loops"] = self.escalation_loops
        if self.allowed_principals:
            out["allowed_principals"] = list(self.allowed_principals)
        if self.rules:
            out["rules"] = [rule.to_json() for rule in self.rules]
        if self.urgency is not None:
            out["urgency"] = self.urgency.value
        if self.templates:
            out["templates"] = [t.to_json() for t in self.templates]
        return out

    @property
    def timing(self) -> Timing:
        """What ``domain.schedule`` needs to plan this policy's timeline."""
        return Timing(
            channels=self.channels,
            require_ack=self.require_ack,
            ack_timeout=timedelta(minutes=self.ack_timeout_minutes),
            quiet=self.quiet_hours,
            reminder=self.reminder,
            escalation=self.escalation,
            targets=self.targets,
            escalation_loops=self.escalation_loops,
        )

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PolicySpec:
        """Inverse of :meth:`to_json` (trusted, already validated content)."""
        return cls(
            channels=tuple(data["channels"]),
            delivery_mode=DeliveryMode(data["delivery_mode"]),
            require_ack=bool(data["require_ack"]),
            ack_timeout_minutes=int(data["ack_timeout_minutes"]),
            priority=Priority(data["priority"]),
            dedup_window_seconds=int(data["dedup_window_seconds"]),
            max_attempts=int(data["max_attempts"]),
            quiet_hours=(
                QuietHours.from_json(data["quiet_hours"]) if data.get("quiet_hours") else None
            ),
            reminder=Reminder.from_json(data["reminder"]) if data.get("reminder") else None,
            escalation=tuple(EscalationStep.from_json(s) for s in data.get("escalation") or ()),
            targets=targets_from_json(data.get("targets")),
            escalation_loops=int(data.get("escalation_loops") or 0),
            allowed_principals=tuple(data.get("allowed_principals") or ()),
            rules=tuple(RoutingRule.from_json(r) for r in data.get("rules") or ()),
            urgency=Urgency(data["urgency"]) if data.get("urgency") else None,
            templates=tuple(Template.from_json(t) for t in data.get("templates") or ()),
        )

    def routed(self, rule: RoutingRule) -> PolicySpec:
        """This spec with ``rule`` applied: its channels and targets, its urgency when
        it sets one; no rules (the effective policy's content)."""
        return dataclasses.replace(
            self,
            channels=rule.channels,
            targets=rule.targets,
            urgency=rule.urgency or self.urgency,
            rules=(),
        )


def _parse_rules(
    rules: Sequence[RoutingRule],
) -> tuple[tuple[RoutingRule, ...], list[FieldViolation]]:
    """Each rule with its filter parsed, and every problem of them."""
    violations = rule_violations(rules, lambda name: _CHANNEL.fullmatch(name) is not None)
    if len(rules) > RULES_MAX:
        return (), violations  # not parsed one by one
    parsed: list[RoutingRule] = []
    for i, rule in enumerate(rules):
        try:
            parsed.append(
                RoutingRule.parse(
                    rule.filter, rule.channels, rule.targets, rule.urgency, at=f"spec.rules[{i}]"
                )
            )
        except InvalidRequest as exc:
            violations += exc.violations
    return tuple(parsed), violations


def _principals_violations(principals: Sequence[str]) -> list[FieldViolation]:
    if len(principals) > ALLOWED_PRINCIPALS_MAX:
        return [
            FieldViolation(
                "spec.allowed_principals", f"must list at most {ALLOWED_PRINCIPALS_MAX} principals"
            )
        ]
    return [
        FieldViolation(f"spec.allowed_principals[{i}]", problem)
        for i, name in enumerate(principals)
        for problem in text_problems(name, PRINCIPAL_MAX_CHARS, required=True)
    ]


def _follow_up_violations(
    require_ack: bool,
    ack_timeout: timedelta,
    reminder: Reminder | None,
    escalation: Sequence[EscalationStep],
) -> list[FieldViolation]:
    out: list[FieldViolation] = []
    if reminder is not None:
        out += reminder_violations(reminder, "spec.reminder")
        if not require_ack:
            out.append(FieldViolation("spec.reminder", "needs require_ack: true"))
    if escalation and not require_ack:
        out.append(FieldViolation("spec.escalation", "needs require_ack: true"))
    if len(escalation) > ESCALATION_STEPS_MAX:
        out.append(FieldViolation("spec.escalation", f"at most {ESCALATION_STEPS_MAX} steps"))
    for i, step in enumerate(escalation):
        at = f"spec.escalation[{i}]"
        if not timedelta(0) < step.after < ack_timeout:
            out.append(
                FieldViolation(f"{at}.after", "must be positive and before the ack deadline")
            )
        if not step.channels and not step.targets:
            out.append(
                FieldViolation(f"{at}.channels", "at least one channel or target is required")
            )
        out += target_violations(step.targets, f"{at}.targets")
        for j, name in enumerate(step.channels):
            if _CHANNEL.fullmatch(name) is None:
                out.append(
                    FieldViolation(f"{at}.channels[{j}]", "must be 1-64 characters of [a-z0-9_-]")
                )
    return out


def normalize_spec(
    channels: Sequence[str],
    delivery_mode: DeliveryMode | None,
    require_ack: bool,
    ack_timeout_minutes: int = 0,
    priority: Priority | None = None,
    dedup_window_seconds: int = 0,
    max_attempts: int = 0,
) -> PolicySpec:
    """Same as :meth:`PolicySpec.build`."""
    return PolicySpec.build(
        channels,
        delivery_mode,
        require_ack,
        ack_timeout_minutes,
        priority,
        dedup_window_seconds,
        max_attempts,
    )


def content_hash(spec: PolicySpec) -> str:
    """SHA-256 of the canonical spec: equal content, equal hash (channel order counts)."""
    return sha256_hex(spec.to_json())


@dataclass(frozen=True)
class PolicyRevision:
    """One immutable revision of a type's policy."""

    policy_id: str
    notification_type: str
    revision: int
    spec: PolicySpec
    content_hash: str
    active: bool
    created_by: str
    created_at: datetime
    activated_at: datetime | None

"""Resolution: the policy that applies to one request (SPEC §2, seed 001 §4).

See :mod:`uns_server.domain.policy` for the rule; :func:`resolve` applies it and
returns the frozen :class:`EffectivePolicy`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from uns_server.domain.enums import DeliveryMode, Priority, Urgency
from uns_server.domain.errors import FieldViolation, NoPolicy, PolicyOverride, TypeNotAllowed
from uns_server.domain.policy.rules import first_match
from uns_server.domain.policy.spec import (
    ACK_TIMEOUT_MINUTES_DEFAULT,
    DEDUP_WINDOW_SECONDS_DEFAULT,
    DELIVERY_MODE_DEFAULT,
    MAX_ATTEMPTS_DEFAULT,
    PRIORITY_DEFAULT,
    PolicyRevision,
    PolicySpec,
    content_hash,
)
from uns_server.domain.requests import SendRequest
from uns_server.domain.schedule import EscalationStep, QuietHours, Reminder
from uns_server.domain.targets import Target
from uns_server.domain.templates import Template


@dataclass(frozen=True)
class ServerDefaults:
    """What applies when a notification type has no ACTIVE policy: the server's
    ``default_channels``. With none, such a type is refused (``NO_POLICY``): a
    misspelled type must not be reported delivered to a channel nobody reads."""

    channels: tuple[str, ...] = ()
    delivery_mode: DeliveryMode = DELIVERY_MODE_DEFAULT
    require_ack: bool = False
    ack_timeout_minutes: int = ACK_TIMEOUT_MINUTES_DEFAULT
    priority: Priority = PRIORITY_DEFAULT
    dedup_window_seconds: int = DEDUP_WINDOW_SECONDS_DEFAULT
    max_attempts: int = MAX_ATTEMPTS_DEFAULT


@dataclass(frozen=True)
class EffectivePolicy:
    """The policy resolved for one notification (``uns.v1.EffectivePolicy``)."""

    channels: tuple[str, ...]
    delivery_mode: DeliveryMode
    require_ack: bool
    ack_timeout_minutes: int
    priority: Priority
    dedup_window_seconds: int
    max_attempts: int
    policy_id: str | None
    policy_revision: int
    """0 when the server defaults applied."""
    policy_hash: str | None
    effective_hash: str
    quiet_hours: QuietHours | None = None
    reminder: Reminder | None = None
    escalation: tuple[EscalationStep, ...] = ()
    targets: tuple[Target, ...] = ()
    escalation_loops: int = 0
    urgency: Urgency | None = None
    # Frozen with the policy: how the message reads (``domain.templates``).
    templates: tuple[Template, ...] = ()
    # The routing rule that chose channels, targets and urgency (SPEC §7): its index
    # in the revision's ``rules`` and its filter; None when none matched.
    matched_rule: int | None = None
    matched_rule_filter: str = ""

    @property
    def spec(self) -> PolicySpec:
        """The effective values alone."""
        return PolicySpec(
            channels=self.channels,
            delivery_mode=self.delivery_mode,
            require_ack=self.require_ack,
            ack_timeout_minutes=self.ack_timeout_minutes,
            priority=self.priority,
            dedup_window_seconds=self.dedup_window_seconds,
            max_attempts=self.max_attempts,
            quiet_hours=self.quiet_hours,
            reminder=self.reminder,
            escalation=self.escalation,
            targets=self.targets,
            escalation_loops=self.escalation_loops,
            urgency=self.urgency,
            templates=self.templates,
        )

    def to_json(self) -> dict[str, Any]:
        """Plain JSON object (the ACCEPTED event's ``effective``): snake_case, enums by value.
        A new dict each call; its nested values are shared and must not be changed."""
        return dict(self._json)

    @functools.cached_property
    def _json(self) -> dict[str, Any]:
        # Built once per policy: an ACTIVE revision's EffectivePolicy is shared by every
        # notification it admits (``_of_revision``), and each accept writes it twice
        # (the document, the ACCEPTED event).
        out = {
            **self.spec.to_json(),
            "policy_id": self.policy_id,
            "policy_revision": self.policy_revision,
            "policy_hash": self.policy_hash,
            "effective_hash": self.effective_hash,
        }
        if self.matched_rule is not None:  # absent otherwise: documents stay as they were
            out["matched_rule"] = self.matched_rule
            out["matched_rule_filter"] = self.matched_rule_filter
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EffectivePolicy:
        """Inverse of :meth:`to_json`; the stored ``effective_hash`` is kept as frozen."""
        return cls.of(
            PolicySpec.from_json(data),
            policy_id=data["policy_id"],
            policy_revision=int(data["policy_revision"]),
            policy_hash=data["policy_hash"],
            effective_hash=data["effective_hash"],
            matched_rule=data.get("matched_rule"),
            matched_rule_filter=data.get("matched_rule_filter") or "",
        )

    @classmethod
    def of(
        cls,
        spec: PolicySpec,
        *,
        policy_id: str | None,
        policy_revision: int,
        policy_hash: str | None,
        effective_hash: str | None = None,
        matched_rule: int | None = None,
        matched_rule_filter: str = "",
    ) -> EffectivePolicy:
        """Effective values plus provenance; the hash is computed unless given (over
        the effective values: a revision's routing rules are not among them)."""
        if spec.rules:
            spec = dataclasses.replace(spec, rules=())
        return cls(
            channels=spec.channels,
            delivery_mode=spec.delivery_mode,
            require_ack=spec.require_ack,
            ack_timeout_minutes=spec.ack_timeout_minutes,
            priority=spec.priority,
            dedup_window_seconds=spec.dedup_window_seconds,
            max_attempts=spec.max_attempts,
            quiet_hours=spec.quiet_hours,
            reminder=spec.reminder,
            escalation=spec.escalation,
            targets=spec.targets,
            escalation_loops=spec.escalation_loops,
            urgency=spec.urgency,
            templates=spec.templates,
            matched_rule=matched_rule,
            matched_rule_filter=matched_rule_filter,
            policy_id=policy_id,
            policy_revision=policy_revision,
            policy_hash=policy_hash,
            effective_hash=content_hash(spec) if effective_hash is None else effective_hash,
        )


def check_sender(principal: str, notification_type: str, active: PolicyRevision | None) -> None:
    """TYPE_NOT_ALLOWED when the ACTIVE policy of the type names the principals allowed
    to send it and ``principal`` is not one of them. The refusal names the caller and
    the type only, never who else may send it (tenancy, SPEC §3)."""
    if active is None or active.spec.allows(principal):
        return
    raise TypeNotAllowed(
        f"principal {principal!r} may not send notifications of type {notification_type!r}",
        metadata={"principal": principal, "notification_type": notification_type},
    )


def resolve(
    req: SendRequest, active: PolicyRevision | None, defaults: ServerDefaults
) -> EffectivePolicy:
    """The policy that applies to ``req`` (see the module docstring).

    ``active`` must be the ACTIVE revision of ``req.notification_type``, or ``None``
    (then the server defaults apply, or ``NoPolicy`` when they name no channel).
    Raises ``PolicyOverride`` naming the first conflicting field in metadata
    (``field``, ``declared``, ``policy_value``, ``notification_type``, ``policy_id``,
    ``policy_revision``) with a violation per conflicting field.
    """
    declared: dict[str, DeliveryMode | bool | Priority | None] = {
        "delivery_mode": req.delivery_mode,
        "require_ack": req.require_ack,
        "priority": req.priority,
    }
    if active is None:
        if not defaults.channels:
            raise NoPolicy(
                f"notification type {req.notification_type!r} has no ACTIVE policy and this "
                "server has no default channels: activate a policy for it (uns-admin "
                "policies put), or check its spelling",
                metadata={"notification_type": req.notification_type},
            )
        return EffectivePolicy.of(
            PolicySpec(
                channels=defaults.channels,
                delivery_mode=(
                    defaults.delivery_mode if req.delivery_mode is None else req.delivery_mode
                ),
                require_ack=defaults.require_ack if req.require_ack is None else req.require_ack,
                ack_timeout_minutes=defaults.ack_timeout_minutes,
                priority=defaults.priority if req.priority is None else req.priority,
                dedup_window_seconds=defaults.dedup_window_seconds,
                max_attempts=defaults.max_attempts,
            ),
            policy_id=None,
            policy_revision=0,
            policy_hash=None,
        )

    if not active.active or active.notification_type != req.notification_type:
        raise ValueError(
            f"revision {active.revision} of {active.policy_id} is not the ACTIVE policy of "
            f"{req.notification_type!r}"
        )
    fixed: dict[str, DeliveryMode | bool | Priority] = {
        "delivery_mode": active.spec.delivery_mode,
        "require_ack": active.spec.require_ack,
        "priority": active.spec.priority,
    }
    conflicts = [f for f, v in declared.items() if v is not None and v != fixed[f]]
    if conflicts:
        field = conflicts[0]
        shown, policy_value = _show(declared[field]), _show(fixed[field])
        raise PolicyOverride(
            f"{field} {shown} differs from {policy_value} fixed by the ACTIVE policy of "
            f"{req.notification_type}; leave it unset",
            metadata={
                "field": field,
                "declared": shown,
                "policy_value": policy_value,
                "notification_type": req.notification_type,
                "policy_id": active.policy_id,
                "policy_revision": str(active.revision),
            },
            violations=[
                FieldViolation(f, f"must be unset or {_show(fixed[f])} (ACTIVE policy)")
                for f in conflicts
            ],
        )
    # The first routing rule that matches replaces channels, targets and urgency.
    matched = first_match(active.spec.rules, req, active.spec.priority)
    return _of_revision(active, matched)


# An ACTIVE revision's effective policy depends on the revision (and the routing rule
# that matched) alone, and every send of its type asks for it: computing its hash
# (canonical JSON and SHA-256 of the spec) per request was about a tenth of a batch
# accept's server CPU (docs/PERFORMANCE.md, issue 33). Keyed by the revision and rule,
# checked against its spec, so an entry is only ever reused for the same inputs; a
# bounded memo, cleared when full.
_REVISIONS_MAX = 1024
_by_revision: dict[tuple[str, int, str, int | None], tuple[PolicySpec, EffectivePolicy]] = {}


def _of_revision(active: PolicyRevision, matched: int | None) -> EffectivePolicy:
    key = (active.policy_id, active.revision, active.content_hash, matched)
    hit = _by_revision.get(key)
    if hit is not None and hit[0] == active.spec:
        return hit[1]
    rule = None if matched is None else active.spec.rules[matched]
    effective = EffectivePolicy.of(
        active.spec if rule is None else active.spec.routed(rule),
        policy_id=active.policy_id,
        policy_revision=active.revision,
        policy_hash=active.content_hash,
        matched_rule=matched,
        matched_rule_filter="" if rule is None else rule.filter,
    )
    if len(_by_revision) >= _REVISIONS_MAX:
        _by_revision.clear()
    _by_revision[key] = (active.spec, effective)
    return effective


def _show(value: DeliveryMode | bool | Priority | None) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else value.value

"""Routing rules (SPEC §7): where a notification goes, decided on its content.

``PolicySpec.rules`` is an ordered list; the first rule whose filter matches the
request replaces the policy's channels, targets and (when the rule sets one) urgency;
when none matches, the policy's own apply. The rule that matched is frozen with the
effective policy (``resolution.EffectivePolicy.matched_rule``).

A filter is the ListNotifications filter language (``domain.filters``: ``field =
value`` terms joined by ``AND``, linear-time, bounded) over the request's fields:

=================  ====================================================================
``intent``         the intent's name (``SAFETY``; ``NOTIFICATION_INTENT_SAFETY`` too)
``source``         the producer's ``source``, exactly
``priority``       the producer's declared priority, else the policy's (``HIGH``)
``metadata.<key>`` the metadata value as text: a string as is, a number as JSON writes
                   it (``3``, ``0.5``), ``true``/``false``, ``null``; an object or a
                   list never matches. A missing key never matches.
=================  ====================================================================

Parsed once when the revision is written (a filter that does not parse is
INVALID_REQUEST on ``spec.rules[i].filter``) and again, from the stored text, when a
revision is read; matching a request is one dictionary lookup per term.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from uns_server.domain import filters
from uns_server.domain.enums import Intent, Priority, Urgency
from uns_server.domain.errors import FieldViolation, InvalidRequest
from uns_server.domain.requests import SendRequest
from uns_server.domain.targets import Target, target_violations, targets_from_json, targets_json
from uns_server.domain.validation import RESERVED_METADATA_KEYS

RULES_MAX = 50
RULE_FILTER_MAX_CHARS = 1024
_FIELDS = ("intent", "source", "priority")
_KEYED = ("metadata",)
_ENUMS: Mapping[str, tuple[type[Intent] | type[Priority], str]] = {
    "intent": (Intent, "NOTIFICATION_INTENT_"),
    "priority": (Priority, "PRIORITY_"),
}


@dataclass(frozen=True)
class Condition:
    """One ``field = value`` term, its value normalised (enum names upper-case and
    without their wire prefix)."""

    field: str
    value: str


@dataclass(frozen=True)
class RoutingRule:
    """One rule as written (``filter``) and as parsed (``conditions``)."""

    filter: str
    channels: tuple[str, ...] = ()
    targets: tuple[Target, ...] = ()
    urgency: Urgency | None = None
    conditions: tuple[Condition, ...] = field(default=(), compare=False, repr=False)

    @classmethod
    def parse(
        cls,
        text: str,
        channels: Sequence[str] = (),
        targets: Sequence[Target] = (),
        urgency: Urgency | None = None,
        *,
        at: str = "spec.rules[0]",
    ) -> RoutingRule:
        """The rule with its filter parsed; INVALID_REQUEST on ``<at>.filter``."""
        return cls(
            text,
            tuple(dict.fromkeys(channels)),
            tuple(dict.fromkeys(targets)),
            urgency,
            parse_filter(text, f"{at}.filter"),
        )

    def matches(self, req: SendRequest, priority: Priority) -> bool:
        """Whether every condition holds for ``req`` (``priority``: the policy's, for
        a request that declares none)."""
        return all(_holds(c, req, priority) for c in self.conditions)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"filter": self.filter, "channels": list(self.channels)}
        if self.targets:
            out["targets"] = targets_json(self.targets)
        if self.urgency is not None:
            out["urgency"] = self.urgency.value
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RoutingRule:
        """Inverse of :meth:`to_json` (trusted content: it parsed when written)."""
        urgency = data.get("urgency")
        return cls.parse(
            data["filter"],
            tuple(data.get("channels") or ()),
            targets_from_json(data.get("targets")),
            Urgency(urgency) if urgency else None,
        )


def parse_filter(text: str, at: str) -> tuple[Condition, ...]:
    """The conditions of a rule's filter; INVALID_REQUEST on ``at`` when it does not
    parse, names an enum value that does not exist, or a reserved metadata key (which
    no request can carry: SendNotification refuses it)."""
    terms = filters.parse(text, _FIELDS, keyed=_KEYED, field=at, max_chars=RULE_FILTER_MAX_CHARS)
    out = []
    for term in terms:
        value = term.value
        if term.field in _ENUMS:
            enum, prefix = _ENUMS[term.field]
            value = value.strip().upper().removeprefix(prefix)
            if value not in enum.__members__:
                choices = ", ".join(enum.__members__)
                raise InvalidRequest.of_field(
                    at, f"{term.field}: unknown value {filters.echo(term.value)} ({choices})"
                )
        elif term.field.removeprefix("metadata.") in RESERVED_METADATA_KEYS:
            raise InvalidRequest.of_field(
                at, f"{term.field}: a reserved key, which no request may carry"
            )
        out.append(Condition(term.field, value))
    return tuple(out)


def rule_violations(rules: Sequence[RoutingRule], channel_ok: Any) -> list[FieldViolation]:
    """Shape problems of parsed rules (the filters were checked when parsed):
    at most ``RULES_MAX``, each with channels or targets. ``channel_ok(name)`` says
    whether a channel name is well formed."""
    if len(rules) > RULES_MAX:
        return [FieldViolation("spec.rules", f"at most {RULES_MAX} rules")]
    out: list[FieldViolation] = []
    for i, rule in enumerate(rules):
        at = f"spec.rules[{i}]"
        if not rule.channels and not rule.targets:
            out.append(
                FieldViolation(f"{at}.channels", "at least one channel or target is required")
            )
        out += [
            FieldViolation(f"{at}.channels[{j}]", "must be 1-64 characters of [a-z0-9_-]")
            for j, name in enumerate(rule.channels)
            if not channel_ok(name)
        ]
        out += target_violations(rule.targets, f"{at}.targets")
    return out


def first_match(rules: Sequence[RoutingRule], req: SendRequest, priority: Priority) -> int | None:
    """The index of the first rule that matches ``req``, or None."""
    return next((i for i, rule in enumerate(rules) if rule.matches(req, priority)), None)


def _holds(c: Condition, req: SendRequest, priority: Priority) -> bool:
    if c.field == "intent":
        return req.intent is not None and req.intent.value == c.value
    if c.field == "priority":
        return (req.priority or priority).value == c.value
    if c.field == "source":
        return req.source == c.value
    key = c.field.removeprefix("metadata.")
    if key not in req.metadata:
        return False
    text = metadata_text(req.metadata[key])
    return text is not None and text == c.value


def metadata_text(value: Any) -> str | None:
    """A metadata value as a filter compares it; None for an object or a list."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return None

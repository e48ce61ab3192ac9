"""A person's staged rules (SPEC §7 "Staged personal rules"). Pure.

``Recipient.notification_rules`` say which of a person's contacts is used when, per
urgency: "push at once, SMS after 2 minutes, a call after 5". A notification's
urgency (its frozen ``urgency``, else HIGH for SAFETY and ACTION_REQUIRED intents,
LOW otherwise: ``urgency_of``) picks the rules of that urgency; without any, every
contact at once (as before rules existed).

    delivery attempt asks the person  --> contacts of rules with after 0 sent with it
        (same commit as its settlement) --> one ``person_rule`` job per later rule,
                                            due at that moment + after
    job due, the answer still owed    --> its contact is sent the message
    job due, delivery still PENDING   --> looks again when the attempt is due
    job due, person's quiet hours     --> looks again when they end
    job due, answered / withdrawn / timed out / a new cycle --> nothing (stale)

Only an awaited answer is worth staging for: a notification that requires no
acknowledgement sends every rule's contact with the delivery (``split``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from uns_server.domain.enums import Urgency
from uns_server.domain.errors import FieldViolation

RULES_MAX = 50
AFTER_MAX = timedelta(hours=24)
# Intents whose unset urgency is HIGH (SPEC §7).
_HIGH_INTENTS = frozenset({"SAFETY", "ACTION_REQUIRED"})


@dataclass(frozen=True)
class NotificationRule:
    """Use the person's contacts on channel ``contact`` ``after`` they are first
    asked, for notifications of ``urgency``."""

    contact: str
    after: timedelta
    urgency: Urgency

    def to_json(self) -> dict[str, Any]:
        return {
            "contact": self.contact,
            "after_seconds": int(self.after.total_seconds()),
            "urgency": self.urgency.value,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NotificationRule:
        return cls(
            str(data["contact"]),
            timedelta(seconds=int(data.get("after_seconds") or 0)),
            Urgency(data["urgency"]),
        )


def rule_violations(
    rules: Sequence[tuple[str, timedelta | None, Urgency | None]],
    channels: Sequence[str],
    prefix: str,
) -> tuple[tuple[NotificationRule, ...], list[FieldViolation]]:
    """Operator input (contact, after, urgency) checked against the person's contact
    channels: each problem at ``<prefix>.notification_rules[i].<field>``."""
    v: list[FieldViolation] = []
    at_all = f"{prefix}.notification_rules"
    if len(rules) > RULES_MAX:
        v.append(FieldViolation(at_all, f"at most {RULES_MAX} rules"))
    built: list[NotificationRule] = []
    for i, (contact, after, urgency) in enumerate(rules[:RULES_MAX]):
        at = f"{at_all}[{i}]"
        if not contact:
            v.append(FieldViolation(f"{at}.contact", "is required"))
        elif contact not in channels:
            have = ", ".join(dict.fromkeys(channels)) or "none"
            v.append(
                FieldViolation(
                    f"{at}.contact",
                    f"must name the channel of one of the person's contacts "
                    f"(not {contact!r}; they have: {have})",
                )
            )
        after = after or timedelta(0)
        if after < timedelta(0) or after > AFTER_MAX or after % timedelta(seconds=1):
            v.append(FieldViolation(f"{at}.after", "must be whole seconds from 0 to 24 hours"))
        if urgency is None:
            v.append(FieldViolation(f"{at}.urgency", "must be URGENCY_HIGH or URGENCY_LOW"))
            continue
        rule = NotificationRule(contact, after, urgency)
        if rule in built:
            v.append(FieldViolation(at, "repeats an earlier rule"))
        built.append(rule)
    return tuple(built), v


def urgency_of(urgency: Urgency | None, intent: str | None) -> Urgency:
    """The notification's urgency: its own, else HIGH for SAFETY and ACTION_REQUIRED
    intents, LOW otherwise."""
    if urgency is not None:
        return urgency
    return Urgency.HIGH if intent in _HIGH_INTENTS else Urgency.LOW


def rules_of(rules: Sequence[NotificationRule], urgency: Urgency) -> tuple[NotificationRule, ...]:
    """The rules of ``urgency``, in the order they fall due (then as written)."""
    return tuple(sorted((r for r in rules if r.urgency == urgency), key=lambda r: r.after))


@dataclass(frozen=True)
class Split:
    """A person's contact channels as one notification uses them: ``now`` with the
    message that first asks them; ``later``, each (channel, after) a timed job.
    ``staged`` False: no rules of the urgency, every contact at once."""

    now: frozenset[str]
    later: tuple[tuple[str, timedelta], ...] = ()
    staged: bool = False


def split(rules: Sequence[NotificationRule], urgency: Urgency, require_ack: bool) -> Split:
    """Which of a person's contact channels go with the first message and which
    later (see the module doc). Without rules of ``urgency``: ``staged`` False (every
    contact); without an awaited answer: every rule's channel now."""
    mine = rules_of(rules, urgency)
    if not mine:
        return Split(frozenset())
    if not require_ack:
        return Split(frozenset(r.contact for r in mine), staged=True)
    now = frozenset(r.contact for r in mine if not r.after)
    later = tuple(dict.fromkeys((r.contact, r.after) for r in mine if r.after))
    return Split(now, later, staged=True)


def follow_up_channels(rules: Sequence[NotificationRule], urgency: Urgency) -> frozenset[str]:
    """The contact channels a reminder or escalation step asks a person with rules of
    ``urgency`` on: those of their earliest rules (empty: no rules, every contact)."""
    mine = rules_of(rules, urgency)
    if not mine:
        return frozenset()
    first = mine[0].after
    return frozenset(r.contact for r in mine if r.after == first)


def route_key(route: str, after: timedelta) -> str:
    """Where a staged rule's message stands among the notification's deliveries (its
    provider reference, its events): the person's route and the delay."""
    return f"{route}:after:{int(after.total_seconds())}"


def already_staged(staged: Sequence[Mapping[str, Any]], recipient_id: str) -> bool:
    """Were ``recipient_id``'s rules already started in this cycle (``outcome.staged``)?"""
    return any(s.get("recipient_id") == recipient_id for s in staged)


def shown_state(entry: Mapping[str, Any], owed: bool) -> str:
    """A started rule's state as readers see it: PENDING, SENT, FAILED, or STOPPED (a
    PENDING one whose obligation ended first: it will never fire)."""
    state = str(entry.get("state") or "PENDING")
    return "STOPPED" if state == "PENDING" and not owed else state


def entry_text(entry: Mapping[str, Any], owed: bool) -> str:
    """A started rule in a few words, for the console: ``sms after 2m: pending``."""
    rest = int(entry.get("after_seconds") or 0)
    parts = []
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count}{unit}")
    state = shown_state(entry, owed).lower()
    error = f" ({entry['error']})" if entry.get("error") else ""
    return f"{entry.get('channel')} after {''.join(parts) or '0s'}: {state}{error}"

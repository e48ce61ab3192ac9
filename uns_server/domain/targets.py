"""Policy targets (SPEC §6 "People and on-call"): a person or a rotation a policy, or
one of its escalation steps, asks (``uns.v1.Target``).

A target is stored as it was written (``{"recipient_id": ...}`` or
``{"rotation_id": ...}``); it is resolved to a person only when a message is sent
(``domain.oncall.resolve_targets``), so a step that fires after a hand-off pages the
person on call then. This module has no dependency on people or rotations: the
schedule imports it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from uns_server.domain.errors import FieldViolation
from uns_server.domain.outcomes import DeliveryOutcome, ProviderRef, ProviderRefs

# As ``domain.people``'s ids (kept here: ``domain.people`` imports the schedule).
_ID = re.compile(r"[a-z0-9._-]{1,64}")
TARGETS_MAX = 20


@dataclass(frozen=True)
class Target:
    """Exactly one of ``recipient_id`` (a person) and ``rotation_id`` (whoever is on
    call) is set."""

    recipient_id: str = ""
    rotation_id: str = ""

    def to_json(self) -> dict[str, str]:
        if self.rotation_id:
            return {"rotation_id": self.rotation_id}
        return {"recipient_id": self.recipient_id}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Target:
        return cls(str(data.get("recipient_id") or ""), str(data.get("rotation_id") or ""))

    @property
    def label(self) -> str:
        """``recipient:alice`` or ``rotation:primary`` (messages, logs)."""
        if self.rotation_id:
            return f"rotation:{self.rotation_id}"
        return f"recipient:{self.recipient_id}"


def targets_json(targets: Sequence[Target]) -> list[dict[str, str]]:
    return [t.to_json() for t in targets]


def targets_from_json(data: Sequence[Mapping[str, Any]] | None) -> tuple[Target, ...]:
    return tuple(Target.from_json(t) for t in data or ())


def target_violations(targets: Sequence[Target], field: str) -> list[FieldViolation]:
    """Shape only (one id, well formed, at most ``TARGETS_MAX``); whether the person or
    rotation exists is the policy service's check, on the database."""
    out: list[FieldViolation] = []
    if len(targets) > TARGETS_MAX:
        return [FieldViolation(field, f"at most {TARGETS_MAX} targets")]
    for i, t in enumerate(targets):
        at = f"{field}[{i}]"
        if bool(t.recipient_id) == bool(t.rotation_id):
            out.append(FieldViolation(at, "set exactly one of recipient_id and rotation_id"))
            continue
        name, value = (
            ("rotation_id", t.rotation_id) if t.rotation_id else ("recipient_id", t.recipient_id)
        )
        if _ID.fullmatch(value) is None:
            out.append(FieldViolation(f"{at}.{name}", "must be 1-64 characters of [a-z0-9._-]"))
    return out


@dataclass
class PersonSent:
    """What a notification sent one person it asked (``Notification.recipients``): read
    from what dispatch and the follow-up worker recorded. A person's message stands
    under its route key ``<channel>@<recipient id>`` (``+<n>`` for a further contact on
    the same channel) where a shared message stands under its channel name."""

    recipient_id: str
    channels_tried: list[str] = field(default_factory=list)
    channels_accepted: list[str] = field(default_factory=list)
    references: list[ProviderRef] = field(default_factory=list)
    reminders_sent: int = 0
    unreachable_reason: str = ""
    # Their message waits for their quiet hours to end (ISO time; empty when not held).
    held_until: str = ""
    # Their staged rules this notification started (``outcome.staged`` entries).
    staged: list[Mapping[str, Any]] = field(default_factory=list)


def route_person(key: str) -> tuple[str, str] | None:
    """(channel, recipient id) of a route key; None for a shared channel."""
    channel, at, rest = key.partition("@")
    return (channel, rest.partition("+")[0]) if at else None


_NEVER = datetime.min.replace(tzinfo=UTC)  # sorts a reference without its time first


def people_sent(outcome: DeliveryOutcome, refs: ProviderRefs) -> list[PersonSent]:
    """Per person asked, in the order first seen: channels tried and accepted, the
    references of every message sent to them, reminders sent, why unreachable, until
    when their quiet hours hold their message."""
    people: dict[str, PersonSent] = {}

    def person(rid: str) -> PersonSent:
        return people.setdefault(rid, PersonSent(rid))

    succeeded = outcome.channels_succeeded
    for key in [*succeeded, *outcome.channels_attempted, *outcome.channels_failed]:
        found = route_person(str(key))
        if found is None:
            continue
        channel, rid = found
        p = person(rid)
        _add(p.channels_tried, channel)
        if key in succeeded:
            _add(p.channels_accepted, channel)
    sent = [r for r in refs.values() if r.recipient_id]
    reminders: dict[str, set[int]] = {}  # numbers per person (one ref per contact)
    for ref in sorted(sent, key=lambda r: (r.at is not None, r.at or _NEVER)):
        p = person(ref.recipient_id)
        p.references.append(ref)
        _add(p.channels_tried, ref.channel)
        _add(p.channels_accepted, ref.channel)
        if ref.follow_up == "REMINDER":
            reminders.setdefault(p.recipient_id, set()).add(ref.follow_up_number)
    for rid, numbers in reminders.items():
        people[rid].reminders_sent = len(numbers)
    for h in outcome.held:
        person(h.recipient_id).held_until = h.held_until.isoformat() if h.held_until else ""
    for u in outcome.recipients_unreachable:
        person(u.recipient_id).unreachable_reason = u.reason
    for entry in sorted(outcome.staged, key=lambda e: str(e.get("due_time"))):
        person(str(entry.get("recipient_id"))).staged.append(entry)
    return list(people.values())


def _add(items: list[str], value: str) -> None:
    if value not in items:
        items.append(value)

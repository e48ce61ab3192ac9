"""Who a step asks (SPEC §6): a policy's or an escalation step's targets resolved to
people at the instant the message is sent, or planned (Simulate).

Rotations are read when asked, never frozen with the policy: the ACCEPTED event
freezes the targets as written, so a step that fires after a hand-off asks the person
on call then (``domain.oncall.resolve_targets``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from uns_server.domain.enums import Urgency
from uns_server.domain.oncall import resolve_targets
from uns_server.domain.people import Recipient
from uns_server.domain.planned_people import PeoplePlan, plan_people
from uns_server.domain.schedule import QuietHours, Timing
from uns_server.domain.staged_rules import NotificationRule
from uns_server.domain.targets import Target
from uns_server.domain.templates import Person
from uns_server.store.port import Store


async def planned(
    store: Store,
    accepted_at: datetime,
    schedule_time: datetime | None,
    timing: Timing,
    intent: str | None,
    urgency: Urgency | None = None,
) -> PeoplePlan:
    """Simulate's plan with who each step asks (``domain.planned_people``): each
    rotation resolved at the step's planned time, each person's own quiet hours,
    reminder count and staged rules (of ``urgency``) applied as the workers apply them."""
    targets = (*timing.targets, *(t for s in timing.escalation for t in s.targets))
    if not targets:
        return plan_people(accepted_at, schedule_time, timing, intent, {}, {}, urgency)
    async with store.read() as tx:
        rotations = await tx.people.rotations_by_id(
            {t.rotation_id for t in targets if t.rotation_id}
        )
        named = {t.recipient_id for t in targets if t.recipient_id}
        for r in rotations.values():
            named |= {*r.members, *(o.recipient_id for o in r.overrides)}
        recipients = await tx.people.recipients_by_id(named)
    return plan_people(accepted_at, schedule_time, timing, intent, rotations, recipients, urgency)


async def people_at(
    store: Store, targets: Sequence[Target], at: datetime
) -> tuple[tuple[str, ...], Mapping[str, Recipient], tuple[str, ...]]:
    """The people ``targets`` ask at ``at`` (ids in order), those of them that exist,
    and the rotations that no longer exist (asked nobody)."""
    if not targets:
        return (), {}, ()
    async with store.read() as tx:
        rotations = await tx.people.rotations_by_id(
            {t.rotation_id for t in targets if t.rotation_id}
        )
        who = resolve_targets(targets, at, rotations)
        found = await tx.people.recipients_by_id(who)
    gone = tuple(t.rotation_id for t in targets if t.rotation_id and t.rotation_id not in rotations)
    return who, found, gone


@dataclass(frozen=True)
class PersonRoute:
    """One message to one person on one of their contacts. ``key`` names it among
    the notification's deliveries (``<channel>@<recipient id>``, ``+<n>`` for a
    person's further contact on the same channel): it stands where a channel name
    stands in the outcome (``channels_succeeded``), the provider references and the
    events, so a retry sends only what has not been accepted."""

    key: str
    channel: str
    recipient_id: str
    address: str
    # The person's own quiet hours: they hold this message (``schedule.held_until``).
    quiet_hours: QuietHours | None = None
    # Whom templates address (``domain.templates.Person``): name, language, zone.
    display_name: str = ""
    locale: str = ""
    time_zone: str = "UTC"

    @property
    def person(self) -> Person:
        return Person(self.recipient_id, self.display_name, self.locale, self.time_zone)


@dataclass(frozen=True)
class Asked:
    """Who a message asks now: each person's routes, and whom it could not reach
    (``{recipient_id | rotation_id, reason}``; recorded, never silently skipped)."""

    routes: tuple[PersonRoute, ...] = ()
    unreachable: tuple[dict[str, str], ...] = ()
    # Each reached person's staged rules (``domain.staged_rules``), when they have any.
    rules: Mapping[str, tuple[NotificationRule, ...]] = field(default_factory=dict)


NO_CONTACT = "no contact on a channel this server has"
DELETED_RECIPIENT = "the recipient no longer exists"
DELETED_ROTATION = "the rotation no longer exists"


def routes_of(
    who: Sequence[str], found: Mapping[str, Recipient], channels: Collection[str]
) -> Asked:
    routes: list[PersonRoute] = []
    unreachable: list[dict[str, str]] = []
    rules: dict[str, tuple[NotificationRule, ...]] = {}
    for rid in who:
        person = found.get(rid)
        if person is None:
            unreachable.append({"recipient_id": rid, "reason": DELETED_RECIPIENT})
            continue
        if person.notification_rules:
            rules[rid] = person.notification_rules
        usable = [c for c in person.contacts if c.channel in channels]
        if not usable:
            unreachable.append({"recipient_id": rid, "reason": NO_CONTACT})
        seen: dict[str, int] = {}
        for contact in usable:
            n = seen[contact.channel] = seen.get(contact.channel, 0) + 1
            key = f"{contact.channel}@{rid}" + (f"+{n}" if n > 1 else "")
            routes.append(
                PersonRoute(
                    key,
                    contact.channel,
                    rid,
                    contact.address,
                    person.quiet_hours,
                    person.display_name,
                    person.locale,
                    person.time_zone,
                )
            )
    return Asked(tuple(routes), tuple(unreachable), rules)


async def asked_at(
    store: Store, targets: Sequence[Target], at: datetime, channels: Collection[str]
) -> Asked:
    """Each person ``targets`` ask at ``at`` on each of their contacts whose channel
    is in ``channels`` (the server's), and whom they cannot reach."""
    who, found, gone = await people_at(store, targets, at)
    asked = routes_of(who, found, channels)
    lost = tuple({"rotation_id": r, "reason": DELETED_ROTATION} for r in gone)
    return Asked(asked.routes, asked.unreachable + lost, asked.rules)

"""Simulate's preview of what each message says (SPEC §7, issue 45): for each planned
step, the title and body every shared channel and every person it asks would
receive, with the policy's templates applied by the same function the workers call
when they build the message (``domain.templates.render_message``).

A person is previewed on each of their contacts whose channel this server has (as
``services.targeting.routes_of`` reaches them); the delivery previews the people
their quiet hours hold too (they get the message when the hold ends). A reminder or
an escalation step carries the same prefix its message gets ("Reminder 2: ").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from uns_server.domain.enums import Urgency
from uns_server.domain.planned_people import PlannedAsk
from uns_server.domain.policy import EffectivePolicy
from uns_server.domain.requests import SendRequest
from uns_server.domain.schedule import Step, StepKind
from uns_server.domain.staged_rules import urgency_of
from uns_server.domain.templates import Person, Rendered, message_fields, render_message
from uns_server.services import staging
from uns_server.services.targeting import Asked, PersonRoute, routes_of
from uns_server.store.port import Store

_PREFIX = {StepKind.REMINDER: "Reminder", StepKind.ESCALATION: "Escalation step"}


@dataclass(frozen=True)
class Preview:
    """One message of a planned step: on ``channel`` (of ``channel_type``), to
    ``recipient_id`` (empty: a shared channel's), in ``locale``."""

    channel: str
    channel_type: str
    recipient_id: str
    locale: str
    text: Rendered


Previews = Mapping[tuple[StepKind, int], tuple[Preview, ...]]


async def previews(
    store: Store,
    req: SendRequest,
    effective: EffectivePolicy,
    accepted_at: datetime,
    steps: Sequence[Step],
    asked: Mapping[tuple[StepKind, int], PlannedAsk],
    channel_types: Mapping[str, str],
) -> Previews:
    """Every planned step's messages, by (kind, number); none for the deadline."""
    people = {rid for who in asked.values() for rid in (*who.sent, *who.held)}
    found = {}
    if people:
        async with store.read() as tx:
            found = dict(await tx.people.recipients_by_id(people))
    fields = message_fields(
        title=req.title,
        message=req.message,
        metadata=req.metadata,
        intent=req.intent.value if req.intent else "",
        notification_type=req.notification_type,
        source=req.source,
        priority=effective.priority.value,
        accepted_at=accepted_at,
    )
    urgency = urgency_of(effective.urgency, req.intent)
    out: dict[tuple[StepKind, int], tuple[Preview, ...]] = {}
    for step in steps:
        if step.kind == StepKind.DEADLINE:
            continue
        who = asked.get((step.kind, step.number), PlannedAsk())
        prefix = f"{_PREFIX[step.kind]} {step.number}: " if step.kind in _PREFIX else ""

        def one(channel: str, person: Person, prefix: str = prefix) -> Preview:
            kind = channel_types.get(channel, "")
            text = render_message(effective.templates, fields, kind, person)
            text = Rendered(prefix + text.title, text.body, text.template, text.error)
            return Preview(channel, kind, person.recipient_id, person.locale, text)

        held = tuple(who.held) if step.kind == StepKind.DELIVERY else ()
        reached = routes_of((*who.sent, *held), found, channel_types)
        if step.kind == StepKind.PERSON_RULE:  # the person's one staged contact
            shared, routes = [], tuple(r for r in reached.routes if r.channel in step.channels)
        else:
            shared = [one(c, Person()) for c in step.channels if c in channel_types]
            routes = _staged(reached, step.kind, urgency, effective.require_ack)
        out[(step.kind, step.number)] = (
            *shared,
            *(one(r.channel, r.person) for r in routes),
        )
    return out


def _staged(
    reached: Asked, kind: StepKind, urgency: Urgency, require_ack: bool
) -> tuple[PersonRoute, ...]:
    """The routes a step uses with people's staged rules applied (``services.staging``)."""
    if kind == StepKind.DELIVERY:
        return staging.now_routes(reached, urgency, require_ack)
    return staging.follow_up_routes(reached, urgency).routes

"""What a follow-up step sends (``workers.followups``): its message per channel or per
person, the people its targets ask when it fires, and the references of what it sent.

A reminder asks the policy's targets, an escalation step its own (SPEC §6); a rotation
is resolved when the step is sent (each call of it: a retry after a hand-off asks the
new person). Each person's message stands under its route key, as in a delivery
(``services.targeting.PersonRoute``), beside the step's shared channels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from uns_server.channels.base import ChannelResult, OutboundMessage
from uns_server.domain import schedule
from uns_server.domain.outcomes import provider_refs_json
from uns_server.domain.person_rule_jobs import PersonRule
from uns_server.domain.records import Notification
from uns_server.domain.staged_rules import urgency_of
from uns_server.services import staging, targeting
from uns_server.services.action_links import ActionLinkService
from uns_server.services.targeting import PersonRoute
from uns_server.store.port import Store
from uns_server.workers.dispatch.references import follow_up_key, sent_reference
from uns_server.workers.followup_progress import progress_of, timing_of
from uns_server.workers.messages import NOBODY as NOBODY_PERSON
from uns_server.workers.messages import outbound_message

# The stand-in channel of a step whose targets reach nobody and that has no channel
# of its own: it is refused (the step GAVE_UP, its event says whom it could not reach).
NOBODY = "targets"
_LABEL = {schedule.StepKind.REMINDER: "Reminder", schedule.StepKind.ESCALATION: "Escalation step"}


@dataclass(frozen=True)
class FollowUpClaim:
    notification: Notification
    token: str  # the lease token of the step's ``follow_up`` job
    step: schedule.Step
    recovered: bool  # an earlier try of this step never settled
    # The channels to call now: the step's, less those that answered it for good.
    channels: tuple[str, ...] = ()
    # The step's targets as resolved for this call (``ask``).
    routes: tuple[PersonRoute, ...] = ()
    unreachable: tuple[dict[str, str], ...] = ()
    # People the step asks who are not sent it now: in their own quiet hours
    # (``{recipient_id, held_until}``) or, for a reminder, not due on their own count
    # (``{recipient_id, due_time}``, empty when no reminder is left for them).
    held: tuple[dict[str, str], ...] = ()
    not_due: tuple[dict[str, str], ...] = ()
    job_id: int = 0  # the step's ``follow_up`` job, settled under ``token``
    # The later staged rules of the people this call is the first to ask (``ask``):
    # started by the step's settlement, in its transaction.
    staged: tuple[PersonRule, ...] = ()

    def route(self, key: str) -> PersonRoute | None:
        return next((r for r in self.routes if r.key == key), None)

    @property
    def people(self) -> dict[str, str]:
        return {r.key: r.recipient_id for r in self.routes}


@dataclass(frozen=True)
class Sent:
    channel: str
    result: ChannelResult


async def ask(
    store: Store, claim: FollowUpClaim, channels: Collection[str], now: datetime
) -> FollowUpClaim:
    """The claim with its step's targets resolved at ``now``: the step's channels grow
    by every person's route (so the step is decided over them), the calls by those
    routes that have not answered it for good. A person in their own quiet hours, or
    (a reminder) not due on their own count, is not asked by this call (``held``,
    ``not_due``); one this step already reached stays in it."""
    step = claim.step
    if not step.targets:
        return claim
    every = await targeting.asked_at(store, step.targets, now, channels)
    # A person with staged rules (SPEC §7) is asked on the contacts of their first.
    n = claim.notification
    doc = n.notification
    urgency = urgency_of(doc.effective.urgency, doc.intent.value if doc.intent else None)
    asked = staging.follow_up_routes(every, urgency)
    progress = progress_of(claim.notification, step)
    answers = progress.answers() if progress else {}
    held, not_due = waiting(claim.notification, step, asked.routes, answers, now)
    routes = tuple(
        r
        for r in asked.routes
        if r.key in answers or (r.recipient_id not in held and r.recipient_id not in not_due)
    )
    keys = tuple(r.key for r in routes)
    if not asked.routes and not step.channels:
        keys = (NOBODY,)
    # Recomputed here (not the claim's fallback to every channel): with people, only
    # what has not answered for good is called again.
    calls = tuple(k for k in step.channels + keys if k not in answers or answers[k].transient)
    # The first step to ask someone starts their later rules, from now (SPEC §7).
    staged = staging.stage_for_step(
        every,
        urgency,
        require_ack=n.require_ack,
        started=n.outcome.staged,
        asked_now={r.recipient_id for r in routes if r.key in calls},
        cycle=n.cycle,
        now=now,
    )
    return dataclasses.replace(
        claim,
        step=dataclasses.replace(step, channels=step.channels + keys),
        channels=calls,
        routes=routes,
        unreachable=asked.unreachable,
        held=tuple({"recipient_id": r, "held_until": t.isoformat()} for r, t in held.items()),
        not_due=tuple(
            {"recipient_id": r, "due_time": t.isoformat() if t else ""} for r, t in not_due.items()
        ),
        staged=staged,
    )


def waiting(
    n: Notification,
    step: schedule.Step,
    routes: Sequence[PersonRoute],
    answers: Mapping[str, schedule.StepAnswer],
    now: datetime,
) -> tuple[dict[str, datetime], dict[str, datetime | None]]:
    """Of the people ``routes`` reach and this step has not reached yet: those their
    own quiet hours hold (until when), and, for a reminder, those not due on their own
    count (``schedule.not_due``)."""
    fresh = [r for r in routes if r.key not in answers]
    timing, intent = timing_of(n)
    held = schedule.held_until({r.recipient_id: r.quiet_hours for r in fresh}, now, intent)
    not_due: dict[str, datetime | None] = {}
    if step.kind == schedule.StepKind.REMINDER and timing.reminder is not None:
        states = schedule.nag_states(n.provider_refs or {})
        people = {r.recipient_id for r in fresh if r.recipient_id not in held}
        not_due = schedule.not_due(timing.reminder, states, people, now)
    return held, not_due


def message(
    claim: FollowUpClaim, channel: str, links: ActionLinkService | None, channel_type: str = ""
) -> OutboundMessage:
    n, step = claim.notification, claim.step
    route = claim.route(channel)
    prefix = "Reminder (snooze ended): "  # a snooze's number means nothing to the person
    if step.kind != schedule.StepKind.SNOOZE_REMINDER:
        prefix = f"{_LABEL[step.kind]} {step.number}: "
    make_links = None
    if links is not None and n.require_ack and n.deadline is not None:
        make_links = links.until(n.id, n.deadline)
    return outbound_message(
        n,
        attempt=step.number,
        # Stable across recoveries of this step, so providers can drop duplicates.
        idempotency_token=f"{n.id}:{channel}:{step.kind.value.lower()}:{step.number}",
        links=make_links,
        title_prefix=prefix,
        follow_up=step.kind.value,
        follow_up_number=step.number,
        recipient_id=route.recipient_id if route else "",
        to=route.address if route else "",
        channel_type=channel_type,
        person=route.person if route else NOBODY_PERSON,
    )


def follow_up_refs(
    current: Notification, claim: FollowUpClaim, sent: Sequence[Sent], now: datetime
) -> dict[str, Any] | None:
    """``current``'s provider references with the messages this call of the step sent
    (one entry per channel or person's route and step), so that they are updated or
    resolved when the obligation ends and answers to them are recognised; None if
    nothing was sent."""
    step = claim.step
    new: dict[str, Any] = {}
    for s in sent:
        route = claim.route(s.channel)
        ref = sent_reference(
            route.channel if route else s.channel,
            s.result,
            attempt=step.number,
            cycle=current.cycle,
            at=now,
            follow_up=step.kind.value,
            follow_up_number=step.number,
            recipient_id=route.recipient_id if route else "",
        )
        if ref is not None and route is not None:
            ref["due_time"] = step.at.isoformat()  # a person's reminders count from it
        if ref is not None:
            new[follow_up_key(s.channel, step.kind.value, step.number)] = ref
    return {**provider_refs_json(current.provider_refs), **new} if new else None

"""Who each step of Simulate's plan asks (SPEC §6): its targets resolved at the step's
planned time, less the people their own quiet hours hold then and, at a reminder, those
not due on their own count.

Pure, and composed of the rules the workers apply, not copies of them:
``oncall.resolve_targets`` (who the targets name then), ``schedule.held_until`` (a
person's own quiet hours; the dispatcher's and the follow-up worker's hold),
``schedule.nag_states`` and ``schedule.not_due`` (reminders taper per person, read
from the references of the messages sent) and ``schedule.plan`` (the timeline). Like
the rest of the plan it assumes no answer arrives and every send succeeds at its time.

The delivery. A person held at the first attempt gets the delivery's message when
their hold ends: the dispatcher leaves the notification PENDING and attempts again
then, so the delivery completes (DELIVERED) when the last hold ends, and reminders,
escalation steps and the deadline count from that instant.

The follow-ups. A reminder or escalation step does not send to a person held then,
nor (a reminder) to one not due; neither counts as asking them, so a later reminder
is reckoned from their last message.

Staged rules (SPEC §7). A person with rules of the notification's urgency is sent
by the delivery only on the contacts of their immediate rules; each later rule is a
step of its own (``PERSON_RULE``), due when the delivery first sends them plus its
``after``, listed while it falls before the ack deadline (the plan assumes nobody
answers). A person first asked by a reminder or escalation step is sent there on
their earliest rules' contacts, and their later rules count from that step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from uns_server.domain import schedule
from uns_server.domain.enums import Urgency
from uns_server.domain.oncall import resolve_targets
from uns_server.domain.outcomes import ProviderRef
from uns_server.domain.people import Recipient, Rotation
from uns_server.domain.schedule import Step, StepKind, Timing
from uns_server.domain.staged_rules import rules_of, split, urgency_of
from uns_server.domain.targets import Target

# A bound on the delivery's attempts for holds: each ends a hold, so only a rotation
# handing off to someone asleep again and again could come near it.
_HOLD_ATTEMPTS_MAX = 64


@dataclass(frozen=True)
class PlannedAsk:
    """Who one planned step asks, in the targets' order. ``sent``: the people sent
    its message at its time; ``held``: those their own quiet hours hold then, with
    when the hold ends (the delivery sends theirs then; a reminder or escalation step
    does not send to them); ``not_due``: at a reminder, those not due on their own
    count, with when they are (None: no reminder left for them)."""

    sent: tuple[str, ...] = ()
    held: Mapping[str, datetime] = field(default_factory=dict)
    not_due: Mapping[str, datetime | None] = field(default_factory=dict)


@dataclass(frozen=True)
class PeoplePlan:
    """The plan's steps (``schedule.plan``, counted from when the delivery completes)
    and who each asks, by (kind, number); steps whose targets name nobody are left
    out."""

    steps: tuple[Step, ...]
    asked: Mapping[tuple[StepKind, int], PlannedAsk]


@dataclass
class _Asking:
    """The plan's state as it walks the steps: the references of the messages sent
    to people, stored entries as the workers write them, read as ``ProviderRef``s (what
    ``nag_states`` reads)."""

    timing: Timing
    intent: str | None
    rotations: Mapping[str, Rotation]
    recipients: Mapping[str, Recipient]
    refs: dict[str, ProviderRef] = field(default_factory=dict)
    # When the delivery first sent each person (their staged rules count from it).
    first_sent: dict[str, datetime] = field(default_factory=dict)
    # Those a reminder or escalation step asked first: the step sent their earliest
    # rules itself, their later ones count from it (``staging.stage_for_step``).
    first_by_step: set[str] = field(default_factory=set)

    def resolve(self, targets: Sequence[Target], at: datetime) -> tuple[str, ...]:
        return resolve_targets(targets, at, self.rotations)

    def held(self, people: Sequence[str], at: datetime) -> dict[str, datetime]:
        """Of ``people``, those their own quiet hours hold at ``at`` (a person who no
        longer exists has none: the runtime reaches nobody for them)."""
        quiet = {p: self.recipients[p].quiet_hours for p in people if p in self.recipients}
        return schedule.held_until(quiet, at, self.intent)

    def record(self, rid: str, at: datetime, step: Step | None = None) -> None:
        """A message sent to ``rid`` at ``at`` (``step``: a follow-up's; a person's
        reminders count from its planned time, as ``workers.followup_messages``
        records it)."""
        if rid not in self.recipients:
            return
        ref: dict[str, Any] = {"recipient_id": rid, "at": at.isoformat()}
        if step is not None:
            ref |= {
                "due_time": step.at.isoformat(),
                "follow_up": step.kind.value,
                "follow_up_number": step.number,
            }
        key = f"{step.kind.value}:{step.number}" if step else "DELIVERY"
        self.refs[f"{key}@{rid}"] = ProviderRef.from_json(ref)

    def deliver(self, first: Step) -> tuple[PlannedAsk, datetime]:
        """The delivery's first attempt, and when it completes: each held person is
        sent the message at the next attempt, due when the first remaining hold ends
        (``lifecycle.decide_settlement``), their targets resolved again then."""
        at, asked = first.at, None
        sent: set[str] = set()
        for _ in range(_HOLD_ATTEMPTS_MAX):
            who = self.resolve(first.targets, at)
            todo = [p for p in who if p not in sent]
            held = self.held(todo, at)
            for p in todo:
                if p not in held:
                    sent.add(p)
                    self.first_sent.setdefault(p, at)
                    self.record(p, at)
            if asked is None:
                asked = PlannedAsk(tuple(p for p in who if p not in held), held)
            if not held:
                break
            at = min(held.values())
        return asked or PlannedAsk(), at

    def follow_up(self, step: Step) -> PlannedAsk:
        """A reminder or escalation step at its planned time (``followup_messages.waiting``)."""
        who = self.resolve(step.targets, step.at)
        held = self.held(who, step.at)
        not_due: dict[str, datetime | None] = {}
        if step.kind == StepKind.REMINDER and self.timing.reminder is not None:
            states = schedule.nag_states(self.refs)
            awake = [p for p in who if p in self.recipients and p not in held]
            not_due = schedule.not_due(self.timing.reminder, states, awake, step.at)
        sent = tuple(p for p in who if p not in held and p not in not_due)
        for p in sent:
            self.record(p, step.at, step)
            if p in self.recipients and p not in self.first_sent:
                self.first_sent[p] = step.at
                self.first_by_step.add(p)
        return PlannedAsk(sent, held, not_due)

    def rules(self, urgency: Urgency, until: datetime | None) -> list[Step]:
        """Each later staged rule of the people the delivery or a step first sent, in
        time order, those due before ``until`` (the ack deadline) only."""
        out: list[tuple[datetime, str, str]] = []
        for rid, at in self.first_sent.items():
            rules = self.recipients[rid].notification_rules
            later = split(rules, urgency, self.timing.require_ack).later
            if rid in self.first_by_step:  # the step sent the earliest ones itself
                earliest = min((r.after for r in rules_of(rules, urgency)), default=None)
                later = tuple((ch, after) for ch, after in later if after != earliest)
            out += [(at + after, rid, channel) for channel, after in later]
        due = sorted(x for x in out if until is None or x[0] < until)
        return [
            Step(StepKind.PERSON_RULE, i, at, (channel,), targets=(Target(recipient_id=rid),))
            for i, (at, rid, channel) in enumerate(due, start=1)
        ]


def plan_people(
    accepted_at: datetime,
    schedule_time: datetime | None,
    timing: Timing,
    intent: str | None,
    rotations: Mapping[str, Rotation],
    recipients: Mapping[str, Recipient],
    urgency: Urgency | None = None,
) -> PeoplePlan:
    """Simulate's plan with who each step asks: ``rotations`` and ``recipients`` are
    those the policy's targets may name (missing ones ask nobody, as at runtime);
    ``urgency`` the policy's (its default by intent when None) picks staged rules."""
    asking = _Asking(timing, intent, rotations, recipients)
    delivery = schedule.plan(accepted_at, schedule_time, timing, intent)[0]
    first, delivered_at = asking.deliver(delivery)
    steps = schedule.plan(accepted_at, schedule_time, timing, intent, delivered_at)
    deadline = next((s.at for s in steps if s.kind == StepKind.DEADLINE), None)
    asked: dict[tuple[StepKind, int], PlannedAsk] = {}
    for step in steps:
        if step.kind == StepKind.DELIVERY:
            got = first
        elif step.kind in (StepKind.REMINDER, StepKind.ESCALATION):
            got = asking.follow_up(step)
        else:
            continue
        if got.sent or got.held or got.not_due:
            asked[(step.kind, step.number)] = got
    staged = asking.rules(urgency_of(urgency, intent), deadline)  # once every step asked
    for step in staged:
        asked[(step.kind, step.number)] = PlannedAsk((step.targets[0].recipient_id,))
    merged = sorted([*steps, *staged], key=lambda s: s.at)  # stable: a tie keeps order
    return PeoplePlan(tuple(merged), asked)

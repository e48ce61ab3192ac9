"""People's staged rules applied to the routes a message reaches them on (SPEC §7
"Staged personal rules"; the rules are ``domain.staged_rules``, their timers
``domain.person_rule_jobs``).

The delivery sends each person with rules of the notification's urgency only the
contacts of their rules with ``after`` zero, and starts a ``person_rule`` job per
later rule the first time it asks them (``stage``); a reminder or escalation step
asks them on the contacts of their earliest rules (``follow_up_routes``), and starts
the later ones when it is the first to ask them (``stage_for_step``). A person
without rules of that urgency keeps every route, as before rules existed.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from uns_server.domain.enums import Urgency
from uns_server.domain.moves import RecordPersonRule
from uns_server.domain.person_rule_jobs import PersonRule
from uns_server.domain.records import Notification
from uns_server.domain.staged_rules import (
    NotificationRule,
    already_staged,
    follow_up_channels,
    rules_of,
    split,
)
from uns_server.services.targeting import Asked, PersonRoute
from uns_server.store.port import WriteTransaction


def now_routes(asked: Asked, urgency: Urgency, require_ack: bool) -> tuple[PersonRoute, ...]:
    """The routes the delivery sends now: every route of a person without rules of
    ``urgency``, the contacts of the immediate rules of the others."""
    out = []
    for route in asked.routes:
        rules = asked.rules.get(route.recipient_id, ())
        plan = split(rules, urgency, require_ack)
        if not plan.staged or route.channel in plan.now:
            out.append(route)
    return tuple(out)


def stage(
    asked: Asked,
    urgency: Urgency,
    *,
    require_ack: bool,
    started: Sequence[Mapping[str, Any]],
    not_asked: Collection[str],
    cycle: int,
    now: datetime,
) -> tuple[PersonRule, ...]:
    """The later rules this attempt starts: of each person it asks (not in
    ``not_asked``: their message is held) whose rules were not ``started`` in this
    cycle, each later rule whose contact channel this server has, due ``now`` + after."""
    reachable = {(r.recipient_id, r.channel) for r in asked.routes}
    out: list[PersonRule] = []
    for rid, rules in asked.rules.items():
        if rid in not_asked or already_staged(started, rid):
            continue
        for channel, after in split(rules, urgency, require_ack).later:
            if (rid, channel) in reachable:
                out.append(PersonRule(rid, channel, after, cycle, now + after))
    return tuple(out)


def stage_for_step(
    asked: Asked,
    urgency: Urgency,
    *,
    require_ack: bool,
    started: Sequence[Mapping[str, Any]],
    asked_now: Collection[str],
    cycle: int,
    now: datetime,
) -> tuple[PersonRule, ...]:
    """The later rules a reminder or escalation step starts when it is the first to
    ask someone in this cycle (a new person of an escalation step, or of a rotation
    that handed over): of each person in ``asked_now`` whose rules were not
    ``started``, each rule after their earliest (the step sends those itself,
    ``follow_up_routes``), due ``now`` + after."""
    not_asked = set(asked.rules) - set(asked_now)
    rules = stage(
        asked,
        urgency,
        require_ack=require_ack,
        started=started,
        not_asked=not_asked,
        cycle=cycle,
        now=now,
    )
    return tuple(r for r in rules if r.after > _earliest(asked.rules[r.recipient_id], urgency))


def _earliest(rules: Sequence[NotificationRule], urgency: Urgency) -> timedelta:
    mine = rules_of(rules, urgency)
    return mine[0].after if mine else timedelta(0)


async def start_for_step(
    tx: WriteTransaction, current: Notification, rules: Sequence[PersonRule], now: datetime
) -> int:
    """Start the later rules a step asked for (``stage_for_step``), in the transaction
    whose fenced settle of the step landed, the row ``current`` locked: a ``person_rule``
    job each and its ``outcome.staged`` entry, for the people whose rules this cycle
    has not started meanwhile. How many were started."""
    started = current.outcome.staged
    fresh = [
        r for r in rules if r.cycle == current.cycle and not already_staged(started, r.recipient_id)
    ]
    if not fresh:
        return 0
    await tx.jobs.insert_many([r.job(current.id) for r in fresh], now)
    staged = [*(dict(e) for e in started), *(r.entry() for r in fresh)]
    outcome = {**current.outcome.to_json(), "staged": staged}
    await tx.follow_ups.record_person_rule(RecordPersonRule(current.id, outcome, None, now))
    return len(fresh)


def follow_up_routes(asked: Asked, urgency: Urgency) -> Asked:
    """``asked`` with each person who has rules of ``urgency`` reached only on the
    contacts of their earliest rules (a reminder or escalation step)."""
    keep = []
    for route in asked.routes:
        channels = follow_up_channels(asked.rules.get(route.recipient_id, ()), urgency)
        if not channels or route.channel in channels:
            keep.append(route)
    return Asked(tuple(keep), asked.unreachable, asked.rules)

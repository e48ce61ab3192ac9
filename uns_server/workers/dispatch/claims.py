"""What a claim hands a delivery (``Claim``), what one provider call answered
(``ChannelAttempt``), and the events a claim commits before any provider I/O."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from uns_server.channels.base import ChannelResult
from uns_server.domain.enums import EventKind
from uns_server.domain.person_rule_jobs import PersonRule
from uns_server.domain.records import Notification
from uns_server.services.targeting import PersonRoute
from uns_server.store.port import NewEvent


@dataclass(frozen=True, slots=True)
class Claim:
    """One leased leader on its way to the providers. ``attempt``/``cycle_attempt`` are
    the numbers ``lifecycle.decide_claim`` gave this attempt."""

    notification: Notification  # as before the claim (a recovered lease shows its token)
    token: str  # the fencing token every settlement presents
    attempt: int
    cycle_attempt: int
    channels: tuple[str, ...]  # still to deliver in this cycle
    # The policy's targets as resolved for this attempt (``Sender.deliver``): every
    # person's route (their keys join ``channels`` while still to deliver) and whom
    # the targets could not reach.
    routes: tuple[PersonRoute, ...] = ()
    unreachable: tuple[dict[str, str], ...] = ()
    # People's messages their own quiet hours hold now (route key -> until): not sent.
    held: Mapping[str, datetime] = field(default_factory=dict)
    # People's later staged rules this attempt starts (``services.staging.stage``):
    # their jobs are inserted, and ``outcome.staged`` grows, when it settles.
    staged: tuple[PersonRule, ...] = ()

    def route(self, key: str) -> PersonRoute | None:
        return next((r for r in self.routes if r.key == key), None)


@dataclass(frozen=True, slots=True)
class ChannelAttempt:
    """What one channel answered to one provider call."""

    channel: str
    result: ChannelResult
    observed_at: datetime
    # Not called: this process's bulkhead for the channel was full (``bulkheads``); the
    # result says so, and the domain settles it as a deferral.
    busy: bool = False


def attempt_base(claim: Claim) -> dict[str, Any]:
    """The attempt numbers every event of one attempt carries."""
    return {
        "attempt": claim.attempt,
        "cycle": claim.notification.cycle,
        "cycle_attempt": claim.cycle_attempt,
    }


def remaining_channels(n: Notification) -> tuple[str, ...]:
    """The notification's channels that have not accepted it in this cycle."""
    done = set(n.outcome.channels_succeeded)
    return tuple(ch for ch in n.notification.effective.channels if ch not in done)


def claim_events(claim: Claim, *, recovered: bool) -> list[NewEvent]:
    """What a claim commits before any provider I/O: ATTEMPT_STARTED, and one
    CHANNEL_ATTEMPT_STARTED per channel still to deliver."""
    n = claim.notification
    base = attempt_base(claim)
    started = event(
        n, EventKind.ATTEMPT_STARTED, {**base, "recovery_may_repeat_provider_effect": recovered}
    )
    return [started, *started_events(claim, claim.channels)]


def started_events(claim: Claim, keys: Sequence[str]) -> list[NewEvent]:
    """One CHANNEL_ATTEMPT_STARTED per channel (or person's route: its real channel,
    the ``route`` and the ``recipient_id``) about to be called."""
    base = attempt_base(claim)
    out = []
    for key in keys:
        route = claim.route(key)
        names = (
            {"channel": key}
            if route is None
            else {"channel": route.channel, "route": key, "recipient_id": route.recipient_id}
        )
        payload = {
            **base,
            **names,
            "lease_token": claim.token,
            "provider_effect_may_have_occurred": True,
        }
        out.append(event(claim.notification, EventKind.CHANNEL_ATTEMPT_STARTED, payload))
    return out


def event(n: Notification, kind: EventKind, payload: dict[str, Any]) -> NewEvent:
    return NewEvent(n.id, n.principal, n.notification_type, kind, payload)

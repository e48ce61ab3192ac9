"""Provider references: what a successful channel attempt records so that the sent
message can be updated later (``services.message_updates``) and shown
(``api.convert``): the provider's own reference, with where it came from."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from uns_server.channels.base import ChannelResult
from uns_server.domain.enums import EventKind
from uns_server.domain.outcomes import provider_refs_json
from uns_server.domain.records import Notification
from uns_server.store.port import NewEvent
from uns_server.workers.dispatch.claims import ChannelAttempt, Claim, event


def sent_reference(
    channel: str,
    result: ChannelResult,
    *,
    attempt: int,
    cycle: int,
    at: datetime,
    follow_up: str = "",
    follow_up_number: int = 0,
    recipient_id: str = "",
) -> dict[str, Any] | None:
    """The stored reference of a message a channel accepted (None if it did not): the
    provider's own reference, with where it came from. Follow-ups (reminders and
    escalation steps) say which one, so that each of them is closed too."""
    if not result.success:
        return None
    ref: dict[str, Any] = {
        **result.reference,
        "channel": channel,
        "message_id": result.message_id or "",
        "attempt": attempt,
        "cycle": cycle,
        "at": at.isoformat(),
    }
    if follow_up:
        ref |= {"follow_up": follow_up, "follow_up_number": follow_up_number}
    if recipient_id:  # a targeted person's own message
        ref["recipient_id"] = recipient_id
    return ref


def follow_up_key(channel: str, follow_up: str, number: int) -> str:
    """Where a follow-up's reference is kept in ``provider_refs`` (the delivery's is
    kept under the channel's name): one entry per message sent."""
    return f"{channel}:{follow_up.lower()}:{number}"


def reference(claim: Claim, attempt: ChannelAttempt) -> dict[str, Any] | None:
    """The provider reference of a successful channel attempt, with where it came from
    (a person's message: the real channel and the person; it is kept under its key)."""
    route = claim.route(attempt.channel)
    return sent_reference(
        route.channel if route else attempt.channel,
        attempt.result,
        attempt=claim.attempt,
        cycle=claim.notification.cycle,
        at=attempt.observed_at,
        recipient_id=route.recipient_id if route else "",
    )


def reference_payload(claim: Claim, attempt: ChannelAttempt) -> dict[str, Any]:
    """The CHANNEL_ATTEMPT_RESULT payload's part for the reference (none on failure)."""
    ref = reference(claim, attempt)
    return {} if ref is None else {"provider_reference": ref}


def provider_refs(
    n: Notification, claim: Claim, attempts: Sequence[ChannelAttempt]
) -> dict[str, Any] | None:
    """The notification's provider references with this attempt's successes; None if
    unchanged."""
    new = {a.channel: ref for a in attempts if (ref := reference(claim, a)) is not None}
    if not new:
        return None
    return {**provider_refs_json(n.provider_refs), **new}


def route_fields(claim: Claim, key: str) -> dict[str, str]:
    """A person's message names its channel, its route and its person."""
    route = claim.route(key)
    if route is None:
        return {"channel": key}
    return {"channel": route.channel, "route": key, "recipient_id": route.recipient_id}


def result_event(claim: Claim, base: Mapping[str, Any], a: ChannelAttempt) -> NewEvent:
    """CHANNEL_ATTEMPT_RESULT: one channel's answer, recorded whatever the lease."""
    return event(
        claim.notification,
        EventKind.CHANNEL_ATTEMPT_RESULT,
        {
            **base,
            "lease_token": claim.token,
            **route_fields(claim, a.channel),
            "success": a.result.success,
            "retryable": a.result.retryable,
            "message_id": a.result.message_id,
            "error": a.result.error,
            "metadata": dict(a.result.metadata),
            "provider_observed_at": a.observed_at.isoformat(),
            **reference_payload(claim, a),
        },
    )


def held_json(claim: Claim) -> list[dict[str, str]]:
    """``outcome.held``: each person's message their quiet hours hold, and until when
    (it is sent by the attempt due then)."""
    return [
        {**route_fields(claim, key), "held_until": until.isoformat()}
        for key, until in sorted(claim.held.items())
    ]

"""Provider references: what a successful channel attempt records so that the sent
message can be updated later (``services.message_updates``) and shown
(``api.convert``): the provider's own reference, with where it came from."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from uns_server.domain.records import Notification
from uns_server.workers.dispatch.claims import Attempt, Claim


def reference(claim: Claim, attempt: Attempt) -> dict[str, Any] | None:
    """The provider reference of a successful channel attempt, with where it came from."""
    if not attempt.result.success:
        return None
    return {
        **attempt.result.reference,
        "channel": attempt.channel,
        "message_id": attempt.result.message_id or "",
        "attempt": claim.attempt,
        "cycle": claim.notification.cycle,
        "at": attempt.observed_at.isoformat(),
    }


def reference_payload(claim: Claim, attempt: Attempt) -> dict[str, Any]:
    """The CHANNEL_ATTEMPT_RESULT payload's part for the reference (none on failure)."""
    ref = reference(claim, attempt)
    return {} if ref is None else {"provider_reference": ref}


def provider_refs(
    n: Notification, claim: Claim, attempts: Sequence[Attempt]
) -> dict[str, Any] | None:
    """The notification's provider references with this attempt's successes; None if
    unchanged."""
    new = {a.channel: ref for a in attempts if (ref := reference(claim, a)) is not None}
    if not new:
        return None
    return {**(n.provider_refs or {}), **new}

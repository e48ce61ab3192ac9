"""``Notification.recipients`` (SPEC §6) on the wire, from ``domain.targets.people_sent``."""

from __future__ import annotations

from collections.abc import Callable

from uns.v1 import types_pb2 as t
from uns_server.domain.outcomes import DeliveryOutcome, ProviderRef, ProviderRefs
from uns_server.domain.targets import people_sent


def recipients(
    outcome: DeliveryOutcome,
    refs: ProviderRefs,
    reference: Callable[[ProviderRef], t.ProviderReference],
) -> list[t.NotificationRecipient]:
    return [
        t.NotificationRecipient(
            recipient_id=p.recipient_id,
            channels_tried=p.channels_tried,
            channels_accepted=p.channels_accepted,
            provider_references=[reference(r) for r in p.references],
            reminders_sent=p.reminders_sent,
            unreachable_reason=p.unreachable_reason,
        )
        for p in people_sent(outcome, refs)
    ]

"""The message a channel receives for one notification: the first delivery and every
reminder or escalation step are built here, from the stored request, the same way."""

from __future__ import annotations

from collections.abc import Callable

from uns_server.channels.base import ActionLinks, OutboundMessage
from uns_server.domain.records import Notification


def outbound_message(
    n: Notification,
    *,
    attempt: int,
    idempotency_token: str,
    links: Callable[[str], ActionLinks] | None,
    title_prefix: str = "",
    follow_up: str = "",
    follow_up_number: int = 0,
    recipient_id: str = "",
    to: str = "",
) -> OutboundMessage:
    """``links`` makes the Acknowledge/Dismiss links per recipient (None: the HTTP
    surface is off, or no answer is awaited)."""
    doc = n.notification
    return OutboundMessage(
        notification_id=n.id,
        notification_type=n.notification_type,
        intent=doc.intent.value if doc.intent else "",
        title=f"{title_prefix}{doc.title}",
        message=doc.message,
        source=n.source,
        priority=doc.effective.priority.value,
        correlation_id=doc.correlation_id,
        metadata=doc.metadata,
        attempt=attempt,
        idempotency_token=idempotency_token,
        require_ack=n.require_ack,
        links=links,
        follow_up=follow_up,
        follow_up_number=follow_up_number,
        recipient_id=recipient_id,
        to=to,
    )

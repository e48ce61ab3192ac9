"""The message a channel receives for one notification: the first delivery and every
reminder or escalation step are built here, from the stored request, the same way,
with the policy's templates applied for the channel's type and the person
(``domain.templates``: a render that fails sends the raw text, and ``send_built``
records why on the attempt)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from uns_server.channels.base import AnswerLinks, Channel, ChannelResult, OutboundMessage
from uns_server.domain.records import Notification
from uns_server.domain.templates import Person, Rendered, message_fields, render_message

NOBODY = Person()
"""A shared channel's message is for no one person."""


def rendered(n: Notification, channel_type: str, person: Person = NOBODY) -> Rendered:
    """The title and body ``channel_type`` sends ``person`` for ``n`` (its frozen
    templates, else the raw text; the channel's length limits either way)."""
    doc = n.notification
    fields = message_fields(
        title=doc.title,
        message=doc.message,
        metadata=doc.metadata,
        intent=doc.intent.value if doc.intent else "",
        notification_type=n.notification_type,
        source=n.source,
        priority=doc.effective.priority.value,
        accepted_at=n.created_at,
    )
    return render_message(doc.effective.templates, fields, channel_type, person)


def outbound_message(
    n: Notification,
    *,
    attempt: int,
    idempotency_token: str,
    links: Callable[[str], AnswerLinks] | None,
    title_prefix: str = "",
    follow_up: str = "",
    follow_up_number: int = 0,
    recipient_id: str = "",
    to: str = "",
    channel_type: str = "",
    person: Person = NOBODY,
) -> OutboundMessage:
    """``links`` makes the Acknowledge/Dismiss links per recipient (None: the HTTP
    surface is off, or no answer is awaited)."""
    doc = n.notification
    text = rendered(n, channel_type, person)
    return OutboundMessage(
        notification_id=n.id,
        notification_type=n.notification_type,
        intent=doc.intent.value if doc.intent else "",
        title=f"{title_prefix}{text.title}",
        message=text.body,
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
        template_error=text.error,
    )


async def send_built(adapter: Channel, message: OutboundMessage) -> ChannelResult:
    """``adapter.send(message)``, its answer carrying the template's failure (in
    ``metadata.template_error``, which the attempt's event records)."""
    result = await adapter.send(message)
    if not message.template_error:
        return result
    return replace(result, metadata={**result.metadata, "template_error": message.template_error})

"""Signed generic webhook, Standard Webhooks style (https://www.standardwebhooks.com).

Each request carries ``webhook-id`` (the message's idempotency token, identical on every
retry so receivers can drop duplicates), ``webhook-timestamp`` (unix seconds, fresh per
attempt) and ``webhook-signature: v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">``.
Receivers verify with ``uns_clients.webhooks.verify_webhook``; the primitive is repeated
there (a dozen lines) because the server must not depend on the client package.

Acceptance is any 2xx: for a generic receiver the status *is* the explicit answer, and its
body is free-form. Redirects are not followed (the signed body stays where it was sent).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from uns_server.channels._http import (
    HttpChannel,
    HttpReply,
    classify_http_response,
    encode_json,
)
from uns_server.channels._signing import signing_key
from uns_server.channels.base import AnswerLinks, ChannelResult, ObligationOutcome, OutboundMessage
from uns_server.channels.config import WebhookConfig
from uns_server.channels.http_transport import OutboundClient

EVENT_TYPE = "uns.notification"
SETTLED_TYPE = "uns.notification.settled"


def sign(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64 HMAC-SHA256 of "{msg_id}.{timestamp}.{body}">``."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def webhook_payload(
    message: OutboundMessage, now: float, links: AnswerLinks | None = None
) -> dict[str, Any]:
    """The JSON body: a Standard Webhooks envelope around the notification's own fields;
    ``data.links`` holds the Acknowledge/Dismiss links when an answer is needed."""
    payload: dict[str, Any] = {
        "type": EVENT_TYPE,
        "timestamp": datetime.fromtimestamp(now, UTC).isoformat().replace("+00:00", "Z"),
        "data": {
            "notification_id": message.notification_id,
            "notification_type": message.notification_type,
            "intent": message.intent,
            "priority": message.priority,
            "title": message.title,
            "message": message.message,
            "source": message.source,
            "correlation_id": message.correlation_id,
            "metadata": dict(message.metadata),
            "attempt": message.attempt,
            "require_ack": message.require_ack,
        },
    }
    if links is not None:
        payload["data"]["links"] = {
            "acknowledge": links.acknowledge_url,
            "dismiss": links.dismiss_url,
        }
    if message.recipient_id:  # a targeted person's own message
        payload["data"]["recipient"] = {"recipient_id": message.recipient_id, "address": message.to}
    if message.follow_up:  # a reminder or escalation step, not the first delivery
        payload["data"]["follow_up"] = {
            "kind": message.follow_up,
            "number": message.follow_up_number,
        }
    return payload


def settled_payload(settlement: ObligationOutcome, now: float) -> dict[str, Any]:
    """The body that tells a receiver how an obligation it was sent has ended."""
    return {
        "type": SETTLED_TYPE,
        "timestamp": datetime.fromtimestamp(now, UTC).isoformat().replace("+00:00", "Z"),
        "data": {
            "notification_id": settlement.notification_id,
            "state": "WITHDRAWN" if settlement.state == "WITHDRAWN" else "DELIVERED",
            "ack_state": settlement.state,
            "actor": settlement.actor,
            "via": settlement.via,
            "settle_time": settlement.at,
            "title": settlement.title,
            "summary": settlement.summary,
        },
    }


class WebhookChannel(HttpChannel):
    """POSTs a signed JSON notification to one configured URL."""

    def __init__(
        self,
        name: str,
        config: WebhookConfig,
        client: OutboundClient,
        *,
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(
            name,
            client,
            secrets=(config.secret, config.url, *config.headers.values()),
            on_close=on_close,
        )
        self._config = config
        self._key = signing_key(config.secret)
        # The URL may carry a credential: the channel's name stands for the receiver.
        self.recipient = f"webhook:{name}"

    async def _deliver(self, message: OutboundMessage) -> ChannelResult:
        now = self._now()
        payload = webhook_payload(message, now, message.action_links(self.recipient))
        return await self._send_signed(payload, message.idempotency_token, now)

    async def _update(
        self, reference: Mapping[str, str], settlement: ObligationOutcome
    ) -> ChannelResult:
        """``uns.notification.settled``, signed like a delivery; its ``webhook-id`` is
        stable per notification, so a repeat can be dropped."""
        now = self._now()
        msg_id = f"{settlement.notification_id}:settled"
        return await self._send_signed(settled_payload(settlement, now), msg_id, now)

    async def _send_signed(self, payload: dict[str, Any], msg_id: str, now: float) -> ChannelResult:
        body = encode_json(payload)
        if isinstance(body, ChannelResult):
            return body
        timestamp = int(now)
        headers = {
            **self._config.headers,
            "content-type": "application/json",
            "webhook-id": msg_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign(self._key, msg_id, timestamp, body),
        }
        reply = await self._post(
            self._config.url,
            content=body,
            headers=headers,
            timeout_seconds=self._config.timeout_seconds,
        )
        if isinstance(reply, ChannelResult):
            return reply
        failure = classify_http_response(reply, now=self._now())
        if failure is not None:
            return failure
        return ChannelResult.delivered(
            _receiver_message_id(reply) or msg_id,
            metadata={"http_status": reply.status, "webhook_id": msg_id},
            reference={"type": "webhook", "recipient": self.recipient, "webhook_id": msg_id},
        )


def _receiver_message_id(reply: HttpReply) -> str | None:
    """The receiver's own id for the message, if it volunteers one."""
    header = reply.headers.get("x-message-id")
    if isinstance(header, str) and header:
        return header
    body: Mapping[str, Any] | None = reply.json_object()
    value = body.get("id") if body else None
    if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
        return str(value)
    return None

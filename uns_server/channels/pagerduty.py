"""PagerDuty Events API v2: ``POST {base_url}/v2/enqueue`` with ``event_action: trigger``.

Accepted means exactly what PagerDuty documents: HTTP 202 with
``{"status": "success", "message": "Event processed", "dedup_key": "..."}``; the
``dedup_key`` is the message id. 400 (``{"status": "invalid event", "errors": [...]}``) is
permanent, 429 and 5xx are transient.

``dedup_key`` is the message's idempotency token, so a retry after an uncertain outcome
updates the same PagerDuty alert instead of paging twice. PagerDuty caps it at 255
characters; a longer token is replaced by its SHA-256 (still stable per message).
The routing key is a credential and never appears in results or logs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from uns_server.channels._http import (
    HttpChannel,
    classify_http_response,
    encode_json,
    unexpected_success,
)
from uns_server.channels.base import AnswerLinks, ChannelResult, ObligationOutcome, OutboundMessage
from uns_server.channels.config import PagerDutyConfig
from uns_server.channels.http_transport import OutboundClient

SEVERITY_BY_PRIORITY = {"CRITICAL": "critical", "HIGH": "error", "NORMAL": "warning", "LOW": "info"}
SEVERITY_DEFAULT = "warning"
SUMMARY_MAX_CHARS = 1024
DEDUP_KEY_MAX_CHARS = 255


def dedup_key(token: str) -> str:
    """The token itself when PagerDuty accepts its length, else its SHA-256 hex digest."""
    return (
        token if len(token) <= DEDUP_KEY_MAX_CHARS else hashlib.sha256(token.encode()).hexdigest()
    )


def pagerduty_event(
    message: OutboundMessage, routing_key: str, links: AnswerLinks | None = None
) -> dict[str, Any]:
    """The Events v2 trigger for one notification; with ``links``, PagerDuty shows the
    Acknowledge/Dismiss links on the alert."""
    summary = " ".join((message.title or message.message).split()) or message.notification_type
    event: dict[str, Any] = {
        "routing_key": routing_key,
        "event_action": "trigger",
        "dedup_key": dedup_key(message.idempotency_token),
        "client": "UNS",
        "payload": {
            "summary": summary[:SUMMARY_MAX_CHARS],
            "source": message.source or "uns",
            "severity": SEVERITY_BY_PRIORITY.get(message.priority.upper(), SEVERITY_DEFAULT),
            "class": message.notification_type,
            "custom_details": {
                "notification_id": message.notification_id,
                "notification_type": message.notification_type,
                "intent": message.intent,
                "priority": message.priority,
                "message": message.message,
                "correlation_id": message.correlation_id,
                "metadata": dict(message.metadata),
                "attempt": message.attempt,
            },
        },
    }
    if message.recipient_id:  # a targeted person's own incident (same routing key)
        custom = event["payload"]["custom_details"]
        custom["uns_recipient_id"] = message.recipient_id
        custom["uns_recipient_address"] = message.to
    if links is not None:
        event["links"] = [
            {"href": links.acknowledge_url, "text": "Acknowledge in UNS"},
            {"href": links.dismiss_url, "text": "Dismiss in UNS"},
        ]
    return event


class PagerDutyChannel(HttpChannel):
    """Triggers one PagerDuty alert per notification on one integration (routing key)."""

    def __init__(
        self,
        name: str,
        config: PagerDutyConfig,
        client: OutboundClient,
        *,
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        secrets = tuple(s for s in (config.routing_key, config.webhook_secret) if s)
        super().__init__(name, client, secrets=secrets, on_close=on_close)
        self._config = config
        # The routing key is a credential: the channel's name stands for the service.
        self.recipient = f"pagerduty:{name}"

    async def _update(
        self, reference: Mapping[str, str], settlement: ObligationOutcome
    ) -> ChannelResult:
        """The obligation ended: ``resolve`` the incident (acknowledged, dismissed or
        withdrawn: nobody needs paging any more). ``acknowledge`` would not do: its
        ``acknowledgement_timeout`` re-pages for an obligation that is over. A timeout
        leaves the incident open (escalation is required) unless ``resolve_on_timeout``."""
        key = reference.get("pagerduty_dedup_key")
        if not key:
            return ChannelResult.permanent("no PagerDuty dedup_key to update")
        if settlement.state == "TIMED_OUT" and not self._config.resolve_on_timeout:
            return ChannelResult.delivered(key, metadata={"event_action": "none"})
        data = await self._enqueue(
            {"routing_key": self._config.routing_key, "event_action": "resolve", "dedup_key": key}
        )
        if isinstance(data, ChannelResult):
            return data
        return ChannelResult.delivered(
            key, metadata={"http_status": 202, "event_action": "resolve"}
        )

    async def _enqueue(self, event: Mapping[str, Any]) -> dict[str, Any] | ChannelResult:
        """POST one event to ``/v2/enqueue``: the accepted answer's JSON, or the failure
        (only HTTP 202 with ``{"status": "success"}`` counts as accepted)."""
        body = encode_json(event)
        if isinstance(body, ChannelResult):
            return body
        reply = await self._post(
            f"{self._config.base_url}/v2/enqueue",
            content=body,
            headers={"content-type": "application/json"},
            timeout_seconds=self._config.timeout_seconds,
        )
        if isinstance(reply, ChannelResult):
            return reply
        failure = classify_http_response(reply, now=self._now())
        if failure is not None:
            return failure
        data = reply.json_object()
        if reply.status != 202 or data is None or data.get("status") != "success":
            return unexpected_success(reply, 'HTTP 202 with JSON {"status": "success"}')
        return data

    async def _deliver(self, message: OutboundMessage) -> ChannelResult:
        event = pagerduty_event(
            message, self._config.routing_key, message.action_links(self.recipient)
        )
        data = await self._enqueue(event)
        if isinstance(data, ChannelResult):
            return data
        returned = data.get("dedup_key")
        key = returned if isinstance(returned, str) and returned else event["dedup_key"]
        return ChannelResult.delivered(
            key,
            metadata={"http_status": 202},
            reference={
                "type": "pagerduty",
                "recipient": self.recipient,
                "pagerduty_dedup_key": key,
            },
        )

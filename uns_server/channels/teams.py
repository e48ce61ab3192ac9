"""Microsoft Teams: an Adaptive Card posted to a Teams Workflows webhook (the "Post to a
channel when a webhook request is received" workflow), one message per notification to
the channel the workflow posts in (channel-wide: no person's contact).

The body is the message shape the workflow expects: ``{"type": "message", "attachments":
[{"contentType": "application/vnd.microsoft.card.adaptive", "content": <AdaptiveCard
1.4>}]}``. A notification that needs an answer carries ``Action.OpenUrl`` buttons to its
Acknowledge/Dismiss action links (Teams has no callback to a webhook's sender). When the
obligation ends, a follow-up card says how (``update``).

Accepted is any 2xx (a workflow answers 202 with an empty body); the run id it returns
(``x-ms-workflow-run-id``) is the message id when present. 429 carries Retry-After, 5xx
and timeouts are transient, other 4xx permanent. The workflow URL carries its own
signature (``sig=``): it is a credential and never appears in results or logs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from uns_server.channels._http import HttpChannel, classify_http_response, encode_json
from uns_server.channels.base import AnswerLinks, ChannelResult, ObligationOutcome, OutboundMessage
from uns_server.channels.config import TeamsConfig
from uns_server.channels.http_transport import OutboundClient

CARD_CONTENT_TYPE = "application/vnd.microsoft.card.adaptive"
CARD_SCHEMA = "http://adaptivecards.io/schemas/adaptive-card.json"
CARD_VERSION = "1.4"
RUN_ID_HEADER = "x-ms-workflow-run-id"
_COLOR_BY_PRIORITY = {"CRITICAL": "Attention", "HIGH": "Warning"}
_OUTCOME_COLOR = {"ACKED": "Good", "DISMISSED": "Default", "TIMED_OUT": "Attention"}


def _text(text: str, **style: Any) -> dict[str, Any]:
    return {"type": "TextBlock", "text": text, "wrap": True, **style}


def _facts(message: OutboundMessage | ObligationOutcome) -> dict[str, Any]:
    shown = (("Priority", message.priority), ("Intent", message.intent), ("Source", message.source))
    return {"type": "FactSet", "facts": [{"title": k, "value": v} for k, v in shown if v]}


def message_card(content: dict[str, Any]) -> dict[str, Any]:
    """The webhook body around one Adaptive Card."""
    return {
        "type": "message",
        "attachments": [{"contentType": CARD_CONTENT_TYPE, "contentUrl": None, "content": content}],
    }


def teams_card(message: OutboundMessage, links: AnswerLinks | None) -> dict[str, Any]:
    """The card of one notification; with ``links``, Acknowledge/Dismiss buttons."""
    card: dict[str, Any] = {
        "$schema": CARD_SCHEMA,
        "type": "AdaptiveCard",
        "version": CARD_VERSION,
        "body": [
            _text(
                message.title or message.notification_type,
                size="Medium",
                weight="Bolder",
                color=_COLOR_BY_PRIORITY.get(message.priority.upper(), "Default"),
            ),
            _text(message.message),
            _facts(message),
        ],
    }
    if links is not None:
        card["actions"] = [
            {"type": "Action.OpenUrl", "title": "Acknowledge", "url": links.acknowledge_url},
            {"type": "Action.OpenUrl", "title": "Dismiss", "url": links.dismiss_url},
        ]
    return message_card(card)


def outcome_card(settlement: ObligationOutcome) -> dict[str, Any]:
    """The follow-up card: the notification's title and how its obligation ended."""
    return message_card(
        {
            "$schema": CARD_SCHEMA,
            "type": "AdaptiveCard",
            "version": CARD_VERSION,
            "body": [
                _text(settlement.title or "Notification", weight="Bolder"),
                _text(settlement.summary, color=_OUTCOME_COLOR.get(settlement.state, "Default")),
            ],
        }
    )


class TeamsChannel(HttpChannel):
    """Posts one card per notification to a Teams Workflows webhook."""

    def __init__(
        self,
        name: str,
        config: TeamsConfig,
        client: OutboundClient,
        *,
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        # The whole URL and its signature alone are masked wherever they turn up.
        sig = [v for k, v in parse_qsl(urlsplit(config.url).query) if k == "sig"]
        super().__init__(name, client, secrets=(config.url, *sig), on_close=on_close)
        self._config = config
        # The URL is a credential: the channel's name stands for the Teams channel.
        self.recipient = f"teams:{name}"

    async def _deliver(self, message: OutboundMessage) -> ChannelResult:
        if message.to:  # contacts are refused on Teams channels; one put before lands here
            return ChannelResult.permanent("a Teams workflow posts to its channel, not to a person")
        return await self._post_card(teams_card(message, message.action_links(self.recipient)))

    async def _update(
        self, reference: Mapping[str, str], settlement: ObligationOutcome
    ) -> ChannelResult:
        """A follow-up card in the same Teams channel."""
        return await self._post_card(outcome_card(settlement))

    async def _post_card(self, payload: dict[str, Any]) -> ChannelResult:
        body = encode_json(payload)
        if isinstance(body, ChannelResult):
            return body
        reply = await self._post(
            self._config.url,
            content=body,
            headers={"content-type": "application/json"},
            timeout_seconds=self._config.timeout_seconds,
        )
        if isinstance(reply, ChannelResult):
            return reply
        failure = classify_http_response(reply, now=self._now())
        if failure is not None:
            return failure
        run_id = reply.headers.get(RUN_ID_HEADER) or None
        reference = {"type": "teams", "recipient": self.recipient}
        if run_id:
            reference["teams_run_id"] = run_id
        return ChannelResult.delivered(
            run_id, metadata={"http_status": reply.status}, reference=reference
        )

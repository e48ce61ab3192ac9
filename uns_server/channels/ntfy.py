"""ntfy push: the JSON publish (``POST {base_url}`` with ``topic``, ``title``, ``message``,
``priority``, ``tags``, ``actions``), one message per person on their own topic.

Accepted means what ntfy answers to a publish: HTTP 200 with the message as JSON
(``{"id": "...", "event": "message", "topic": "..."}``); its ``id`` is the message id and,
with the topic, the reference. Errors come back as JSON ``{"code": 40301, "http": 403,
"error": "..."}``: 429 (ntfy's per-visitor limits) carries Retry-After, 5xx and timeouts
are transient, every other 4xx (a forbidden topic, a bad token) is permanent.

Answering from the phone: a message that needs an answer carries three action buttons,
ntfy's maximum. "Acknowledge" and "Dismiss" are ``http`` actions, a ``POST`` the ntfy app
sends itself to the machine-answer endpoint of the person's signed link
(``POST /a/{token}/answer?via=ntfy``): no browser and no session, the token in the URL is
the credential. "Snooze 30 min" is the same endpoint with ``action=snooze`` on the
acknowledge link (whoever may acknowledge may snooze). Tapping the notification opens the
link's page (``click``). When the obligation ends,
a follow-up publish to the same topic says how (``update``), at low priority so it does
not wake anyone again.

The access token (optional, ``Authorization: Bearer``) never appears in results or logs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from uns_server.channels._http import (
    HttpChannel,
    classify_http_response,
    encode_json,
    unexpected_success,
)
from uns_server.channels.base import AnswerLinks, ChannelResult, ObligationOutcome, OutboundMessage
from uns_server.channels.config import NtfyConfig
from uns_server.channels.http_transport import OutboundClient

# ntfy priorities: 1 min, 2 low, 3 default, 4 high, 5 max (urgent: long vibration bursts,
# pop-over). A SAFETY notification is always urgent.
PRIORITY_BY_PRIORITY = {"CRITICAL": 5, "HIGH": 4, "NORMAL": 3, "LOW": 2}
PRIORITY_DEFAULT = 3
OUTCOME_PRIORITY = 2
ANSWER_SUFFIX = "/answer?via=ntfy"
SNOOZE_QUERY = "&action=snooze"
OUTCOME_TAGS = {
    "ACKED": "white_check_mark",
    "DISMISSED": "no_entry_sign",
    "TIMED_OUT": "alarm_clock",
    "WITHDRAWN": "leftwards_arrow_with_hook",
}


def ntfy_priority(message: OutboundMessage) -> int:
    if message.intent == "SAFETY":
        return 5
    return PRIORITY_BY_PRIORITY.get(message.priority.upper(), PRIORITY_DEFAULT)


def ntfy_actions(links: AnswerLinks) -> list[dict[str, Any]]:
    """Acknowledge / Dismiss / Snooze answered by the app itself (``http``): ntfy's
    three buttons; the page opens by tapping the notification (``click``)."""

    def answer(label: str, url: str) -> dict[str, Any]:
        return {"action": "http", "label": label, "url": url + ANSWER_SUFFIX, "method": "POST"}

    snooze = links.acknowledge_url + ANSWER_SUFFIX + SNOOZE_QUERY
    return [
        {**answer("Acknowledge", links.acknowledge_url), "clear": True},
        {**answer("Dismiss", links.dismiss_url), "clear": True},
        {**answer("Snooze 30 min", links.acknowledge_url), "url": snooze},
    ]


def ntfy_publish(message: OutboundMessage, topic: str, links: AnswerLinks | None) -> dict[str, Any]:
    """The JSON publish of one notification to ``topic``."""
    payload: dict[str, Any] = {
        "topic": topic,
        "title": message.title or message.notification_type,
        "message": message.message or message.title,
        "priority": ntfy_priority(message),
        "tags": [t for t in (message.intent.lower(), message.notification_type) if t],
    }
    if links is not None:
        payload["actions"] = ntfy_actions(links)
        payload["click"] = links.acknowledge_url
    return payload


def ntfy_outcome(settlement: ObligationOutcome, topic: str) -> dict[str, Any]:
    """The follow-up publish: how the obligation ended, no buttons."""
    return {
        "topic": topic,
        "title": settlement.title or "Notification",
        "message": settlement.summary,
        "priority": OUTCOME_PRIORITY,
        "tags": [OUTCOME_TAGS.get(settlement.state, "information_source")],
    }


class NtfyChannel(HttpChannel):
    """Publishes each person's message to their ntfy topic."""

    def __init__(
        self,
        name: str,
        config: NtfyConfig,
        client: OutboundClient,
        *,
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(
            name, client, secrets=tuple(s for s in (config.token,) if s), on_close=on_close
        )
        self._config = config

    async def _deliver(self, message: OutboundMessage) -> ChannelResult:
        topic = message.to
        if not topic:
            # Contacts carry the topics; a policy naming this channel for everyone
            # has nowhere to publish.
            return ChannelResult.permanent(
                "an ntfy channel publishes to a person's topic (their contact); "
                "it has no topic of its own"
            )
        links = message.action_links(f"ntfy:{topic}")
        return await self._publish(ntfy_publish(message, topic, links))

    async def _update(
        self, reference: Mapping[str, str], settlement: ObligationOutcome
    ) -> ChannelResult:
        """A follow-up publish to the topic the message went to."""
        topic = reference.get("ntfy_topic")
        if not topic:
            return ChannelResult.permanent("this ntfy message names no topic to follow up on")
        return await self._publish(ntfy_outcome(settlement, topic))

    async def _publish(self, payload: dict[str, Any]) -> ChannelResult:
        body = encode_json(payload)
        if isinstance(body, ChannelResult):
            return body
        headers = {"content-type": "application/json"}
        if self._config.token:
            headers["authorization"] = f"Bearer {self._config.token}"
        reply = await self._post(
            self._config.base_url,
            content=body,
            headers=headers,
            timeout_seconds=self._config.timeout_seconds,
        )
        if isinstance(reply, ChannelResult):
            return reply
        failure = classify_http_response(reply, now=self._now())
        if failure is not None:
            return failure
        data = reply.json_object()
        message_id = data.get("id") if data else None
        if not isinstance(message_id, str) or not message_id:
            return unexpected_success(reply, 'HTTP 200 with the published message {"id": ...}')
        topic = str(payload["topic"])
        return ChannelResult.delivered(
            message_id,
            metadata={"http_status": reply.status, "ntfy_id": message_id},
            reference={
                "type": "ntfy",
                "recipient": f"ntfy:{topic}",
                "ntfy_topic": topic,
                "ntfy_id": message_id,
            },
        )

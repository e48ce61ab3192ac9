"""Slack: Web API ``chat.postMessage`` with a bot token, or an incoming-webhook URL.

What counts as accepted (Slack's documented answers):

* Web API -- HTTP 200 with JSON ``{"ok": true, "ts": "...", "channel": "..."}``; ``ts`` is
  the message id. ``{"ok": false, "error": code}`` is a rejection: ``ratelimited`` and
  Slack's own server-side errors (``internal_error``, ``fatal_error``,
  ``service_unavailable``, ``request_timeout``) are transient, every other code
  (``channel_not_found``, ``invalid_auth``, ...) is permanent. HTTP 429 carries Retry-After.
* Incoming webhook -- HTTP 200 with the plain-text body ``ok``. Errors come back as 4xx
  with a short code body (``invalid_payload``, ``no_service``, ``channel_is_archived``).
  Slack returns no message id in this mode.

The bot token and the webhook URL are credentials (the URL's path is the secret): neither
appears in results, and the HTTP library's logs are filtered for both while the channel is open.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

from uns_server.channels._http import (
    HttpChannel,
    HttpReply,
    classify_http_response,
    encode_json,
    parse_retry_after,
    unexpected_success,
)
from uns_server.channels.base import AnswerLinks, ChannelResult, ObligationOutcome, OutboundMessage
from uns_server.channels.config import SlackConfig
from uns_server.channels.http_transport import OutboundClient

# ``ok: false`` codes that describe Slack's condition, not our request.
TRANSIENT_SLACK_ERRORS = frozenset(
    {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}
)
# Slack documents that these may follow a partially completed operation.
_EFFECT_POSSIBLE_ERRORS = frozenset({"internal_error", "fatal_error", "request_timeout"})


def _escape(text: str) -> str:
    """Slack mrkdwn control characters, escaped as Slack documents (&, <, >)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_text(message: OutboundMessage | ObligationOutcome) -> str:
    """Title in bold, the message, and a context line; producer text cannot inject mentions."""
    context = " · ".join(
        _escape(part) for part in (message.priority, message.intent, message.source) if part
    )
    return f"*{_escape(message.title)}*\n{_escape(message.message)}\n_{context}_"


SETTLED_ICONS = {
    "ACKED": ":white_check_mark:",
    "DISMISSED": ":no_entry_sign:",
    "TIMED_OUT": ":alarm_clock:",
    "WITHDRAWN": ":leftwards_arrow_with_hook:",
    "SNOOZED": ":zzz:",
}


def _outcome_blocks(outcome: ObligationOutcome) -> list[dict[str, Any]]:
    """The text, then a context line saying who answered what (and when)."""
    actor = outcome.actor
    # A Slack user who answered is shown as a mention; anyone else as escaped text.
    shown = f"<@{actor[6:]}>" if actor.startswith("slack:U") else _escape(actor)
    line = _escape(outcome.summary).replace(_escape(actor), shown, 1)
    icon = SETTLED_ICONS.get(outcome.state, ":information_source:")
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": slack_text(outcome)}},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": f"{icon} {line}"}]},
    ]


def settled_blocks(settlement: ObligationOutcome) -> list[dict[str, Any]]:
    """The message once the obligation ended: the text, the outcome, no buttons."""
    return _outcome_blocks(settlement)


ACK_ACTION_ID = "uns_ack"
DISMISS_ACTION_ID = "uns_dismiss"
# Snooze answers with the Acknowledge link's token: whoever may acknowledge may snooze.
SNOOZE_ACTION_ID = "uns_snooze"
SNOOZE_LABEL = "Snooze 30 min"


def _answer_actions(links: AnswerLinks, *, interactive: bool) -> dict[str, Any]:
    """The buttons: Acknowledge, Dismiss, and (answered in Slack) Snooze."""

    def button(label: str, action_id: str, token: str, url: str) -> dict[str, Any]:
        element: dict[str, Any] = {
            "type": "button",
            "text": {"type": "plain_text", "text": label},
            "action_id": action_id,
            "value": token,
        }
        if not interactive:
            element["url"] = url
        return element

    ack = button("Acknowledge", ACK_ACTION_ID, links.acknowledge_token, links.acknowledge_url)
    ack["style"] = "primary"
    dismiss = button("Dismiss", DISMISS_ACTION_ID, links.dismiss_token, links.dismiss_url)
    elements = [ack, dismiss]
    if interactive:  # a link button would only open the Acknowledge page, which offers it
        token, url = links.acknowledge_token, links.acknowledge_url
        elements.append(button(SNOOZE_LABEL, SNOOZE_ACTION_ID, token, url))
    return {"type": "actions", "block_id": "uns_answer", "elements": elements}


def slack_blocks(
    message: OutboundMessage, links: AnswerLinks, *, interactive: bool
) -> list[dict[str, Any]]:
    """Block Kit: the text, then Acknowledge / Dismiss (/ Snooze) buttons. Interactive
    buttons (the app has a signing secret) answer in Slack, as the Slack user who
    clicks; their ``value`` is the link token, which binds the notification and the
    action. Without interactivity the buttons open the action links."""
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": slack_text(message)}},
        _answer_actions(links, interactive=interactive),
    ]


def snoozed_blocks(snoozed: ObligationOutcome, links: AnswerLinks) -> list[dict[str, Any]]:
    """The message once someone snoozed it: who and until when, and the buttons still
    there (the answer is still owed), with ``links`` issued for the moved deadline."""
    return [*_outcome_blocks(snoozed), _answer_actions(links, interactive=True)]


class SlackChannel(HttpChannel):
    """Posts one message per notification to a configured Slack channel."""

    def __init__(
        self,
        name: str,
        config: SlackConfig,
        client: OutboundClient,
        *,
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        secrets = tuple(s for s in (config.token, config.webhook_url, config.signing_secret) if s)
        if config.webhook_url:
            # The path is the credential (services/T.../B.../<secret>); mask it and its
            # last segment wherever they turn up, e.g. echoed back in an error body.
            path = unquote(urlsplit(config.webhook_url).path).strip("/")
            secrets += (path, path.rpartition("/")[2])
        super().__init__(name, client, secrets=secrets, on_close=on_close)
        self._config = config
        # Who the message reaches: the configured channel, or the webhook's own channel.
        self.recipient = f"slack:{config.channel or name}"

    async def reply_ephemeral(self, response_url: str, text: str) -> ChannelResult:
        """Answer a button press only to the person who pressed it (Slack's
        ``response_url`` with ``response_type: ephemeral``; the message stays)."""
        return await self._respond(
            response_url, {"response_type": "ephemeral", "replace_original": False, "text": text}
        )

    async def show_snoozed(
        self, response_url: str, snoozed: ObligationOutcome, links: AnswerLinks
    ) -> ChannelResult:
        """Replace the message whose Snooze button was pressed (Slack's ``response_url``
        with ``replace_original``) by ``snoozed_blocks``."""
        text = f"{slack_text(snoozed)}\n{_escape(snoozed.summary)}"
        body = {"replace_original": True, "text": text, "blocks": snoozed_blocks(snoozed, links)}
        return await self._respond(response_url, body)

    async def _respond(self, response_url: str, payload: dict[str, Any]) -> ChannelResult:
        body = encode_json(payload)
        if isinstance(body, ChannelResult):
            return body
        reply = await self._post(
            response_url,
            content=body,
            headers={"content-type": "application/json"},
            timeout_seconds=self._config.timeout_seconds,
        )
        if isinstance(reply, ChannelResult):
            return reply
        return classify_http_response(reply, now=self._now()) or ChannelResult.delivered(None)

    async def _deliver(self, message: OutboundMessage) -> ChannelResult:
        if message.to and self._config.token is None:
            # People's contacts are refused on such channels; a contact put before the
            # channel changed mode lands here.
            return ChannelResult.permanent(
                "an incoming webhook cannot send a direct message (use the Web API mode)"
            )
        if self._config.token is not None:
            result = await self._post_message(message, self._config.token)
            if message.to and result.success:
                reference = {**result.reference, "recipient": f"slack:{message.to}"}
                return ChannelResult.delivered(
                    result.message_id, metadata=result.metadata, reference=reference
                )
            return result
        assert self._config.webhook_url is not None  # config validation guarantees one mode
        return await self._post_incoming_webhook(message, self._config.webhook_url)

    async def _post_message(self, message: OutboundMessage, token: str) -> ChannelResult:
        payload: dict[str, Any] = {
            # A person's own message: a direct message to their Slack user id.
            "channel": message.to or self._config.channel,
            "text": slack_text(message),
            "unfurl_links": False,
            "unfurl_media": False,
        }
        links = message.action_links(self.recipient)
        if links is not None:
            interactive = self._config.signing_secret is not None
            payload["blocks"] = slack_blocks(message, links, interactive=interactive)
        return await self._web_api("chat.postMessage", payload, token)

    async def _web_api(self, method: str, payload: dict[str, Any], token: str) -> ChannelResult:
        """One Web API call (``chat.postMessage``, ``chat.update``) and its classified answer."""
        body = encode_json(payload)
        if isinstance(body, ChannelResult):
            return body
        reply = await self._post(
            f"{self._config.base_url}/{method}",
            content=body,
            headers={
                "authorization": f"Bearer {token}",
                "content-type": "application/json; charset=utf-8",
            },
            timeout_seconds=self._config.timeout_seconds,
        )
        if isinstance(reply, ChannelResult):
            return reply
        return self._web_api_result(reply)

    def _web_api_result(self, reply: HttpReply) -> ChannelResult:
        failure = classify_http_response(reply, now=self._now())
        if failure is not None:
            return failure
        data = reply.json_object()
        if reply.status != 200 or data is None or not isinstance(data.get("ok"), bool):
            return unexpected_success(reply, 'HTTP 200 with JSON {"ok": ...}')
        if data["ok"]:
            ts = data.get("ts")
            ts = ts if isinstance(ts, str) and ts else None
            channel = str(data.get("channel", ""))
            return ChannelResult.delivered(
                ts,
                metadata={"http_status": 200, "slack_channel": channel},
                reference={
                    "type": "slack",
                    "recipient": self.recipient,
                    "slack_channel": channel,
                    "slack_ts": ts or "",
                },
            )
        code = data.get("error")
        code = code if isinstance(code, str) and code else "unknown_error"
        metadata = {
            "http_status": 200,
            "slack_error": code,
            "provider_effect_possible": code in _EFFECT_POSSIBLE_ERRORS,
        }
        if code in TRANSIENT_SLACK_ERRORS:
            retry_after = parse_retry_after(reply.headers.get("retry-after"), now=self._now())
            return ChannelResult.transient(
                f"slack error: {code}",
                retry_after_seconds=retry_after,
                metadata=metadata,
                throttled=code == "ratelimited",
            )
        return ChannelResult.permanent(f"slack error: {code}", metadata=metadata)

    async def _update(
        self, reference: Mapping[str, str], settlement: ObligationOutcome
    ) -> ChannelResult:
        """``chat.update`` of the message ``reference`` names (Web API mode only)."""
        channel, ts = reference.get("slack_channel"), reference.get("slack_ts")
        if self._config.token is None or not channel or not ts:
            return ChannelResult.permanent("this Slack message cannot be updated (no channel/ts)")
        return await self._web_api(
            "chat.update",
            {
                "channel": channel,
                "ts": ts,
                "text": f"{slack_text(settlement)}\n{_escape(settlement.summary)}",
                "blocks": settled_blocks(settlement),
            },
            self._config.token,
        )

    async def _post_incoming_webhook(self, message: OutboundMessage, url: str) -> ChannelResult:
        payload: dict[str, Any] = {"text": slack_text(message)}
        links = message.action_links(self.recipient)
        if links is not None:
            payload["blocks"] = slack_blocks(message, links, interactive=False)
        body = encode_json(payload)
        if isinstance(body, ChannelResult):
            return body
        reply = await self._post(
            url,
            content=body,
            headers={"content-type": "application/json"},
            timeout_seconds=self._config.timeout_seconds,
        )
        if isinstance(reply, ChannelResult):
            return reply
        failure = classify_http_response(reply, now=self._now())
        if failure is not None:
            return failure
        if reply.status != 200 or reply.body.strip() != b"ok":
            return unexpected_success(reply, "HTTP 200 with body 'ok'")
        return ChannelResult.delivered(
            None,
            metadata={"http_status": 200, "slack_mode": "incoming_webhook"},
            # Slack returns no message reference here: such messages cannot be updated.
            reference={"type": "slack", "recipient": self.recipient},
        )

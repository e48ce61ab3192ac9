"""Telegram: Bot API ``sendMessage`` (``POST {base_url}/bot{token}/sendMessage``, JSON)
to a person's chat, with Acknowledge / Dismiss / Snooze 30 min inline buttons answered
in Telegram.

Accepted means what the Bot API answers: HTTP 200 with ``{"ok": true, "result":
<Message>}``; the message's ``message_id`` and its chat's numeric ``id`` are the
reference (a contact given as a channel's ``@username`` is recorded by the id Telegram
answers with, which is what a button press names). Errors come back as ``{"ok": false,
"error_code": N, "description": "...", "parameters": {...}}`` with HTTP status N: 429
(flood control) is throttled with ``parameters.retry_after`` (or Retry-After), 5xx and
timeouts are transient, every other code (chat not found, the bot blocked by the user, a
bad token) permanent.

The buttons carry ``callback_data`` naming the notification and the answer
(``domain.telegram_updates``); Telegram posts the press to
``/integrations/telegram/{channel name}`` with the channel's ``secret_token``, and UNS
answers it with ``answerCallbackQuery`` (``answer_callback``). When the obligation
ends, ``editMessageText`` shows the outcome and removes the buttons (``update``).
Text is sent without ``parse_mode``: a producer's text cannot inject markup.

The bot token is in every request's path and never appears in results or logs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from uns_server.channels._http import (
    HttpChannel,
    HttpReply,
    classify_http_response,
    encode_json,
    unexpected_success,
)
from uns_server.channels.base import ChannelResult, ObligationOutcome, OutboundMessage
from uns_server.channels.config import TelegramConfig
from uns_server.channels.http_transport import OutboundClient
from uns_server.domain.telegram_updates import ACK, DISMISS, SNOOZE, callback_data

TEXT_MAX_CHARS = 4096  # sendMessage's limit (after entity parsing; none here)
CALLBACK_TEXT_MAX_CHARS = 200  # answerCallbackQuery's
ERROR_DESCRIPTION_MAX_CHARS = 200
SETTLED_ICONS = {"ACKED": "✅", "DISMISSED": "🚫", "TIMED_OUT": "⏰", "WITHDRAWN": "↩️"}
# editMessageText's answer when the text is already what we asked for: an update
# delivered twice (a retried job whose first call landed) has done its work.
_NOT_MODIFIED = "message is not modified"


def telegram_text(message: OutboundMessage | ObligationOutcome) -> str:
    """Title, message, and a context line (plain text)."""
    context = " · ".join(p for p in (message.priority, message.intent, message.source) if p)
    text = "\n\n".join(p for p in (message.title, message.message, context) if p)
    return text[:TEXT_MAX_CHARS]


def answer_keyboard(notification_id: str) -> dict[str, Any]:
    """Acknowledge and Dismiss, then Snooze 30 min on a row of its own, each answered
    by a callback to UNS."""

    def button(text: str, answer: str) -> dict[str, str]:
        return {"text": text, "callback_data": callback_data(notification_id, answer)}

    return {
        "inline_keyboard": [
            [button("Acknowledge", ACK), button("Dismiss", DISMISS)],
            [button("Snooze 30 min", SNOOZE)],
        ]
    }


def settled_text(settlement: ObligationOutcome) -> str:
    """The message once the obligation ended: its text and the outcome."""
    icon = SETTLED_ICONS.get(settlement.state, "\N{INFORMATION SOURCE}")
    outcome = f"{icon} {settlement.summary}"
    return f"{telegram_text(settlement)[: TEXT_MAX_CHARS - len(outcome) - 2]}\n\n{outcome}"


class TelegramChannel(HttpChannel):
    """Sends each person's message to their Telegram chat through one bot."""

    def __init__(
        self,
        name: str,
        config: TelegramConfig,
        client: OutboundClient,
        *,
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(
            name, client, secrets=(config.bot_token, config.secret_token), on_close=on_close
        )
        self._config = config

    async def _deliver(self, message: OutboundMessage) -> ChannelResult:
        chat = message.to
        if not chat:
            # Contacts carry the chat ids; a policy naming this channel for everyone
            # has no chat to send to.
            return ChannelResult.permanent(
                "a Telegram channel sends to a person's chat (their contact); "
                "it has no chat of its own"
            )
        payload: dict[str, Any] = {"chat_id": chat, "text": telegram_text(message)}
        # Buttons only where an answer is owed and the HTTP surface can take it.
        if message.action_links(f"telegram:{chat}") is not None:
            payload["reply_markup"] = answer_keyboard(message.notification_id)
        answer = await self._call("sendMessage", payload)
        if isinstance(answer, ChannelResult):
            return answer
        reply, sent = answer
        sent = sent if isinstance(sent, dict) else {}
        chat_data = sent.get("chat")
        message_id = _int(sent.get("message_id"))
        chat_id = _int(chat_data.get("id")) if isinstance(chat_data, dict) else None
        if message_id is None or chat_id is None:
            return unexpected_success(reply, 'JSON {"ok": true, "result": <Message>}')
        return ChannelResult.delivered(
            str(message_id),
            metadata={"http_status": reply.status},
            reference={
                "type": "telegram",
                "recipient": f"telegram:{chat}",
                "telegram_chat_id": str(chat_id),
                "telegram_message_id": str(message_id),
            },
        )

    async def _update(
        self, reference: Mapping[str, str], settlement: ObligationOutcome
    ) -> ChannelResult:
        """``editMessageText`` of the message ``reference`` names: the outcome shown,
        the buttons gone."""
        chat, message_id = reference.get("telegram_chat_id"), reference.get("telegram_message_id")
        if not chat or not message_id or not message_id.isdigit():
            return ChannelResult.permanent("this Telegram message names no chat and message id")
        payload = {
            "chat_id": chat,
            "message_id": int(message_id),
            "text": settled_text(settlement),
            "reply_markup": {"inline_keyboard": []},
        }
        answer = await self._call("editMessageText", payload)
        if isinstance(answer, ChannelResult):
            if _NOT_MODIFIED in str(answer.metadata.get("telegram_error", "")):
                return ChannelResult.delivered(message_id, metadata={"telegram": _NOT_MODIFIED})
            return answer
        return ChannelResult.delivered(message_id, metadata={"http_status": answer[0].status})

    async def answer_callback(self, callback_id: str, text: str) -> ChannelResult:
        """``answerCallbackQuery``: ``text`` shown to the person who pressed."""
        payload = {"callback_query_id": callback_id, "text": text[:CALLBACK_TEXT_MAX_CHARS]}
        answer = await self._call("answerCallbackQuery", payload)
        if isinstance(answer, ChannelResult):
            return answer
        return ChannelResult.delivered(None, metadata={"http_status": answer[0].status})

    async def _call(
        self, method: str, payload: dict[str, Any]
    ) -> ChannelResult | tuple[HttpReply, Any]:
        """One Bot API call: the reply and its ``result`` when Telegram answered
        ``ok: true``, else the classified failure."""
        body = encode_json(payload)
        if isinstance(body, ChannelResult):
            return body
        reply = await self._post(
            f"{self._config.base_url}/bot{self._config.bot_token}/{method}",
            content=body,
            headers={"content-type": "application/json"},
            timeout_seconds=self._config.timeout_seconds,
        )
        if isinstance(reply, ChannelResult):
            return reply
        data = reply.json_object() or {}
        if 200 <= reply.status < 300 and data.get("ok") is True:
            return reply, data.get("result")
        return self._failure(reply, data)

    def _failure(self, reply: HttpReply, data: dict[str, Any]) -> ChannelResult:
        """Classified by Telegram's ``error_code`` (the HTTP status it answers with),
        else by the HTTP status (a proxy's 502 has no JSON); 429's wait is
        ``parameters.retry_after``."""
        code = _int(data.get("error_code"))
        status = code if code is not None and data.get("ok") is False else reply.status
        failure = classify_http_response(dataclasses.replace(reply, status=status), now=self._now())
        if failure is None:  # a 2xx that is not the Bot API's {"ok": ...}
            return unexpected_success(reply, 'JSON {"ok": true, ...}')
        metadata = {**failure.metadata, "http_status": reply.status}
        if status != reply.status:
            metadata["telegram_error_code"] = status
        description = data.get("description")
        if isinstance(description, str) and description:
            metadata["telegram_error"] = description[:ERROR_DESCRIPTION_MAX_CHARS]
        retry_after = failure.retry_after_seconds
        parameters = data.get("parameters")
        hint = _int(parameters.get("retry_after")) if isinstance(parameters, dict) else None
        if status == 429 and hint is not None and hint >= 0:
            retry_after = float(hint)
        return dataclasses.replace(failure, metadata=metadata, retry_after_seconds=retry_after)


def _int(value: Any) -> int | None:
    """A JSON integer (not a bool), or None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None

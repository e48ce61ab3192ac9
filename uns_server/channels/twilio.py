"""Twilio SMS: the Messages API (``POST {base_url}/2010-04-01/Accounts/{sid}/Messages.json``,
form-encoded ``To``, ``From``, ``Body``, HTTP basic auth ``account_sid:auth_token``), one
message per person to their number (their contact).

Accepted means what Twilio answers to a create: HTTP 201 (or 200) with the resource as
JSON; its ``sid`` (``SM...``) is the message id and the reference. Errors come back as
JSON ``{"code": 21211, "message": "...", "status": 400}``: 429 (Twilio's concurrency
limit, code 20429) and 5xx are transient, every other 4xx (a number Twilio cannot
reach, bad credentials) permanent; the Twilio error code is kept in the metadata.

Answering: the text says how (reply ``ACK``/``1`` or ``DISMISS``/``2``, and the
notification's answer code for someone who owes several answers at once); Twilio posts
the reply to ``POST /integrations/twilio/sms`` (``http.twilio``). When the obligation
ends, an SMS with the outcome is sent only if the channel sets ``notify_outcome``.

``TwilioChannel`` is the part both Twilio types share (``channels.twilio_voice``).
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any
from urllib.parse import quote, urlencode

from uns_server.channels._http import HttpChannel, classify_http_response, unexpected_success
from uns_server.channels.base import ChannelResult, ObligationOutcome, OutboundMessage
from uns_server.channels.http_transport import OutboundClient
from uns_server.channels.twilio_config import TwilioSmsConfig, TwilioVoiceConfig
from uns_server.domain.twilio import answer_code

API_VERSION = "2010-04-01"
SMS_MAX_CHARS = 1600  # Twilio refuses a longer Body (error 21617)
SMS_PREFIX = "sms:"
NOTIFY_OUTCOME = "twilio_notify_outcome"


class TwilioChannel(HttpChannel):
    """Creates Twilio resources (a Message, a Call) with the channel's account."""

    type = ""  # "twilio_sms" / "twilio_voice": the reference's ``type``

    def __init__(
        self,
        name: str,
        config: TwilioSmsConfig | TwilioVoiceConfig,
        client: OutboundClient,
        *,
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        basic = base64.b64encode(f"{config.account_sid}:{config.auth_token}".encode()).decode()
        super().__init__(name, client, secrets=(config.auth_token, basic), on_close=on_close)
        self.config = config
        self._authorization = f"Basic {basic}"

    def _no_number(self) -> ChannelResult:
        # A policy naming this channel for everyone: there is no number to reach.
        return ChannelResult.permanent(
            f"a {self.type} channel reaches a person's number (their contact); "
            "it has no destination of its own"
        )

    async def _create(self, resource: str, params: dict[str, str], recipient: str) -> ChannelResult:
        """POST ``params`` to the account's ``resource`` (``Messages``, ``Calls``)."""
        sid = quote(self.config.account_sid, safe="")
        reply = await self._post(
            f"{self.config.base_url}/{API_VERSION}/Accounts/{sid}/{resource}.json",
            content=urlencode(params).encode(),
            headers={
                "authorization": self._authorization,
                "content-type": "application/x-www-form-urlencoded",
                "accept": "application/json",
            },
            timeout_seconds=self.config.timeout_seconds,
        )
        if isinstance(reply, ChannelResult):
            return reply
        failure = classify_http_response(reply, now=self._now())
        data = reply.json_object()
        if failure is not None:
            code = data.get("code") if data else None
            if isinstance(code, int):
                metadata = {**failure.metadata, "twilio_error_code": code}
                return replace(failure, metadata=metadata)
            return failure
        resource_sid = data.get("sid") if data else None
        if data is None or reply.status not in (200, 201):
            return unexpected_success(reply, 'HTTP 201 with the created resource {"sid": ...}')
        if not isinstance(resource_sid, str) or not resource_sid:
            return unexpected_success(reply, 'HTTP 201 with the created resource {"sid": ...}')
        reference: dict[str, Any] = {
            "type": self.type,
            "recipient": recipient,
            "twilio_sid": resource_sid,
        }
        return ChannelResult.delivered(
            resource_sid,
            metadata={"http_status": reply.status, "twilio_status": str(data.get("status") or "")},
            reference=reference,
        )


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"


def sms_body(message: OutboundMessage, answerable: bool) -> str:
    """The text: title, message, and how to answer (with the answer code)."""
    head = message.title or message.notification_type
    if message.follow_up in ("REMINDER", "SNOOZE_REMINDER"):
        head = f"Reminder: {head}"
    how = ""
    if answerable:
        code = answer_code(message.notification_id)
        how = (
            "\nReply ACK or 1 to acknowledge, DISMISS or 2 to dismiss"
            f" (if several are open, add the code: ACK {code})."
        )
    room = SMS_MAX_CHARS - len(head) - len(how) - 1
    text = f"{head}\n{_clip(message.message, room)}" if message.message and room > 0 else head
    return _clip(text, SMS_MAX_CHARS - len(how)) + how


def outcome_body(settlement: ObligationOutcome) -> str:
    return _clip(f"{settlement.title or 'Notification'}: {settlement.summary}", SMS_MAX_CHARS)


class TwilioSmsChannel(TwilioChannel):
    """Texts each person's number; they answer by replying."""

    type = "twilio_sms"
    config: TwilioSmsConfig

    def __init__(
        self,
        name: str,
        config: TwilioSmsConfig,
        client: OutboundClient,
        *,
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(name, config, client, on_close=on_close)

    async def _deliver(self, message: OutboundMessage) -> ChannelResult:
        if not message.to:
            return self._no_number()
        # Links exist when an answer is owed and the HTTP surface (which takes the
        # reply) is on; the reply itself needs no link.
        answerable = message.action_links(SMS_PREFIX + message.to) is not None
        result = await self._send_sms(message.to, sms_body(message, answerable))
        if result.success and self.config.notify_outcome:
            reference = {**result.reference, NOTIFY_OUTCOME: "true"}
            return ChannelResult.delivered(
                result.message_id, metadata=result.metadata, reference=reference
            )
        return result

    async def _update(
        self, reference: Mapping[str, str], settlement: ObligationOutcome
    ) -> ChannelResult:
        """The outcome SMS (queued only for channels with ``notify_outcome``)."""
        to = str(reference.get("recipient", "")).removeprefix(SMS_PREFIX)
        if not to:
            return ChannelResult.permanent("this SMS names no number to send the outcome to")
        return await self._send_sms(to, outcome_body(settlement))

    async def _send_sms(self, to: str, body: str) -> ChannelResult:
        params = {"To": to, "From": self.config.from_number, "Body": body}
        return await self._create("Messages", params, SMS_PREFIX + to)

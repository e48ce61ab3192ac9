"""Twilio voice: the Calls API (``POST {base_url}/2010-04-01/Accounts/{sid}/Calls.json``,
form-encoded ``To``, ``From``, ``Twiml``), one call per person to their number.

The call reads the title and message (``<Say>``) inside ``<Gather numDigits="1">``:
"press 1 to acknowledge, 2 to dismiss". The Gather ``action`` and the call's
``StatusCallback`` are under ``/integrations/twilio/voice`` on the server's public URL;
their query names the channel (whose auth token verifies Twilio's signature) and carries
the person's signed action-link tokens, which name the notification and the person.
``actionOnEmptyResult`` makes Twilio post even when no key was pressed (voicemail,
silence), and the status callback reports a call nobody picked up (``no-answer``,
``busy``, ``failed``): both are recorded as the person not reached (``http.twilio``).

Accepted, errors and references as for SMS (``channels.twilio``); the Call's ``sid``
(``CA...``) is the message id. A call is not updated when the obligation ends.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from urllib.parse import urlencode
from xml.sax.saxutils import escape, quoteattr

from uns_server.channels.base import AnswerLinks, ChannelResult, OutboundMessage
from uns_server.channels.http_transport import OutboundClient
from uns_server.channels.twilio import TwilioChannel
from uns_server.channels.twilio_config import TwilioVoiceConfig
from uns_server.domain.twilio import VOICE_PATH, VOICE_STATUS_PATH

TEL_PREFIX = "tel:"
SPOKEN_MAX_CHARS = 1000  # the whole Twiml must stay under Twilio's 4000 characters
GATHER_TIMEOUT_SECONDS = 10
PROMPT = "Press 1 to acknowledge, 2 to dismiss."


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit]


def gather(action: str, spoken: str) -> str:
    """A ``<Gather>`` of one key around ``spoken`` and the prompt."""
    say = f"<Say>{escape(spoken)}</Say>" if spoken else ""
    return (
        f'<Gather numDigits="1" action={quoteattr(action)} method="POST" '
        f'timeout="{GATHER_TIMEOUT_SECONDS}" actionOnEmptyResult="true">'
        f"{say}<Say>{PROMPT}</Say></Gather>"
    )


def twiml(body: str) -> str:
    return f'<?xml version="1.0" encoding="UTF-8"?><Response>{body}</Response>'


def callback_urls(channel: str, links: AnswerLinks) -> tuple[str, str]:
    """(Gather action, status callback): the channel and the person's tokens."""
    action = urlencode(
        {"channel": channel, "ack": links.acknowledge_token, "dismiss": links.dismiss_token}
    )
    status = urlencode({"channel": channel, "ack": links.acknowledge_token})
    base = links.public_url
    return f"{base}{VOICE_PATH}?{action}", f"{base}{VOICE_STATUS_PATH}?{status}"


def spoken(message: OutboundMessage) -> str:
    """What the call reads out: markup characters are not spoken, and dropping them
    keeps escaping from growing the Twiml past Twilio's limit."""
    title = message.title or message.notification_type.replace(".", " ")
    text = f"{title}. {message.message}" if message.message else title
    text = text.replace("&", " and ").replace("<", " ").replace(">", " ")
    return _clip(" ".join(text.split()), SPOKEN_MAX_CHARS)


class TwilioVoiceChannel(TwilioChannel):
    """Calls each person's number; they answer with a key."""

    type = "twilio_voice"

    def __init__(
        self,
        name: str,
        config: TwilioVoiceConfig,
        client: OutboundClient,
        *,
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(name, config, client, on_close=on_close)

    async def _deliver(self, message: OutboundMessage) -> ChannelResult:
        if not message.to:
            return self._no_number()
        links = message.action_links(TEL_PREFIX + message.to)
        params = {"To": message.to, "From": self.config.from_number}
        if links is None or not links.public_url:
            # Nothing to answer (or nowhere to answer it): the call only reads it out.
            params["Twiml"] = twiml(f"<Say>{escape(spoken(message))}</Say>")
        else:
            action, status = callback_urls(self.name, links)
            params["Twiml"] = twiml(gather(action, spoken(message)))
            params["StatusCallback"] = status
            params["StatusCallbackMethod"] = "POST"
        return await self._create("Calls", params, TEL_PREFIX + message.to)

"""Twilio's callbacks: ``POST /integrations/twilio/sms`` (a reply to an SMS, the number's
"A message comes in" webhook), ``POST /integrations/twilio/voice`` (the key pressed on
a call, its ``<Gather>`` action) and ``POST /integrations/twilio/voice/status`` (the
call's final status).

Each is verified first with ``X-Twilio-Signature`` (``domain.twilio.verify_twilio``) over
the URL Twilio requested (the server's public URL and the request's path and query) and
the form, against the auth token of the channel it is for: for an SMS the
``twilio_sms`` channel whose number is the ``To`` (and whose account the
``AccountSid``), for a call the ``twilio_voice`` channel its URL names. Unsigned, wrongly
signed, or for no such channel: 403 and nothing changes. A callback already processed
(its signature's receipt is there: a replay) is 403 too and changes nothing
(``services.twilio_answers``). Verified callbacks are answered in TwiML: the SMS reply
says what the answer did (``<Message>``), the call says it (``<Say>``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape

from aiohttp import web

from uns_server.channels.twilio_voice import gather
from uns_server.domain.twilio import (
    SMS_PATH,
    VOICE_PATH,
    VOICE_STATUS_PATH,
    e164,
    parse_sms_answer,
    verify_twilio,
    voice_answer,
)
from uns_server.services.acks import Receipt
from uns_server.services.provider_answers import receipt_digest
from uns_server.services.twilio_answers import (
    NOT_REACHED_STATUSES,
    REPLAYED,
    VIA_SMS,
    VIA_VOICE,
    TwilioAnswers,
)

log = logging.getLogger("uns.callbacks")
SIGNATURE_HEADER = "X-Twilio-Signature"
# Twilio answers these itself (opt-out, opt-in, help): UNS stays silent.
TWILIO_KEYWORDS = frozenset(
    {"STOP", "STOPALL", "UNSUBSCRIBE", "CANCEL", "END", "QUIT", "START", "YES", "UNSTOP", "HELP"}
)


@dataclass(frozen=True)
class TwilioAccount:
    """What verifying a channel's callbacks needs: its account, token and number."""

    account_sid: str
    auth_token: str
    number: str


def _twiml(body: str = "") -> web.Response:
    return web.Response(
        text=f'<?xml version="1.0" encoding="UTF-8"?><Response>{body}</Response>',
        content_type="text/xml",
    )


def _refused(why: str = "invalid signature") -> web.Response:
    return web.Response(status=403, text=f"{why}\n")


def _message(text: str) -> web.Response:
    return _twiml(f"<Message>{escape(text)}</Message>" if text else "")


def _say(text: str) -> web.Response:
    return _twiml(f"<Say>{escape(text)}</Say><Hangup/>")


async def _form(request: web.Request) -> list[tuple[str, str]]:
    form = await request.post()
    return [(k, v) for k, v in form.items() if isinstance(v, str)]


def routes(
    answers: TwilioAnswers,
    sms: Mapping[str, TwilioAccount],
    voice: Mapping[str, TwilioAccount],
    public_url: Callable[[], str],
) -> list[web.RouteDef]:
    """``sms``/``voice``: channel name -> its account, per channel type."""

    def signed_by(
        request: web.Request,
        params: list[tuple[str, str]],
        candidates: Sequence[str],
        channels: Mapping[str, TwilioAccount],
    ) -> str | None:
        """The first of ``candidates`` whose auth token signed the request, or None."""
        url = public_url() + request.path_qs
        header = request.headers.get(SIGNATURE_HEADER)
        for name in candidates:
            if verify_twilio([channels[name].auth_token], url, params, header):
                return name
        return None

    def named(request: web.Request) -> list[str]:
        """The voice channel a call's URL names (the one UNS put there), if it exists."""
        name = request.query.get("channel", "")
        return [name] if name in voice else []

    def receipt(request: web.Request, via: str) -> Receipt:
        signature = request.headers.get(SIGNATURE_HEADER, "")
        return Receipt(receipt_digest(via, signature.encode()), via)

    async def sms_reply(request: web.Request) -> web.Response:
        if not sms:
            raise web.HTTPNotFound()
        params = await _form(request)
        form = dict(params)
        to, account = form.get("To", ""), form.get("AccountSid", "")
        candidates = sorted(
            name
            for name, a in sms.items()
            if a.number == to and (not account or a.account_sid == account)
        )
        channel = signed_by(request, params, candidates, sms)
        if channel is None:
            return _refused()
        sender = e164(form.get("From", ""))
        body = form.get("Body", "")
        if sender is None or body.strip().upper() in TWILIO_KEYWORDS:
            return _twiml()  # Twilio's own keywords, or a sender no person can have
        answer = parse_sms_answer(body)
        if answer is None:
            reply = await answers.not_an_answer(channel, sender, receipt(request, VIA_SMS))
        else:
            sid = form.get("MessageSid", "")
            reply = await answers.sms(channel, sender, answer, receipt(request, VIA_SMS), sid)
        if reply.outcome == REPLAYED:
            return _refused("already processed")
        log.info("twilio sms", extra={"channel": channel, "outcome": reply.outcome})
        return _message(reply.text)

    async def key_pressed(request: web.Request) -> web.Response:
        if not voice:
            raise web.HTTPNotFound()
        params = await _form(request)
        channel = signed_by(request, params, named(request), voice)
        if channel is None:
            return _refused()
        call = await answers.call(channel, request.query.get("ack", ""))
        if call is None:
            return _say("This notification can no longer be answered on this call. Goodbye.")
        form = dict(params)
        digits, call_sid = form.get("Digits", ""), form.get("CallSid", "")
        dismiss = voice_answer(digits)
        if dismiss and not await answers.may_dismiss(call, request.query.get("dismiss", "")):
            dismiss = None
        if not digits.strip():  # actionOnEmptyResult: nobody pressed a key
            reply = await answers.not_reached(
                call, "no-input", receipt(request, VIA_VOICE), call_sid
            )
            text = "No answer received. Goodbye."
        elif dismiss is None:  # another key: ask again
            return _twiml(gather(public_url() + request.path_qs, ""))
        else:
            reply = await answers.key_pressed(call, dismiss, receipt(request, VIA_VOICE), call_sid)
            text = reply.text
        if reply.outcome == REPLAYED:
            return _refused("already processed")
        log.info("twilio call answer", extra={"channel": channel, "outcome": reply.outcome})
        return _say(text)

    async def call_status(request: web.Request) -> web.Response:
        if not voice:
            raise web.HTTPNotFound()
        params = await _form(request)
        channel = signed_by(request, params, named(request), voice)
        if channel is None:
            return _refused()
        form = dict(params)
        status = form.get("CallStatus", "")
        call = await answers.call(channel, request.query.get("ack", ""))
        if call is None or status not in NOT_REACHED_STATUSES:
            return web.Response(text="")  # answered, or a call UNS does not know
        reply = await answers.not_reached(
            call, status, receipt(request, VIA_VOICE), form.get("CallSid", "")
        )
        if reply.outcome == REPLAYED:
            return _refused("already processed")
        log.info("twilio call status", extra={"channel": channel, "outcome": reply.outcome})
        return web.Response(text="")

    return [
        web.post(SMS_PATH, sms_reply),
        web.post(VOICE_PATH, key_pressed),
        web.post(VOICE_STATUS_PATH, call_status),
    ]

"""The Twilio adapters against a real loopback receiver: the requests Twilio documents
(Messages and Calls API, form-encoded, basic auth with the account SID), the answer
classified (201 delivered with the resource's sid as the reference, 429 throttled, 5xx
transient, other 4xx permanent with Twilio's error code), the outcome SMS, the call's
TwiML, credentials kept out of results and logs; options and contacts validated."""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import parse_qs, parse_qsl, urlsplit
from xml.etree import ElementTree

import pytest

from tests.channels.conftest import PLANTED_SECRET, assert_secret_absent, make_message
from tests.support.http_receiver import HttpReceiver, RecordedRequest, Reply
from uns_server.channels.base import AnswerLinks, ObligationOutcome
from uns_server.channels.config import ChannelConfigError, load_channels_config
from uns_server.channels.http_transport import OutboundClient
from uns_server.channels.kinds import person_kinds
from uns_server.channels.twilio import TwilioSmsChannel
from uns_server.channels.twilio_config import TwilioSmsConfig, TwilioVoiceConfig
from uns_server.channels.twilio_voice import TwilioVoiceChannel
from uns_server.domain.outcomes import ProviderRef
from uns_server.domain.people import address_problem
from uns_server.domain.twilio import answer_code
from uns_server.services.message_updates import updatable

SID = "AC" + "0123456789abcdef" * 2
FROM = "+14155550100"
ALICE = "+14155552671"
LINKS = AnswerLinks(
    "https://uns.example.com/a/ACK",
    "https://uns.example.com/a/DIS",
    "ACK",
    "DIS",
    "https://uns.example.com",
)
OUTCOME = ObligationOutcome(
    state="ACKED",
    actor="recipient:alice",
    via="twilio_sms",
    at="2026-12-07T03:00:00+00:00",
    title="Arm 3 stalled",
    message="Joint 2 over torque",
    notification_id="n-1",
)


def _config(rx: HttpReceiver, cls: Any, **extra: Any) -> Any:
    return cls(
        account_sid=SID, auth_token=PLANTED_SECRET, from_number=FROM, base_url=rx.url(""), **extra
    )


def _sms(rx: HttpReceiver, client: OutboundClient, **extra: Any) -> TwilioSmsChannel:
    return TwilioSmsChannel("sms", _config(rx, TwilioSmsConfig, **extra), client)


def _voice(rx: HttpReceiver, client: OutboundClient) -> TwilioVoiceChannel:
    return TwilioVoiceChannel("phone", _config(rx, TwilioVoiceConfig), client)


def _created(sid: str) -> Reply:
    return Reply.json({"sid": sid, "status": "queued", "account_sid": SID}, status=201)


def _form(request: RecordedRequest) -> dict[str, str]:
    assert request.headers["content-type"] == "application/x-www-form-urlencoded"
    return dict(parse_qsl(request.body.decode(), keep_blank_values=True))


def _basic(request: RecordedRequest) -> tuple[str, str]:
    scheme, _, value = request.headers["authorization"].partition(" ")
    assert scheme == "Basic"
    user, _, password = base64.b64decode(value).decode().partition(":")
    return user, password


async def test_sms_posts_the_messages_api_form_with_basic_auth(
    receiver: HttpReceiver, http_client: OutboundClient, debug_logs: pytest.LogCaptureFixture
) -> None:
    receiver.script(_created("SM0001"))
    message = make_message(require_ack=True, links=lambda _r: LINKS, to=ALICE, recipient_id="al")
    result = await _sms(receiver, http_client).send(message)

    assert result.success and result.message_id == "SM0001"
    assert result.reference == {
        "type": "twilio_sms",
        "recipient": f"sms:{ALICE}",
        "twilio_sid": "SM0001",
    }
    [request] = receiver.requests
    assert (request.method, request.path) == ("POST", f"/2010-04-01/Accounts/{SID}/Messages.json")
    assert _basic(request) == (SID, PLANTED_SECRET)
    form = _form(request)
    assert (form["To"], form["From"]) == (ALICE, FROM)
    code = answer_code(message.notification_id)
    assert form["Body"] == (
        "Arm 3 stalled\nJoint 2 over torque <@here> & co\n"
        "Reply ACK or 1 to acknowledge, DISMISS or 2 to dismiss"
        f" (if several are open, add the code: ACK {code})."
    )
    assert_secret_absent(result, debug_logs)


async def test_sms_without_an_answer_owed_says_only_the_message(
    receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    receiver.script(_created("SM0002"))
    result = await _sms(receiver, http_client, notify_outcome=True).send(make_message(to=ALICE))
    assert result.success
    assert result.reference["twilio_notify_outcome"] == "true"  # the outcome SMS is wanted
    assert "Reply" not in _form(receiver.requests[0])["Body"]


async def test_sms_body_stays_within_twilios_limit(
    receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    receiver.script(_created("SM0003"))
    message = make_message(message="x" * 5000, require_ack=True, links=lambda _r: LINKS, to=ALICE)
    assert (await _sms(receiver, http_client).send(message)).success
    body = _form(receiver.requests[0])["Body"]
    assert len(body) <= 1600 and body.endswith(f"ACK {answer_code(message.notification_id)}).")


async def test_the_outcome_sms_goes_to_the_number_the_message_went_to(
    receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    receiver.script(_created("SM0004"))
    reference = {"type": "twilio_sms", "recipient": f"sms:{ALICE}", "twilio_sid": "SM0001"}
    result = await _sms(receiver, http_client, notify_outcome=True).update(reference, OUTCOME)
    assert result.success
    form = _form(receiver.requests[0])
    assert form["To"] == ALICE
    assert form["Body"].startswith("Arm 3 stalled: Acknowledged by recipient:alice at 2026-12-07")


async def test_a_call_gathers_one_key_and_reports_its_status(
    receiver: HttpReceiver, http_client: OutboundClient, debug_logs: pytest.LogCaptureFixture
) -> None:
    receiver.script(_created("CA0001"))
    message = make_message(require_ack=True, links=lambda _r: LINKS, to=ALICE, recipient_id="al")
    result = await _voice(receiver, http_client).send(message)

    assert result.success and result.message_id == "CA0001"
    assert result.reference == {
        "type": "twilio_voice",
        "recipient": f"tel:{ALICE}",
        "twilio_sid": "CA0001",
    }
    [request] = receiver.requests
    assert request.path == f"/2010-04-01/Accounts/{SID}/Calls.json"
    assert _basic(request) == (SID, PLANTED_SECRET)
    form = _form(request)
    assert (form["To"], form["From"], form["StatusCallbackMethod"]) == (ALICE, FROM, "POST")
    status = urlsplit(form["StatusCallback"])
    assert (status.netloc, status.path) == ("uns.example.com", "/integrations/twilio/voice/status")
    assert parse_qs(status.query) == {"channel": ["phone"], "ack": ["ACK"]}
    response = ElementTree.fromstring(form["Twiml"])
    [gather] = list(response)
    assert gather.tag == "Gather"
    assert (gather.get("numDigits"), gather.get("method")) == ("1", "POST")
    assert gather.get("actionOnEmptyResult") == "true"
    action = urlsplit(gather.get("action") or "")
    assert action.path == "/integrations/twilio/voice"
    assert parse_qs(action.query) == {"channel": ["phone"], "ack": ["ACK"], "dismiss": ["DIS"]}
    said = [say.text for say in gather]
    assert said == [
        "Arm 3 stalled. Joint 2 over torque @here and co",
        "Press 1 to acknowledge, 2 to dismiss.",
    ]
    assert len(form["Twiml"]) < 4000
    assert_secret_absent(result, debug_logs)


async def test_a_call_with_nothing_to_answer_only_reads_the_message(
    receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    receiver.script(_created("CA0002"))
    assert (await _voice(receiver, http_client).send(make_message(to=ALICE))).success
    form = _form(receiver.requests[0])
    assert "StatusCallback" not in form
    [say] = list(ElementTree.fromstring(form["Twiml"]))
    assert say.tag == "Say"


@pytest.mark.parametrize("which", ["sms", "voice"])
@pytest.mark.parametrize(
    ("reply", "retryable", "throttled", "code"),
    [
        (
            Reply.json({"code": 20429, "message": "Too Many Requests", "status": 429}, status=429),
            True,
            True,
            20429,
        ),
        (Reply.text("bad gateway", status=502), True, False, None),
        (
            Reply.json(
                {"code": 21211, "message": f"The 'To' number {ALICE} is not valid", "status": 400},
                status=400,
            ),
            False,
            False,
            21211,
        ),
        (
            Reply.json({"code": 20003, "message": "Authenticate", "status": 401}, status=401),
            False,
            False,
            20003,
        ),
    ],
)
async def test_errors_are_classified(
    receiver: HttpReceiver,
    http_client: OutboundClient,
    debug_logs: pytest.LogCaptureFixture,
    which: str,
    reply: Reply,
    retryable: bool,
    throttled: bool,
    code: int | None,
) -> None:
    receiver.script(reply)
    channel = _sms(receiver, http_client) if which == "sms" else _voice(receiver, http_client)
    result = await channel.send(make_message(to=ALICE))
    assert not result.success
    assert (result.retryable, result.throttled) == (retryable, throttled)
    assert result.metadata["http_status"] == reply.status
    assert result.metadata.get("twilio_error_code") == code
    assert_secret_absent(result, debug_logs)


@pytest.mark.parametrize("which", ["sms", "voice"])
async def test_without_a_number_or_with_an_odd_success_nothing_is_delivered(
    receiver: HttpReceiver, http_client: OutboundClient, which: str
) -> None:
    channel = _sms(receiver, http_client) if which == "sms" else _voice(receiver, http_client)
    no_number = await channel.send(make_message())
    assert not no_number.success and not no_number.retryable
    assert not receiver.requests
    receiver.script(Reply.text("<html>captive portal</html>"))
    odd = await channel.send(make_message(to=ALICE))
    assert not odd.success and not odd.retryable


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        (
            {"type": "twilio_sms", "auth_token": "t", "from": FROM},
            "option 'account_sid' is required",
        ),
        (
            {"type": "twilio_sms", "account_sid": "AC1", "auth_token": "t", "from": FROM},
            "must be a Twilio account SID",
        ),
        (
            {"type": "twilio_voice", "account_sid": SID, "auth_token": "t", "from": "4155550100"},
            "option 'from' must be a phone number in E.164",
        ),
        (
            {"type": "twilio_voice", "account_sid": SID, "from": FROM},
            "option 'auth_token' is required",
        ),
        (
            {
                "type": "twilio_voice",
                "account_sid": SID,
                "auth_token": "t",
                "from": FROM,
                "notify_outcome": True,
            },
            "unknown option(s): 'notify_outcome'",
        ),
        (
            {
                "type": "twilio_sms",
                "account_sid": SID,
                "auth_token": "t",
                "from": FROM,
                "notify_outcome": "yes",
            },
            "option 'notify_outcome' must be true or false",
        ),
    ],
)
def test_options_are_checked_when_loaded(options: dict[str, Any], problem: str) -> None:
    with pytest.raises(ChannelConfigError) as caught:
        load_channels_config({"c": options}, {})
    assert problem in str(caught.value)


def test_credentials_from_the_environment_masked_and_numbers_validated() -> None:
    config = load_channels_config(
        {
            "sms": {
                "type": "twilio_sms",
                "account_sid_env": "SID",
                "auth_token_env": "TOKEN",
                "from_env": "FROM",
                "notify_outcome": True,
            },
            "phone": {
                "type": "twilio_voice",
                "account_sid": SID,
                "auth_token_env": "TOKEN",
                "from": FROM,
                "base_url": "http://127.0.0.1:9/",
            },
        },
        {"SID": SID, "TOKEN": PLANTED_SECRET, "FROM": FROM},
    )
    sms, phone = config.channels["sms"], config.channels["phone"]
    assert isinstance(sms, TwilioSmsConfig) and sms.auth_token == PLANTED_SECRET
    assert sms.notify_outcome and sms.base_url == "https://api.twilio.com"
    assert isinstance(phone, TwilioVoiceConfig) and phone.base_url == "http://127.0.0.1:9"
    assert PLANTED_SECRET not in repr(sms) + repr(phone)
    kinds = person_kinds(config)
    for name in ("sms", "phone"):
        assert address_problem(kinds[name], ALICE) is None
        assert address_problem(kinds[name], "+442071838750") is None
        for bad in ("4155552671", "+1 415 555 2671", "+1555123456", "alice", ""):
            assert address_problem(kinds[name], bad) == (
                "must be a phone number in E.164 form (+14155552671) for a Twilio channel"
            )


def test_the_outcome_sms_is_queued_only_where_the_channel_asks() -> None:
    base = {"type": "twilio_sms", "channel": "sms", "recipient": f"sms:{ALICE}"}
    assert updatable(ProviderRef.from_json({**base, "twilio_notify_outcome": "true"}))
    assert not updatable(ProviderRef.from_json(base))
    reminder = {**base, "twilio_notify_outcome": "true", "follow_up": "REMINDER"}
    assert not updatable(ProviderRef.from_json(reminder))  # once per person: the delivery's
    assert not updatable(ProviderRef.from_json({**base, "type": "twilio_voice"}))


async def test_a_calls_twiml_stays_within_twilios_limit(
    receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    receiver.script(_created("CA0003"))
    message = make_message(
        title="<&>" * 500, message="&" * 5000, require_ack=True, links=lambda _r: LINKS, to=ALICE
    )
    assert (await _voice(receiver, http_client).send(message)).success
    twiml = _form(receiver.requests[0])["Twiml"]
    assert len(twiml) < 4000
    ElementTree.fromstring(twiml)  # still well-formed

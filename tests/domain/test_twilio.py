"""Twilio's rules, pure: how a reply or a key answers, E.164 numbers, and a signature
verified whichever way Twilio wrote the URL's port."""

from __future__ import annotations

import pytest

from uns_server.domain.twilio import (
    SmsAnswer,
    answer_code,
    e164,
    parse_sms_answer,
    twilio_signature,
    verify_twilio,
    voice_answer,
)


@pytest.mark.parametrize(
    ("body", "answer"),
    [
        ("ACK", SmsAnswer(False)),
        (" ack\n", SmsAnswer(False)),
        ("1", SmsAnswer(False)),
        ("Dismiss", SmsAnswer(True)),
        ("2 4821", SmsAnswer(True, "4821")),
        ("ack 0042", SmsAnswer(False, "0042")),
        ("ACK 42", None),  # a code is four digits
        ("ACK 4821 please", None),
        ("acknowledged", None),
        ("STOP", None),
        ("", None),
    ],
)
def test_sms_answers(body: str, answer: SmsAnswer | None) -> None:
    assert parse_sms_answer(body) == answer


def test_keys_and_codes() -> None:
    assert [voice_answer(d) for d in ("1", "2", "", "3", "12")] == [False, True, None, None, None]
    code = answer_code("0b5c2f8e-1d7a-4c39-9a51-3f0e2b7c9d11")
    assert len(code) == 4 and code.isdigit()
    assert code == answer_code("0b5c2f8e-1d7a-4c39-9a51-3f0e2b7c9d11")  # stable


def test_e164_numbers_only() -> None:
    assert e164("+14155552671") == "+14155552671"
    assert e164("+442071838750") == "+442071838750"
    for bad in ("14155552671", "+1 415 555 2671", "+1415555267", "+15551234567", "+", "tel:+1"):
        assert e164(bad) is None


@pytest.mark.parametrize(
    ("signed_url", "requested_url"),
    [
        ("https://uns.example.com/integrations/twilio/sms", "https://uns.example.com/integrations/twilio/sms"),
        ("https://uns.example.com:443/integrations/twilio/sms", "https://uns.example.com/integrations/twilio/sms"),
        ("https://uns.example.com/integrations/twilio/sms", "https://uns.example.com:443/integrations/twilio/sms"),
    ],
)  # fmt: skip
def test_a_signature_verifies_with_or_without_the_default_port(
    signed_url: str, requested_url: str
) -> None:
    params = [("From", "+14155552671"), ("Body", "ACK")]
    signature = twilio_signature("token", signed_url, params)
    assert verify_twilio(["other", "token"], requested_url, params, signature) == "token"
    assert verify_twilio(["other"], requested_url, params, signature) is None
    assert verify_twilio(["token"], requested_url, [*params, ("To", "+1")], signature) is None
    assert verify_twilio(["token"], requested_url, params, None) is None

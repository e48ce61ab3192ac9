"""``uns_clients.webhooks.verify_webhook`` on its own: the receiver's side of the contract."""

from __future__ import annotations

import pytest

from uns_clients.webhooks import WebhookVerificationError, verify_webhook
from uns_server.channels.webhook import sign, signing_key

# The Standard Webhooks specification's published test vector.
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
MSG_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
TIMESTAMP = 1614265330
BODY = b'{"test": 2432232314}'
SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def _headers(signature: str = SIGNATURE, timestamp: int = TIMESTAMP) -> dict[str, str]:
    return {
        "webhook-id": MSG_ID,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature,
    }


def test_reference_vector_verifies() -> None:
    verify_webhook(_headers(), BODY, SECRET, now=TIMESTAMP)


def test_header_names_are_case_insensitive() -> None:
    headers = {k.title(): v for k, v in _headers().items()}
    verify_webhook(headers, BODY, SECRET, now=TIMESTAMP)


def test_any_one_of_several_signatures_suffices() -> None:
    other = sign(signing_key("rotated-secret"), MSG_ID, TIMESTAMP, BODY)
    verify_webhook(_headers(f"{other} {SIGNATURE}"), BODY, SECRET, now=TIMESTAMP)
    verify_webhook(_headers(f"v2,abc v1,!!notbase64 {SIGNATURE}"), BODY, SECRET, now=TIMESTAMP)
    verify_webhook(_headers(f"{other} {SIGNATURE}"), BODY, "rotated-secret", now=TIMESTAMP)


@pytest.mark.parametrize(
    "headers",
    [
        {"webhook-timestamp": str(TIMESTAMP), "webhook-signature": SIGNATURE},
        {"webhook-id": MSG_ID, "webhook-signature": SIGNATURE},
        {"webhook-id": MSG_ID, "webhook-timestamp": str(TIMESTAMP)},
        _headers(signature=""),
        _headers(signature="v2," + SIGNATURE[3:]),
        _headers(signature=SIGNATURE[:-4] + "AAA="),
        {**_headers(), "webhook-timestamp": "soon"},
        {**_headers(), "webhook-id": MSG_ID + "x"},
    ],
    ids=[
        "no-id",
        "no-ts",
        "no-sig",
        "empty-sig",
        "wrong-version",
        "wrong-sig",
        "bad-ts",
        "other-id",
    ],
)
def test_missing_or_wrong_headers_are_refused(headers: dict[str, str]) -> None:
    with pytest.raises(WebhookVerificationError):
        verify_webhook(headers, BODY, SECRET, now=TIMESTAMP)


def test_timestamps_outside_the_tolerance_are_refused_both_ways() -> None:
    verify_webhook(_headers(), BODY, SECRET, now=TIMESTAMP + 300)
    verify_webhook(_headers(), BODY, SECRET, now=TIMESTAMP - 300)
    for now in (TIMESTAMP + 301, TIMESTAMP - 301):
        with pytest.raises(WebhookVerificationError):
            verify_webhook(_headers(), BODY, SECRET, now=now)
    verify_webhook(_headers(), BODY, SECRET, now=TIMESTAMP + 3000, tolerance_seconds=3600)


def test_default_clock_refuses_an_old_message() -> None:
    with pytest.raises(WebhookVerificationError, match="tolerance"):
        verify_webhook(_headers(), BODY, SECRET)


def test_tampered_body_and_wrong_secret_are_refused() -> None:
    with pytest.raises(WebhookVerificationError):
        verify_webhook(_headers(), BODY + b" ", SECRET, now=TIMESTAMP)
    with pytest.raises(WebhookVerificationError):
        verify_webhook(_headers(), BODY, "whsec_" + "A" * 32, now=TIMESTAMP)
    with pytest.raises(WebhookVerificationError):
        verify_webhook(_headers(), BODY, "whsec_***", now=TIMESTAMP)

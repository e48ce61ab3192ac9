"""Signed webhook: the request a receiver gets, and that it verifies with the client helper."""

from __future__ import annotations

import base64
import time

import pytest

from tests.channels.conftest import PLANTED_SECRET, make_message
from tests.support.http_receiver import HttpReceiver, RecordedRequest, Reply
from uns_clients.webhooks import WebhookVerificationError, verify_webhook
from uns_server.channels.config import WebhookConfig
from uns_server.channels.http_transport import OutboundClient
from uns_server.channels.webhook import WebhookChannel, sign, signing_key

WHSEC = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()


def _channel(
    rx: HttpReceiver, client: OutboundClient, secret: str = PLANTED_SECRET, **kw: object
) -> WebhookChannel:
    config = WebhookConfig(url=rx.url("/hook"), secret=secret, **kw)  # type: ignore[arg-type]
    return WebhookChannel("ops-webhook", config, client)


async def _one_request(
    rx: HttpReceiver, client: OutboundClient, secret: str = PLANTED_SECRET
) -> RecordedRequest:
    result = await _channel(rx, client, secret).send(make_message())
    assert result.success
    return rx.requests[-1]


async def test_request_carries_standard_webhooks_headers_and_json_body(
    receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    before = int(time.time())
    request = await _one_request(receiver, http_client)
    message = make_message()
    assert request.path == "/hook"
    assert request.headers["content-type"] == "application/json"
    assert request.headers["webhook-id"] == message.idempotency_token
    assert before <= int(request.headers["webhook-timestamp"]) <= int(time.time())
    assert request.headers["webhook-signature"].startswith("v1,")
    body = request.json()
    assert body["type"] == "uns.notification"
    assert body["timestamp"].endswith("Z")
    assert body["data"] == {
        "notification_id": message.notification_id,
        "notification_type": "robot.fault",
        "intent": "WARNING",
        "priority": "HIGH",
        "title": "Arm 3 stalled",
        "message": message.message,
        "source": "cell-7",
        "correlation_id": "corr-42",
        "metadata": {"cell": 7, "tags": ["arm", "torque"]},
        "attempt": 1,
        "require_ack": False,
    }
    assert PLANTED_SECRET.encode() not in request.body
    assert all(PLANTED_SECRET not in v for v in request.headers.values())


@pytest.mark.parametrize("secret", [PLANTED_SECRET, WHSEC], ids=["raw", "whsec"])
async def test_signature_verifies_with_the_client_helper(
    receiver: HttpReceiver, http_client: OutboundClient, secret: str
) -> None:
    request = await _one_request(receiver, http_client, secret)
    verify_webhook(request.headers, request.body, secret)


async def test_tampered_body_wrong_secret_and_stale_timestamp_fail(
    receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    request = await _one_request(receiver, http_client)
    headers, body = dict(request.headers), request.body
    timestamp = int(headers["webhook-timestamp"])
    with pytest.raises(WebhookVerificationError):
        verify_webhook(headers, body.replace(b"Arm 3", b"Arm 4"), PLANTED_SECRET)
    with pytest.raises(WebhookVerificationError):
        verify_webhook(headers, body, PLANTED_SECRET + "x")
    with pytest.raises(WebhookVerificationError):
        verify_webhook(headers, body, PLANTED_SECRET, now=timestamp + 301)
    with pytest.raises(WebhookVerificationError):
        verify_webhook(headers, body, PLANTED_SECRET, now=timestamp - 301)
    with pytest.raises(WebhookVerificationError):  # a replayed id with a new timestamp
        verify_webhook({**headers, "webhook-timestamp": str(timestamp + 1)}, body, PLANTED_SECRET)
    verify_webhook(headers, body, PLANTED_SECRET, now=timestamp + 299)


async def test_webhook_id_is_stable_across_attempts_and_signature_is_per_attempt(
    receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    channel = _channel(receiver, http_client)
    await channel.send(make_message(attempt=1))
    await channel.send(make_message(attempt=2))
    first, second = receiver.requests
    assert first.headers["webhook-id"] == second.headers["webhook-id"]
    assert first.body != second.body  # the attempt number changes, so the signature does
    assert first.headers["webhook-signature"] != second.headers["webhook-signature"]
    for request in (first, second):
        verify_webhook(request.headers, request.body, PLANTED_SECRET)


async def test_static_headers_are_sent(receiver: HttpReceiver, http_client: OutboundClient) -> None:
    channel = _channel(
        receiver, http_client, headers={"X-Team": "ops", "Authorization": "Bearer abc"}
    )
    assert (await channel.send(make_message())).success
    assert receiver.requests[0].headers["x-team"] == "ops"
    assert receiver.requests[0].headers["authorization"] == "Bearer abc"


@pytest.mark.parametrize(
    ("reply", "message_id"),
    [
        (Reply(status=204), make_message().idempotency_token),
        (Reply.json({"id": "rcv-77"}, status=202), "rcv-77"),
        (Reply.json({"id": 991}), "991"),
        (Reply(status=200, headers={"X-Message-Id": "hdr-1"}, body=b'{"id": "x"}'), "hdr-1"),
        (Reply.text("<html>thanks</html>"), make_message().idempotency_token),
    ],
    ids=["204", "json-id", "json-int-id", "header-wins", "html"],
)
async def test_any_2xx_is_acceptance_and_the_receiver_id_is_recorded(
    receiver: HttpReceiver, http_client: OutboundClient, reply: Reply, message_id: str
) -> None:
    receiver.script(reply)
    result = await _channel(receiver, http_client).send(make_message())
    assert result.success
    assert result.message_id == message_id
    assert result.metadata["webhook_id"] == make_message().idempotency_token


async def test_unencodable_metadata_is_permanent_and_sends_nothing(
    receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    result = await _channel(receiver, http_client).send(make_message(metadata={"x": object()}))
    assert not result.success and not result.retryable
    assert receiver.requests == []


def test_signing_primitive_matches_the_standard_webhooks_example() -> None:
    # Test vector from the Standard Webhooks specification's reference libraries.
    key = signing_key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
    body = b'{"test": 2432232314}'
    assert sign(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body) == (
        "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    )


def test_signing_key_rejects_bad_secrets() -> None:
    with pytest.raises(ValueError):
        signing_key("whsec_not base64!")
    with pytest.raises(ValueError):
        signing_key("")
    assert signing_key("raw-secret") == b"raw-secret"

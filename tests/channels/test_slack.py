"""Slack: the Web API request and Slack's ``ok``/``error`` answers; incoming-webhook mode."""

from __future__ import annotations

import asyncio
import logging

import pytest

from tests.channels.conftest import PLANTED_SECRET, assert_secret_absent, make_message
from tests.support.http_receiver import HttpReceiver, RecordedRequest, Reply
from uns_server.channels.base import AnswerLinks
from uns_server.channels.config import SlackConfig
from uns_server.channels.http_transport import OutboundClient
from uns_server.channels.slack import SlackChannel, slack_text


def _api(rx: HttpReceiver, client: OutboundClient) -> SlackChannel:
    config = SlackConfig(token=PLANTED_SECRET, channel="C0ALERTS", base_url=rx.url("/api"))
    return SlackChannel("slack", config, client)


def _hook(rx: HttpReceiver, client: OutboundClient) -> SlackChannel:
    config = SlackConfig(webhook_url=rx.url(f"/services/T0/B0/{PLANTED_SECRET}"))
    return SlackChannel("slack-hook", config, client)


async def test_web_api_posts_chat_post_message_with_bearer_token(
    receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    receiver.script(Reply.json({"ok": True, "channel": "C0ALERTS", "ts": "1700000000.000200"}))
    result = await _api(receiver, http_client).send(make_message())
    assert result.success and result.message_id == "1700000000.000200"
    assert result.metadata["slack_channel"] == "C0ALERTS"
    request = receiver.requests[0]
    assert request.path == "/api/chat.postMessage"
    assert request.headers["authorization"] == f"Bearer {PLANTED_SECRET}"
    assert request.headers["content-type"] == "application/json; charset=utf-8"
    body = request.json()
    assert body["channel"] == "C0ALERTS"
    assert body["text"] == slack_text(make_message())


def test_text_escapes_slack_control_characters() -> None:
    text = slack_text(make_message(title="<!channel> a&b", message="<@U123> hi"))
    assert "<!channel>" not in text and "<@U123>" not in text
    assert text.startswith("*&lt;!channel&gt; a&amp;b*\n&lt;@U123&gt; hi\n")
    assert text.endswith("_HIGH · WARNING · cell-7_")


@pytest.mark.parametrize(
    "code", ["channel_not_found", "invalid_auth", "not_in_channel", "msg_too_long"]
)
async def test_ok_false_is_permanent(
    receiver: HttpReceiver, http_client: OutboundClient, code: str
) -> None:
    receiver.script(Reply.json({"ok": False, "error": code}))
    result = await _api(receiver, http_client).send(make_message())
    assert not result.success and not result.retryable
    assert result.error == f"slack error: {code}"
    assert result.metadata["slack_error"] == code


async def test_ok_false_ratelimited_is_transient_with_retry_after(
    receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    receiver.script(Reply.json({"ok": False, "error": "ratelimited"}, headers={"Retry-After": "7"}))
    result = await _api(receiver, http_client).send(make_message())
    assert not result.success and result.retryable and result.retry_after_seconds == 7.0
    assert result.throttled


@pytest.mark.parametrize(
    "code", ["internal_error", "fatal_error", "service_unavailable", "request_timeout"]
)
async def test_ok_false_server_side_errors_are_transient(
    receiver: HttpReceiver, http_client: OutboundClient, code: str
) -> None:
    receiver.script(Reply.json({"ok": False, "error": code}))
    result = await _api(receiver, http_client).send(make_message())
    assert not result.success and result.retryable


@pytest.mark.parametrize(
    "reply",
    [
        Reply.json({"channel": "C0ALERTS"}),
        Reply.json(["ok"]),
        Reply.json({"ok": "true"}),
        Reply.json({"ok": True}, status=201),
        Reply.text("ok"),
    ],
    ids=["no-ok", "array", "ok-string", "201", "plain-ok"],
)
async def test_web_api_answers_that_are_not_slacks_are_permanent(
    receiver: HttpReceiver, http_client: OutboundClient, reply: Reply
) -> None:
    receiver.script(reply)
    result = await _api(receiver, http_client).send(make_message())
    assert not result.success and not result.retryable


async def test_incoming_webhook_posts_text_and_accepts_ok(
    receiver: HttpReceiver, http_client: OutboundClient, debug_logs: pytest.LogCaptureFixture
) -> None:
    receiver.script(Reply.text("ok"))
    result = await _hook(receiver, http_client).send(make_message())
    assert result.success and result.message_id is None
    assert result.metadata["slack_mode"] == "incoming_webhook"
    request = receiver.requests[0]
    assert request.path == f"/services/T0/B0/{PLANTED_SECRET}"
    assert request.json() == {"text": slack_text(make_message())}
    assert "authorization" not in request.headers
    assert_secret_absent(result, debug_logs)


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, "invalid_payload"),
        (403, "action_prohibited"),
        (404, "no_service"),
        (410, "channel_is_archived"),
    ],
)
async def test_incoming_webhook_errors_are_permanent_and_name_slacks_code(
    receiver: HttpReceiver, http_client: OutboundClient, status: int, body: str
) -> None:
    receiver.script(Reply.text(body, status=status))
    result = await _hook(receiver, http_client).send(make_message())
    assert not result.success and not result.retryable
    assert result.error == f"HTTP {status}: {body}"


async def test_log_filter_is_installed_only_while_a_request_is_in_flight(
    receiver: HttpReceiver, http_client: OutboundClient, caplog: pytest.LogCaptureFixture
) -> None:
    """aiohttp's client logger is filtered for the channel's secrets during a request."""
    library_logger = logging.getLogger("aiohttp.client")
    during: list[int] = []

    def responder(request: RecordedRequest) -> Reply:
        during.append(len(library_logger.filters))
        library_logger.warning("request to %s", request.path)  # the path is the secret
        return Reply.text("ok")

    caplog.set_level(logging.WARNING, logger="aiohttp.client")
    receiver.responder = responder
    before = len(library_logger.filters)
    channel = _hook(receiver, http_client)
    await asyncio.gather(channel.send(make_message()), channel.send(make_message()))
    assert during == [before + 1, before + 1]
    assert len(library_logger.filters) == before
    logged = [r.getMessage() for r in caplog.records if r.name == "aiohttp.client"]
    assert logged == ["request to /***", "request to /***"]
    library_logger.warning("after %s", PLANTED_SECRET)  # no filter left behind
    assert caplog.records[-1].getMessage() == f"after {PLANTED_SECRET}"
    await channel.aclose()
    await channel.aclose()  # idempotent


def _links(recipient: str) -> AnswerLinks:
    return AnswerLinks(
        f"https://uns.example/a/ack-{recipient}",
        f"https://uns.example/a/dismiss-{recipient}",
        f"ack-{recipient}",
        f"dismiss-{recipient}",
    )


async def test_without_interactivity_buttons_open_the_links(
    receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    receiver.script(Reply.text("ok"))
    message = make_message(require_ack=True, links=_links)
    assert (await _hook(receiver, http_client).send(message)).success
    [ack, dismiss] = receiver.requests[0].json()["blocks"][1]["elements"]
    assert ack["url"] == "https://uns.example/a/ack-slack:slack-hook"
    assert dismiss["url"] == "https://uns.example/a/dismiss-slack:slack-hook"


async def test_no_buttons_when_no_answer_is_needed(
    receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    receiver.script(Reply.json({"ok": True, "channel": "C1", "ts": "1.2"}))
    assert (await _api(receiver, http_client).send(make_message(links=_links))).success
    assert "blocks" not in receiver.requests[0].json()

"""The Telegram adapter against a real loopback Bot API fake: ``sendMessage`` as the Bot
API documents it (``POST /bot<token>/sendMessage``, JSON, an inline keyboard whose
``callback_data`` fits Telegram's 64 bytes), the answer classified (``ok: true`` with the
message delivered, its chat and message id the reference; 429 throttled with
``parameters.retry_after``; 5xx and timeouts transient; other codes permanent),
``editMessageText`` and ``answerCallbackQuery``, and the bot token kept out of results
and logs; options and contacts validated when loaded."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.channels.conftest import PLANTED_SECRET, assert_secret_absent, make_message
from tests.support.http_receiver import HttpReceiver, Reply
from uns_server.channels.base import AnswerLinks, ObligationOutcome
from uns_server.channels.config import (
    ChannelConfigError,
    TelegramConfig,
    channel_endpoint,
    load_channels_config,
)
from uns_server.channels.http_transport import OutboundClient
from uns_server.channels.kinds import person_kinds
from uns_server.channels.telegram import TelegramChannel
from uns_server.domain.people import address_problem
from uns_server.domain.telegram_updates import CALLBACK_DATA_MAX_BYTES, parse_callback_data

TOKEN = f"123456:{PLANTED_SECRET}"
NID = "0b5c2f8e-1d7a-4c39-9a51-3f0e2b7c9d11"
LINKS = AnswerLinks("https://uns.example.com/a/ACK", "https://uns.example.com/a/DIS", "ACK", "DIS")
OUTCOME = ObligationOutcome(
    state="ACKED",
    actor="recipient:alice",
    via="telegram",
    at="2026-12-07T03:00:00+00:00",
    title="Arm 3 stalled",
    message="Joint 2 over torque",
    priority="HIGH",
    notification_id=NID,
)


def _channel(rx: HttpReceiver, client: OutboundClient, **options: Any) -> TelegramChannel:
    config = TelegramConfig(
        bot_token=TOKEN, secret_token="hook-secret", base_url=rx.url("/api"), **options
    )
    return TelegramChannel("tg", config, client)


def _sent(message_id: int = 42, chat_id: int = 123456789) -> Reply:
    return Reply.json(
        {
            "ok": True,
            "result": {
                "message_id": message_id,
                "date": 1765000000,
                "chat": {"id": chat_id, "type": "private"},
                "text": "...",
            },
        }
    )


def _error(code: int, description: str, **extra: Any) -> Reply:
    body = {"ok": False, "error_code": code, "description": description, **extra}
    return Reply.json(body, status=code)


async def test_send_message_with_answer_buttons_to_the_persons_chat(
    receiver: HttpReceiver, http_client: OutboundClient, debug_logs: pytest.LogCaptureFixture
) -> None:
    receiver.script(_sent())
    message = make_message(require_ack=True, links=lambda _r: LINKS, to="123456789")
    result = await _channel(receiver, http_client).send(message)

    assert result.success and result.message_id == "42"
    assert result.reference == {
        "type": "telegram",
        "recipient": "telegram:123456789",
        "telegram_chat_id": "123456789",
        "telegram_message_id": "42",
    }
    [request] = receiver.requests
    assert (request.method, request.path) == ("POST", f"/api/bot{TOKEN}/sendMessage")
    assert request.headers["content-type"] == "application/json"
    body = request.json()
    assert body["chat_id"] == "123456789"
    assert "parse_mode" not in body  # plain text: producer text cannot inject markup
    assert (
        body["text"]
        == "Arm 3 stalled\n\nJoint 2 over torque <@here> & co\n\nHIGH · WARNING · cell-7"
    )
    [[ack, dismiss], [snooze]] = body["reply_markup"]["inline_keyboard"]
    assert (ack["text"], dismiss["text"], snooze["text"]) == (
        "Acknowledge",
        "Dismiss",
        "Snooze 30 min",
    )
    for button in (ack, dismiss, snooze):
        assert len(button["callback_data"].encode()) <= CALLBACK_DATA_MAX_BYTES
    assert parse_callback_data(ack["callback_data"]) == (NID, "ack")
    assert parse_callback_data(dismiss["callback_data"]) == (NID, "dis")
    assert parse_callback_data(snooze["callback_data"]) == (NID, "snz")
    assert_secret_absent(result, debug_logs)


async def test_a_channel_username_is_recorded_by_the_chat_id_telegram_answers(
    receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    receiver.script(_sent(message_id=7, chat_id=-1001234567890))
    result = await _channel(receiver, http_client).send(make_message(to="@ops_alerts"))
    assert result.success
    assert result.reference["telegram_chat_id"] == "-1001234567890"
    assert result.reference["recipient"] == "telegram:@ops_alerts"
    body = receiver.requests[0].json()
    assert body["chat_id"] == "@ops_alerts"
    assert "reply_markup" not in body  # no answer owed: no buttons


async def test_without_a_chat_is_permanent(
    receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    result = await _channel(receiver, http_client).send(make_message())
    assert not result.success and not result.retryable
    assert "chat" in (result.error or "")
    assert not receiver.requests


@pytest.mark.parametrize(
    ("reply", "retryable", "throttled", "retry_after"),
    [
        (
            _error(429, "Too Many Requests: retry after 5", parameters={"retry_after": 5}),
            True,
            True,
            5.0,
        ),
        (
            Reply.json(
                {"ok": False, "error_code": 429, "description": "Too Many Requests"},
                status=429,
                headers={"retry-after": "9"},
            ),
            True,
            True,
            9.0,
        ),
        (_error(500, "Internal Server Error"), True, False, None),
        (Reply.text("<html>bad gateway</html>", status=502), True, False, None),
        (_error(400, "Bad Request: chat not found"), False, False, None),
        (_error(403, "Forbidden: bot was blocked by the user"), False, False, None),
        (_error(401, "Unauthorized"), False, False, None),
    ],
)
async def test_errors_are_classified(
    receiver: HttpReceiver,
    http_client: OutboundClient,
    debug_logs: pytest.LogCaptureFixture,
    reply: Reply,
    retryable: bool,
    throttled: bool,
    retry_after: float | None,
) -> None:
    receiver.script(reply)
    result = await _channel(receiver, http_client).send(make_message(to="123456789"))
    assert not result.success
    assert (result.retryable, result.throttled, result.retry_after_seconds) == (
        retryable,
        throttled,
        retry_after,
    )
    assert result.metadata["http_status"] == reply.status
    if reply.body.startswith(b"{"):
        assert result.metadata["telegram_error"] == json.loads(reply.body)["description"]
    assert_secret_absent(result, debug_logs)


async def test_ok_false_under_http_200_is_classified_by_its_error_code(
    receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    receiver.script(
        Reply.json({"ok": False, "error_code": 429, "parameters": {"retry_after": 3}}),
        Reply.json({"ok": False, "error_code": 400, "description": "Bad Request: x"}),
    )
    channel = _channel(receiver, http_client)
    throttled = await channel.send(make_message(to="1"))
    rejected = await channel.send(make_message(to="1"))
    assert throttled.throttled and throttled.retry_after_seconds == 3.0
    assert throttled.metadata["telegram_error_code"] == 429
    assert not rejected.success and not rejected.retryable


@pytest.mark.parametrize(
    "reply",
    [
        Reply.text("<html>captive portal</html>"),
        Reply.json({"ok": True, "result": {"message_id": "x"}}),
    ],
)
async def test_a_2xx_that_is_not_a_sent_message_is_not_delivered(
    receiver: HttpReceiver, http_client: OutboundClient, reply: Reply
) -> None:
    receiver.script(reply)
    result = await _channel(receiver, http_client).send(make_message(to="123456789"))
    assert not result.success and not result.retryable


async def test_a_bot_api_that_never_answers_is_transient(
    receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    receiver.script(Reply(action="hang"))
    channel = _channel(receiver, http_client, timeout_seconds=0.2)
    result = await channel.send(make_message(to="123456789"))
    assert not result.success and result.retryable
    assert "timed out" in (result.error or "")


async def test_update_edits_the_message_and_removes_its_buttons(
    receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    receiver.script(_sent())
    reference = {"type": "telegram", "telegram_chat_id": "-100777", "telegram_message_id": "42"}
    result = await _channel(receiver, http_client).update(reference, OUTCOME)
    assert result.success
    [request] = receiver.requests
    assert request.path == f"/api/bot{TOKEN}/editMessageText"
    body = request.json()
    assert (body["chat_id"], body["message_id"]) == ("-100777", 42)
    assert body["reply_markup"] == {"inline_keyboard": []}
    assert body["text"].startswith("Arm 3 stalled\n\nJoint 2 over torque\n\nHIGH")
    assert body["text"].endswith("✅ Acknowledged by recipient:alice at 2026-12-07 03:00:00 UTC")


async def test_an_edit_already_made_counts_as_done(
    receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    receiver.script(
        _error(400, "Bad Request: message is not modified: specified new message content ..."),
        _error(400, "Bad Request: message to edit not found"),
    )
    channel = _channel(receiver, http_client)
    reference = {"type": "telegram", "telegram_chat_id": "1", "telegram_message_id": "42"}
    assert (await channel.update(reference, OUTCOME)).success
    gone = await channel.update(reference, OUTCOME)
    assert not gone.success and not gone.retryable
    missing = await channel.update({"type": "telegram"}, OUTCOME)
    assert not missing.success and len(receiver.requests) == 2


async def test_answer_callback_query(receiver: HttpReceiver, http_client: OutboundClient) -> None:
    receiver.script(Reply.json({"ok": True, "result": True}))
    result = await _channel(receiver, http_client).answer_callback("4382bfdwdsb323b2d9", "Done.")
    assert result.success
    [request] = receiver.requests
    assert request.path == f"/api/bot{TOKEN}/answerCallbackQuery"
    assert request.json() == {"callback_query_id": "4382bfdwdsb323b2d9", "text": "Done."}


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"type": "telegram", "secret_token": "s"}, "option 'bot_token' is required"),
        ({"type": "telegram", "bot_token": "1:x"}, "option 'secret_token' is required"),
        (
            {"type": "telegram", "bot_token": "1:x", "secret_token": "has spaces"},
            "option 'secret_token' must be 1-256 of A-Z, a-z, 0-9",
        ),
        (
            {"type": "telegram", "bot_token_env": "UNSET", "secret_token": "s"},
            "'UNSET' (bot_token_env) is not set",
        ),
        (
            {"type": "telegram", "bot_token": "1:x", "secret_token": "s", "chat_id": "1"},
            "unknown option(s): 'chat_id'",
        ),
    ],
)
def test_options_are_checked_when_loaded(options: dict[str, Any], problem: str) -> None:
    with pytest.raises(ChannelConfigError) as caught:
        load_channels_config({"c": options}, {})
    assert problem in str(caught.value)


def test_credentials_from_the_environment_masked_and_chat_ids_as_contacts() -> None:
    config = load_channels_config(
        {
            "tg": {"type": "telegram", "bot_token_env": "B", "secret_token_env": "S"},
            "tg-local": {
                "type": "telegram",
                "bot_token": "1:x",
                "secret_token": "s",
                "base_url": "http://127.0.0.1:8081/",
            },
        },
        {"B": TOKEN, "S": "webhook_Secret-1"},
    )
    tg, local = config.channels["tg"], config.channels["tg-local"]
    assert isinstance(tg, TelegramConfig) and isinstance(local, TelegramConfig)
    assert (tg.bot_token, tg.secret_token) == (TOKEN, "webhook_Secret-1")
    assert tg.base_url == "https://api.telegram.org"
    assert local.base_url == "http://127.0.0.1:8081"
    assert PLANTED_SECRET not in repr(tg) and "webhook_Secret-1" not in repr(tg)
    assert channel_endpoint(tg) == "api.telegram.org:443"
    kind = person_kinds(config)["tg"]
    for good in ("123456789", "-1001234567890", "@ops_alerts"):
        assert address_problem(kind, good) is None, good
    for bad in ("alice", "12 34", "+33612345678", "0", "-", "@abc", "@1abcdef", "", "1" * 21):
        assert address_problem(kind, bad), bad

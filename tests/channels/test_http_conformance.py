"""One suite, every HTTP adapter: the SPEC §2 classification rules against a real socket.

Each case says how to build the adapter against a base URL, what its provider's explicit
acceptance looks like, and a 2xx that is *not* acceptance. Provider-specific request
shapes are tested in the per-adapter modules.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import formatdate

import pytest

from tests.channels.conftest import PLANTED_SECRET, assert_secret_absent, make_message
from tests.support.http_receiver import HttpReceiver, Reply, unused_tcp_port
from uns_server.channels.base import Channel
from uns_server.channels.config import PagerDutyConfig, SlackConfig, WebhookConfig
from uns_server.channels.http_transport import OutboundClient
from uns_server.channels.pagerduty import PagerDutyChannel
from uns_server.channels.slack import SlackChannel
from uns_server.channels.webhook import WebhookChannel

Build = Callable[[str, OutboundClient, float], Channel]


@dataclass(frozen=True)
class Case:
    id: str
    build: Build
    accepted: Reply
    message_id: str | None
    unexpected_2xx: Reply | None  # None: any 2xx is the provider's acceptance


def _webhook(base: str, client: OutboundClient, timeout: float) -> Channel:
    config = WebhookConfig(url=f"{base}/hook", secret=PLANTED_SECRET, timeout_seconds=timeout)
    return WebhookChannel("hook", config, client)


def _slack_api(base: str, client: OutboundClient, timeout: float) -> Channel:
    config = SlackConfig(
        token=PLANTED_SECRET, channel="C0ALERTS", base_url=f"{base}/api", timeout_seconds=timeout
    )
    return SlackChannel("slack", config, client)


def _slack_webhook(base: str, client: OutboundClient, timeout: float) -> Channel:
    url = f"{base}/services/T000/B000/{PLANTED_SECRET}"
    return SlackChannel("slack-hook", SlackConfig(webhook_url=url, timeout_seconds=timeout), client)


def _pagerduty(base: str, client: OutboundClient, timeout: float) -> Channel:
    config = PagerDutyConfig(routing_key=PLANTED_SECRET, base_url=base, timeout_seconds=timeout)
    return PagerDutyChannel("pager", config, client)


TOKEN = make_message().idempotency_token
CASES = [
    Case("webhook", _webhook, Reply.json({"received": True}), TOKEN, None),
    Case(
        "slack-web-api",
        _slack_api,
        Reply.json({"ok": True, "channel": "C0ALERTS", "ts": "1700000000.000100"}),
        "1700000000.000100",
        Reply.text("<html>Welcome to the captive portal</html>"),
    ),
    Case("slack-incoming-webhook", _slack_webhook, Reply.text("ok"), None, Reply(status=200)),
    Case(
        "pagerduty",
        _pagerduty,
        Reply.json(
            {"status": "success", "message": "Event processed", "dedup_key": "pd-dedup-1"},
            status=202,
        ),
        "pd-dedup-1",
        Reply.json({"status": "queued"}, status=202),
    ),
]


@pytest.fixture(params=CASES, ids=[c.id for c in CASES])
def case(request: pytest.FixtureRequest) -> Case:
    param: Case = request.param
    return param


def _channel(case: Case, rx: HttpReceiver, client: OutboundClient, timeout: float = 2.0) -> Channel:
    return case.build(rx.url("").rstrip("/"), client, timeout)


async def test_explicit_acceptance_is_delivered_with_message_id(
    case: Case, receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    receiver.script(case.accepted)
    result = await _channel(case, receiver, http_client).send(make_message())
    assert result.success and not result.retryable and result.error is None
    assert result.message_id == case.message_id
    assert len(receiver.requests) == 1 and receiver.requests[0].method == "POST"


@pytest.mark.parametrize("status", [500, 502, 503, 504])
async def test_5xx_is_transient(
    case: Case, receiver: HttpReceiver, http_client: OutboundClient, status: int
) -> None:
    receiver.script(Reply.text("upstream trouble", status=status))
    result = await _channel(case, receiver, http_client).send(make_message())
    assert not result.success and result.retryable and not result.throttled
    assert result.metadata["http_status"] == status
    assert f"HTTP {status}" in (result.error or "")


async def test_429_with_retry_after_seconds_is_transient(
    case: Case, receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    receiver.script(Reply.text("slow down", status=429, headers={"Retry-After": "30"}))
    result = await _channel(case, receiver, http_client).send(make_message())
    assert not result.success and result.retryable and result.throttled
    assert result.retry_after_seconds == 30.0


async def test_429_with_retry_after_http_date_is_transient(
    case: Case, receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    when = formatdate(time.time() + 120, usegmt=True)
    receiver.script(Reply(status=429, headers={"Retry-After": when}))
    result = await _channel(case, receiver, http_client).send(make_message())
    assert result.retryable and result.retry_after_seconds is not None
    assert 100 <= result.retry_after_seconds <= 121


async def test_429_without_retry_after_is_transient(
    case: Case, receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    receiver.script(Reply(status=429))
    result = await _channel(case, receiver, http_client).send(make_message())
    assert result.retryable and result.retry_after_seconds is None
    assert result.throttled  # the provider asked us to wait: the domain decides the cost


@pytest.mark.parametrize("status", [400, 401, 403, 404, 410, 413])
async def test_other_4xx_is_permanent(
    case: Case, receiver: HttpReceiver, http_client: OutboundClient, status: int
) -> None:
    receiver.script(Reply.text("invalid_payload", status=status))
    result = await _channel(case, receiver, http_client).send(make_message())
    assert not result.success and not result.retryable
    assert result.metadata["http_status"] == status
    assert "invalid_payload" in (result.error or "")


async def test_redirect_is_not_followed_and_is_permanent(
    case: Case, receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    receiver.script(Reply(status=307, headers={"Location": receiver.url("/elsewhere")}))
    result = await _channel(case, receiver, http_client).send(make_message())
    assert not result.success and not result.retryable
    assert len(receiver.requests) == 1


async def test_slow_reply_times_out_as_transient(
    case: Case, receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    receiver.script(Reply(delay_seconds=3600.0))  # a reply that never comes in time
    # Cut off by its own 0.3 s timeout: the bound here only stops a hung test.
    result = await asyncio.wait_for(
        _channel(case, receiver, http_client, timeout=0.3).send(make_message()), 60
    )
    assert not result.success and result.retryable
    assert "timed out" in (result.error or "")
    assert result.metadata["provider_effect_possible"] is True


async def test_hanging_provider_times_out_as_transient(
    case: Case, receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    receiver.script(Reply(action="hang"))
    result = await _channel(case, receiver, http_client, timeout=0.3).send(make_message())
    assert not result.success and result.retryable


async def test_connection_closed_without_reply_is_transient(
    case: Case, receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    receiver.script(Reply(action="close"))
    result = await _channel(case, receiver, http_client).send(make_message())
    assert not result.success and result.retryable
    assert result.metadata["provider_effect_possible"] is True


async def test_a_reply_that_is_not_http_is_transient(
    case: Case, receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    receiver.script(Reply(action="garbage"))
    result = await _channel(case, receiver, http_client).send(make_message())
    assert not result.success and result.retryable
    assert "transport error" in (result.error or "")
    assert result.metadata["provider_effect_possible"] is True


async def test_connection_refused_is_transient(case: Case, http_client: OutboundClient) -> None:
    port = unused_tcp_port()
    result = await case.build(f"http://127.0.0.1:{port}", http_client, 1.0).send(make_message())
    assert not result.success and result.retryable
    # A sentence, not a Python repr.
    assert result.error == f"connection refused to 127.0.0.1:{port}"
    assert result.metadata["provider_effect_possible"] is False


async def test_unexpected_2xx_is_not_delivered(
    case: Case, receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    if case.unexpected_2xx is None:
        pytest.skip("for a generic webhook, any 2xx is the receiver's explicit acceptance")
    receiver.script(case.unexpected_2xx)
    result = await _channel(case, receiver, http_client).send(make_message())
    assert not result.success and not result.retryable
    assert result.message_id is None
    assert "unexpected response" in (result.error or "")


@pytest.mark.parametrize(
    "reply",
    [
        Reply.text(f"bad credential {PLANTED_SECRET}", status=401),
        Reply.text(f"oops {PLANTED_SECRET}", status=500, headers={"X-Echo": PLANTED_SECRET}),
        Reply.text(f"<html>{PLANTED_SECRET}</html>", status=200),
        Reply.json({"ok": False, "error": PLANTED_SECRET}),
    ],
    ids=["401", "500", "200-html", "200-json"],
)
async def test_planted_secret_never_leaks(
    case: Case,
    receiver: HttpReceiver,
    http_client: OutboundClient,
    debug_logs: pytest.LogCaptureFixture,
    reply: Reply,
) -> None:
    receiver.script(reply, case.accepted)
    channel = _channel(case, receiver, http_client)
    failed = await channel.send(make_message())
    delivered = await channel.send(make_message(attempt=2))
    assert delivered.success
    assert_secret_absent(failed, debug_logs)
    assert_secret_absent(delivered, debug_logs)


async def test_planted_secret_never_leaks_on_transport_failure(
    case: Case, http_client: OutboundClient, debug_logs: pytest.LogCaptureFixture
) -> None:
    base = f"http://127.0.0.1:{unused_tcp_port()}"
    result = await case.build(base, http_client, 1.0).send(make_message())
    assert result.retryable
    assert_secret_absent(result, debug_logs)

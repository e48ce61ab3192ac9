"""The ntfy and Teams adapters against a real loopback receiver: the request each
provider documents (ntfy's JSON publish with its action buttons, a Teams Workflows
Adaptive Card), the answer classified (2xx delivered with the provider's id as the
reference, 429 throttled with Retry-After, 5xx and timeouts transient, other 4xx
permanent), the outcome follow-up, and credentials kept out of results and logs; their
options and contacts validated when loaded."""

from __future__ import annotations

from typing import Any

import pytest

from tests.channels.conftest import PLANTED_SECRET, assert_secret_absent, make_message
from tests.support.http_receiver import HttpReceiver, Reply
from uns_server.channels.base import AnswerLinks, ObligationOutcome
from uns_server.channels.config import (
    ChannelConfigError,
    NtfyConfig,
    TeamsConfig,
    load_channels_config,
)
from uns_server.channels.http_transport import OutboundClient
from uns_server.channels.kinds import person_kinds
from uns_server.channels.ntfy import NtfyChannel
from uns_server.channels.teams import CARD_CONTENT_TYPE, TeamsChannel
from uns_server.domain.people import address_problem

LINKS = AnswerLinks("https://uns.example.com/a/ACK", "https://uns.example.com/a/DIS", "ACK", "DIS")
OUTCOME = ObligationOutcome(
    state="ACKED",
    actor="recipient:alice",
    via="ntfy",
    at="2026-12-07T03:00:00+00:00",
    title="Arm 3 stalled",
    message="Joint 2 over torque",
    notification_id="n-1",
)


def _ntfy(
    rx: HttpReceiver, client: OutboundClient, token: str | None = PLANTED_SECRET
) -> NtfyChannel:
    return NtfyChannel("push", NtfyConfig(base_url=rx.url(""), token=token), client)


def _teams(rx: HttpReceiver, client: OutboundClient) -> TeamsChannel:
    url = rx.url(f"/workflows/abc/triggers/manual/paths/invoke?api-version=1&sig={PLANTED_SECRET}")
    return TeamsChannel("ops-teams", TeamsConfig(url=url), client)


def _published(topic: str = "alice-pager", **extra: Any) -> Reply:
    return Reply.json({"id": "hwQ2YpKdmg", "time": 1, "event": "message", "topic": topic, **extra})


async def test_ntfy_publishes_json_with_answer_buttons_to_the_persons_topic(
    receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    receiver.script(_published())
    message = make_message(require_ack=True, links=lambda _r: LINKS, to="alice-pager")
    result = await _ntfy(receiver, http_client).send(message)

    assert result.success and result.message_id == "hwQ2YpKdmg"
    assert result.reference == {
        "type": "ntfy",
        "recipient": "ntfy:alice-pager",
        "ntfy_topic": "alice-pager",
        "ntfy_id": "hwQ2YpKdmg",
    }
    [request] = receiver.requests
    assert (request.method, request.path) == ("POST", "/")
    assert request.headers["authorization"] == f"Bearer {PLANTED_SECRET}"
    assert request.headers["content-type"] == "application/json"
    body = request.json()
    assert body["topic"] == "alice-pager"
    assert (body["title"], body["message"]) == ("Arm 3 stalled", "Joint 2 over torque <@here> & co")
    assert body["priority"] == 4  # HIGH
    assert body["actions"] == [
        {
            "action": "http",
            "label": "Acknowledge",
            "url": "https://uns.example.com/a/ACK/answer?via=ntfy",
            "method": "POST",
            "clear": True,
        },
        {
            "action": "http",
            "label": "Dismiss",
            "url": "https://uns.example.com/a/DIS/answer?via=ntfy",
            "method": "POST",
            "clear": True,
        },
        {
            "action": "http",
            "label": "Snooze 30 min",
            "url": "https://uns.example.com/a/ACK/answer?via=ntfy&action=snooze",
            "method": "POST",
        },
    ]


@pytest.mark.parametrize(
    ("intent", "priority", "expected"),
    [
        ("SAFETY", "LOW", 5),
        ("WARNING", "CRITICAL", 5),
        ("WARNING", "NORMAL", 3),
        ("INFO", "LOW", 2),
    ],
)
async def test_ntfy_priority_follows_intent_and_priority(
    receiver: HttpReceiver, http_client: OutboundClient, intent: str, priority: str, expected: int
) -> None:
    receiver.script(_published())
    channel = _ntfy(receiver, http_client, token=None)
    result = await channel.send(make_message(intent=intent, priority=priority, to="alice-pager"))
    assert result.success
    [request] = receiver.requests
    assert request.json()["priority"] == expected
    assert "actions" not in request.json()  # no answer owed: no buttons
    assert "authorization" not in request.headers  # no token: anonymous publish


async def test_ntfy_follow_up_publishes_the_outcome_to_the_same_topic(
    receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    receiver.script(_published())
    reference = {"type": "ntfy", "ntfy_topic": "alice-pager", "ntfy_id": "first"}
    result = await _ntfy(receiver, http_client).update(reference, OUTCOME)
    assert result.success
    body = receiver.requests[0].json()
    assert body["topic"] == "alice-pager" and "actions" not in body
    assert body["title"] == "Arm 3 stalled"
    assert body["message"].startswith("Acknowledged by recipient:alice at 2026-12-07 03:00:00")
    assert body["priority"] == 2


async def test_ntfy_without_a_topic_is_permanent(
    receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    result = await _ntfy(receiver, http_client).send(make_message())
    assert not result.success and not result.retryable
    assert "topic" in (result.error or "")
    assert not receiver.requests


@pytest.mark.parametrize("which", ["ntfy", "teams"])
@pytest.mark.parametrize(
    ("reply", "retryable", "throttled", "retry_after"),
    [
        (
            Reply.json({"code": 42901, "http": 429}, status=429, headers={"retry-after": "7"}),
            True,
            True,
            7.0,
        ),
        (Reply.text("bad gateway", status=502), True, False, None),
        (
            Reply.json({"code": 40301, "http": 403, "error": "forbidden"}, status=403),
            False,
            False,
            None,
        ),
        (Reply.text("not found", status=404), False, False, None),
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
    retry_after: float | None,
) -> None:
    receiver.script(reply)
    channel = _ntfy(receiver, http_client) if which == "ntfy" else _teams(receiver, http_client)
    result = await channel.send(make_message(to="alice-pager" if which == "ntfy" else ""))
    assert not result.success
    assert (result.retryable, result.throttled, result.retry_after_seconds) == (
        retryable,
        throttled,
        retry_after,
    )
    assert result.metadata["http_status"] == reply.status
    assert_secret_absent(result, debug_logs)


@pytest.mark.parametrize("which", ["ntfy", "teams"])
async def test_a_provider_that_never_answers_is_transient(
    receiver: HttpReceiver, http_client: OutboundClient, which: str
) -> None:
    receiver.script(Reply(action="hang"))
    if which == "ntfy":
        channel: NtfyChannel | TeamsChannel = NtfyChannel(
            "push", NtfyConfig(base_url=receiver.url(""), timeout_seconds=0.2), http_client
        )
        message = make_message(to="alice-pager")
    else:
        channel = TeamsChannel(
            "ops-teams", TeamsConfig(url=receiver.url("/wf"), timeout_seconds=0.2), http_client
        )
        message = make_message()
    result = await channel.send(message)
    assert not result.success and result.retryable
    assert "timed out" in (result.error or "")


async def test_ntfy_2xx_without_a_message_id_is_not_delivered(
    receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    receiver.script(Reply.text("<html>captive portal</html>"))
    result = await _ntfy(receiver, http_client).send(make_message(to="alice-pager"))
    assert not result.success and not result.retryable


async def test_teams_posts_an_adaptive_card_with_open_url_buttons(
    receiver: HttpReceiver, http_client: OutboundClient, debug_logs: pytest.LogCaptureFixture
) -> None:
    receiver.script(Reply(status=202, headers={"x-ms-workflow-run-id": "08584-run"}))
    message = make_message(require_ack=True, links=lambda _r: LINKS)
    result = await _teams(receiver, http_client).send(message)

    assert result.success and result.message_id == "08584-run"
    assert result.reference == {
        "type": "teams",
        "recipient": "teams:ops-teams",
        "teams_run_id": "08584-run",
    }
    [request] = receiver.requests
    assert request.path.startswith("/workflows/abc/triggers/manual/paths/invoke")
    body = request.json()
    assert body["type"] == "message"
    [attachment] = body["attachments"]
    assert (
        attachment["contentType"] == CARD_CONTENT_TYPE == "application/vnd.microsoft.card.adaptive"
    )
    card = attachment["content"]
    assert (card["type"], card["version"]) == ("AdaptiveCard", "1.4")
    texts = [b["text"] for b in card["body"] if b["type"] == "TextBlock"]
    assert texts == ["Arm 3 stalled", "Joint 2 over torque <@here> & co"]
    assert card["actions"] == [
        {"type": "Action.OpenUrl", "title": "Acknowledge", "url": "https://uns.example.com/a/ACK"},
        {"type": "Action.OpenUrl", "title": "Dismiss", "url": "https://uns.example.com/a/DIS"},
    ]
    assert_secret_absent(result, debug_logs)


async def test_teams_follow_up_card_carries_the_outcome(
    receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    receiver.script(Reply(status=202))
    result = await _teams(receiver, http_client).update({"type": "teams"}, OUTCOME)
    assert result.success and result.message_id is None
    card = receiver.requests[0].json()["attachments"][0]["content"]
    assert "actions" not in card
    assert card["body"][1]["text"].startswith("Acknowledged by recipient:alice")


async def test_teams_refuses_a_persons_message(
    receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    result = await _teams(receiver, http_client).send(make_message(to="someone"))
    assert not result.success and not result.retryable
    assert not receiver.requests


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"type": "ntfy"}, "option 'base_url' is required"),
        ({"type": "ntfy", "base_url": "ntfy.sh"}, "option 'base_url' must be an http(s) URL"),
        (
            {"type": "ntfy", "base_url": "https://ntfy.sh", "topic": "x"},
            "unknown option(s): 'topic'",
        ),
        ({"type": "teams"}, "option 'url' is required"),
        ({"type": "teams", "url_env": "UNSET_VARIABLE"}, "'UNSET_VARIABLE' (url_env) is not set"),
    ],
)
def test_options_are_checked_when_loaded(options: dict[str, Any], problem: str) -> None:
    with pytest.raises(ChannelConfigError) as caught:
        load_channels_config({"c": options}, {})
    assert problem in str(caught.value)


def test_credentials_from_the_environment_and_masked_in_repr() -> None:
    config = load_channels_config(
        {
            "push": {"type": "ntfy", "base_url": "https://ntfy.example.com/", "token_env": "T"},
            "teams": {"type": "teams", "url_env": "U"},
        },
        {"T": PLANTED_SECRET, "U": f"https://x.example.com/wf?sig={PLANTED_SECRET}"},
    )
    push, teams = config.channels["push"], config.channels["teams"]
    assert isinstance(push, NtfyConfig) and push.token == PLANTED_SECRET
    assert push.base_url == "https://ntfy.example.com"
    assert isinstance(teams, TeamsConfig) and PLANTED_SECRET in teams.url
    assert PLANTED_SECRET not in repr(push) + repr(teams)
    kinds = person_kinds(config)
    assert address_problem(kinds["push"], "alice-pager_2") is None
    for bad in ("alice pager", "a/b", "x" * 65, ""):
        assert address_problem(kinds["push"], bad)
    assert address_problem(kinds["teams"], "anyone")

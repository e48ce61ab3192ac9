"""PagerDuty Events v2: the trigger event we enqueue and PagerDuty's documented answers."""

from __future__ import annotations

import hashlib

import pytest

from tests.channels.conftest import PLANTED_SECRET, make_message
from tests.support.http_receiver import HttpReceiver, Reply
from uns_server.channels.base import ObligationOutcome
from uns_server.channels.config import PagerDutyConfig
from uns_server.channels.http_transport import OutboundClient
from uns_server.channels.pagerduty import PagerDutyChannel

ACCEPTED = Reply.json(
    {"status": "success", "message": "Event processed", "dedup_key": "srv-key"}, status=202
)


def _channel(rx: HttpReceiver, client: OutboundClient) -> PagerDutyChannel:
    config = PagerDutyConfig(routing_key=PLANTED_SECRET, base_url=rx.url(""))
    return PagerDutyChannel("pager", config, client)


async def test_trigger_event_shape(receiver: HttpReceiver, http_client: OutboundClient) -> None:
    receiver.script(ACCEPTED)
    result = await _channel(receiver, http_client).send(make_message())
    assert result.success and result.message_id == "srv-key"
    request = receiver.requests[0]
    assert request.path == "/v2/enqueue"
    event = request.json()
    message = make_message()
    assert event["routing_key"] == PLANTED_SECRET
    assert event["event_action"] == "trigger"
    assert event["dedup_key"] == message.idempotency_token
    assert event["payload"]["summary"] == "Arm 3 stalled"
    assert event["payload"]["source"] == "cell-7"
    assert event["payload"]["severity"] == "error"
    assert event["payload"]["custom_details"]["notification_id"] == message.notification_id
    assert event["payload"]["custom_details"]["metadata"] == {"cell": 7, "tags": ["arm", "torque"]}


@pytest.mark.parametrize(
    ("priority", "severity"),
    [("CRITICAL", "critical"), ("HIGH", "error"), ("NORMAL", "warning"), ("LOW", "info")],
)
async def test_priority_maps_to_severity(
    receiver: HttpReceiver, http_client: OutboundClient, priority: str, severity: str
) -> None:
    receiver.script(ACCEPTED)
    await _channel(receiver, http_client).send(make_message(priority=priority))
    assert receiver.requests[0].json()["payload"]["severity"] == severity


async def test_long_tokens_become_a_stable_hash_and_summary_is_capped(
    receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    token = "t" * 300
    receiver.script(Reply.json({"status": "success", "message": "Event processed"}, status=202))
    result = await _channel(receiver, http_client).send(
        make_message(idempotency_token=token, title="x" * 2000)
    )
    sent = receiver.requests[0].json()
    assert sent["dedup_key"] == hashlib.sha256(token.encode()).hexdigest()
    assert len(sent["payload"]["summary"]) == 1024
    assert result.message_id == sent["dedup_key"]  # PagerDuty omitted it: record what we sent


async def test_invalid_event_is_permanent_with_pagerdutys_reason(
    receiver: HttpReceiver, http_client: OutboundClient
) -> None:
    receiver.script(
        Reply.json(
            {
                "status": "invalid event",
                "message": "Event object is invalid",
                "errors": ["'payload.summary' is missing or blank"],
            },
            status=400,
        )
    )
    result = await _channel(receiver, http_client).send(make_message())
    assert not result.success and not result.retryable
    assert "Event object is invalid" in (result.error or "")


@pytest.mark.parametrize(
    "reply",
    [
        Reply.json({"status": "success", "dedup_key": "k"}, status=200),
        Reply.json({"status": "invalid event"}, status=202),
        Reply(status=202),
        Reply.text("Event processed", status=202),
    ],
    ids=["200-success", "202-other-status", "202-empty", "202-text"],
)
async def test_anything_but_202_success_is_not_delivered(
    receiver: HttpReceiver, http_client: OutboundClient, reply: Reply
) -> None:
    receiver.script(reply)
    result = await _channel(receiver, http_client).send(make_message())
    assert not result.success and not result.retryable


def _settlement(state: str) -> ObligationOutcome:
    return ObligationOutcome(
        state, "uns-timeout-worker", "expiry", "2026-12-04T10:00:00+00:00", "t", "m"
    )


@pytest.mark.parametrize(
    ("state", "resolve_on_timeout", "sent"),
    [
        ("ACKED", False, ["resolve"]),
        ("DISMISSED", False, ["resolve"]),
        ("WITHDRAWN", False, ["resolve"]),
        ("TIMED_OUT", False, []),  # escalation is required: the incident stays open
        ("TIMED_OUT", True, ["resolve"]),
    ],
)
async def test_an_ended_obligation_resolves_its_incident(
    receiver: HttpReceiver,
    http_client: OutboundClient,
    state: str,
    resolve_on_timeout: bool,
    sent: list[str],
) -> None:
    receiver.script(ACCEPTED)
    config = PagerDutyConfig(
        routing_key=PLANTED_SECRET, base_url=receiver.url(""), resolve_on_timeout=resolve_on_timeout
    )
    channel = PagerDutyChannel("pager", config, http_client)
    result = await channel.update({"pagerduty_dedup_key": "k1"}, _settlement(state))
    assert result.success
    assert [r.json()["event_action"] for r in receiver.requests] == sent
    assert all(r.json()["dedup_key"] == "k1" for r in receiver.requests)

"""Slack buttons and PagerDuty webhooks settle acks as the provider's user, signed or
refused; every settlement updates the sent Slack message and the PagerDuty alert."""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import urlencode

import httpx
from google.protobuf import json_format

from tests.http.conftest import PAGERDUTY_WEBHOOK_SECRET, SLACK_SIGNING_SECRET, Rig
from tests.http.helpers import click, email_links
from tests.support.providers import SLACK_CHANNEL_ID
from tests.support.watching import events_until
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_server.domain.signatures import pagerduty_signature, slack_signature

SLACK_PATH = "/integrations/slack/interactions"
PAGERDUTY_PATH = "/integrations/pagerduty/webhook"


def slack_button(rig: Rig, action_id: str, index: int = 0) -> str:
    posted = rig.fakes.slack("chat.postMessage")[index]
    [button] = [e for e in posted["blocks"][1]["elements"] if e["action_id"] == action_id]
    return str(button["value"])


def slack_request(
    action_id: str, token: str, user: str = "U0ADA", response_url: str | None = None
) -> bytes:
    payload: dict[str, Any] = {
        "type": "block_actions",
        "user": {"id": user, "username": "ada", "team_id": "T0TEAM"},
        "channel": {"id": SLACK_CHANNEL_ID},
        "actions": [{"action_id": action_id, "value": token, "type": "button"}],
    }
    if response_url is not None:
        payload["response_url"] = response_url
    return urlencode({"payload": json.dumps(payload)}).encode()


def slack_headers(
    body: bytes, *, age_seconds: int = 0, secret: str = SLACK_SIGNING_SECRET
) -> dict[str, str]:
    ts = str(int(time.time()) - age_seconds)
    return {
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": slack_signature(secret, ts, body),
        "Content-Type": "application/x-www-form-urlencoded",
    }


def pagerduty_body(incident_key: str, event_type: str = "incident.acknowledged") -> bytes:
    envelope: dict[str, Any] = {
        "event": {
            "id": "01DEN4HPBQAAAG05V5QQYBRZMF",
            "event_type": event_type,
            "resource_type": "incident",
            "occurred_at": "2026-12-02T09:00:00.000Z",
            "agent": {"id": "PXPGF42", "summary": "Earline Greenholt", "type": "user_reference"},
            "data": {"id": "PT4KHLK", "type": "incident", "incident_key": incident_key},
        }
    }
    return json.dumps(envelope).encode()


async def _acked_payload(rig: Rig, nid: str) -> dict[str, Any]:
    events = await events_until(
        rig.server.stub("oscar"),
        pb.WatchEventsRequest(replay_history=True, notification_ids=[nid]),
        lambda evs: any(e.kind in (t.EVENT_KIND_ACKED, t.EVENT_KIND_DISMISSED) for e in evs),
    )
    [payload] = [
        json_format.MessageToDict(e.payload)
        for e in events
        if e.kind in (t.EVENT_KIND_ACKED, t.EVENT_KIND_DISMISSED)
    ]
    return payload


async def test_a_slack_button_answers_as_the_slack_user_and_updates_the_messages(rig: Rig) -> None:
    nid = await rig.send("slack-ack")
    await rig.deliver()
    body = slack_request("uns_dismiss", slack_button(rig, "uns_dismiss"))
    async with httpx.AsyncClient(base_url=rig.base_url) as http:
        answer = await http.post(SLACK_PATH, content=body, headers=slack_headers(body))
    assert answer.status_code == 200
    notification = await rig.get(nid)
    assert (notification.ack_state, notification.ack_actor) == (
        t.ACK_STATE_DISMISSED,
        "slack:U0ADA",
    )
    [record] = await rig.ack_records(nid)
    assert (record.acked_by, record.via) == ("slack:U0ADA", "slack")
    payload = await _acked_payload(rig, nid)
    assert (payload["actor"], payload["via"]) == ("slack:U0ADA", "slack")
    assert payload["metadata"]["slack_user_name"] == "ada"

    assert not rig.fakes.slack("chat.update")  # queued, not sent inside the answer
    result = await rig.server.app.message_updater.run_once()
    assert (result.done, result.failed) == (3, 0)  # Slack, PagerDuty, the webhook
    [update] = rig.fakes.slack("chat.update")
    ref = {r.channel: r for r in notification.provider_references}["alerts-slack"]
    assert (update["channel"], update["ts"]) == (SLACK_CHANNEL_ID, ref.slack_ts)
    assert "Dismissed by <@U0ADA>" in json.dumps(update["blocks"])
    assert all(block["type"] != "actions" for block in update["blocks"])  # no live buttons
    trigger, resolve = rig.fakes.pagerduty_events()
    assert (resolve["event_action"], resolve["dedup_key"]) == ("resolve", trigger["dedup_key"])
    [_delivery, settled] = rig.fakes.calls("/hook")
    assert settled.json()["type"] == "uns.notification.settled"
    assert (await rig.server.app.message_updater.run_once()).done == 0  # sent once


async def test_slack_requests_with_bad_stale_or_replayed_signatures_change_nothing(
    rig: Rig,
) -> None:
    nid = await rig.send("slack-refused")
    await rig.deliver()
    token = slack_button(rig, "uns_ack")
    body = slack_request("uns_ack", token)
    async with httpx.AsyncClient(base_url=rig.base_url) as http:
        forged = await http.post(
            SLACK_PATH, content=body, headers=slack_headers(body, secret="not-the-secret")
        )
        stale = await http.post(
            SLACK_PATH, content=body, headers=slack_headers(body, age_seconds=301)
        )
        headers = slack_headers(body)
        altered = await http.post(
            SLACK_PATH, content=slack_request("uns_ack", token, "U0EVE"), headers=headers
        )
        unsigned = await http.post(SLACK_PATH, content=body)
        for refused in (forged, stale, altered, unsigned):
            assert refused.status_code == 401
        assert (await rig.get(nid)).ack_state == t.ACK_STATE_PENDING
        assert await rig.ack_records(nid) == []

        assert (await http.post(SLACK_PATH, content=body, headers=headers)).status_code == 200
        replayed = await http.post(SLACK_PATH, content=body, headers=headers)
    assert replayed.status_code == 401
    assert len(await rig.ack_records(nid)) == 1


async def test_a_slack_button_with_a_bad_token_settles_nothing(rig: Rig) -> None:
    nid = await rig.send("slack-bad-token")
    await rig.deliver()
    token = slack_button(rig, "uns_ack")
    async with httpx.AsyncClient(base_url=rig.base_url) as http:
        for action_id, value in (("uns_ack", token[:-2] + "xx"), ("uns_dismiss", token)):
            body = slack_request(action_id, value)
            assert (
                await http.post(SLACK_PATH, content=body, headers=slack_headers(body))
            ).status_code == 200
    assert (await rig.get(nid)).ack_state == t.ACK_STATE_PENDING


async def test_pagerduty_webhooks_settle_as_the_pagerduty_user(rig: Rig) -> None:
    nid = await rig.send("pd-ack")
    await rig.deliver()
    [trigger] = rig.fakes.pagerduty_events()
    body = pagerduty_body(trigger["dedup_key"])
    rotating = f"v1={'0' * 64},{pagerduty_signature(PAGERDUTY_WEBHOOK_SECRET, body)}"
    async with httpx.AsyncClient(base_url=rig.base_url) as http:
        forged = await http.post(
            PAGERDUTY_PATH,
            content=body,
            headers={"X-PagerDuty-Signature": pagerduty_signature("x", body)},
        )
        assert forged.status_code == 401
        assert (await rig.get(nid)).ack_state == t.ACK_STATE_PENDING
        answer = await http.post(
            PAGERDUTY_PATH, content=body, headers={"X-PagerDuty-Signature": rotating}
        )
        assert answer.json() == {"outcome": "settled"}
        replayed = await http.post(
            PAGERDUTY_PATH, content=body, headers={"X-PagerDuty-Signature": rotating}
        )
        assert replayed.status_code == 401
        stranger = pagerduty_body("some-other-incident-key")
        other = await http.post(
            PAGERDUTY_PATH,
            content=stranger,
            headers={
                "X-PagerDuty-Signature": pagerduty_signature(PAGERDUTY_WEBHOOK_SECRET, stranger)
            },
        )
        assert other.json() == {"outcome": "ignored"}
    notification = await rig.get(nid)
    assert (notification.ack_state, notification.ack_actor) == (
        t.ACK_STATE_ACKED,
        "pagerduty:PXPGF42",
    )
    [record] = await rig.ack_records(nid)
    assert record.via == "pagerduty"
    payload = await _acked_payload(rig, nid)
    assert (payload["actor"], payload["via"]) == ("pagerduty:PXPGF42", "pagerduty")
    assert payload["metadata"]["pagerduty_incident"] == "PT4KHLK"

    await rig.server.app.message_updater.run_once()
    assert len(rig.fakes.slack("chat.update")) == 1
    # Acknowledged in PagerDuty: the obligation is over, so the incident is resolved
    # (an acknowledged incident would re-page at its acknowledgement timeout).
    trigger, resolve = rig.fakes.pagerduty_events()
    assert (resolve["event_action"], resolve["dedup_key"]) == ("resolve", trigger["dedup_key"])


async def test_answers_from_links_resolve_the_pagerduty_incident(rig: Rig) -> None:
    await rig.send("pd-from-link")
    await rig.deliver()
    async with httpx.AsyncClient() as http:
        assert (
            await click(http, email_links(rig.smtp.messages[0])["Acknowledge"], "ack")
        ).status_code == 303
    await rig.server.app.message_updater.run_once()
    trigger, resolve = rig.fakes.pagerduty_events()
    assert (resolve["event_action"], resolve["dedup_key"]) == ("resolve", trigger["dedup_key"])
    [update] = rig.fakes.slack("chat.update")
    assert "Acknowledged by email:oncall@example.com" in json.dumps(update["blocks"])


async def test_a_timeout_updates_slack_and_leaves_the_incident_open(rig: Rig) -> None:
    nid = await rig.send("timeout-updates")
    await rig.deliver()
    rig.clock.advance(minutes=31)
    assert (await rig.server.app.timers.run_once()).timed_out == 1
    assert (await rig.get(nid)).ack_state == t.ACK_STATE_TIMED_OUT
    [record] = await rig.ack_records(nid)
    assert record.via == "expiry"
    await rig.server.app.message_updater.run_once()
    [update] = rig.fakes.slack("chat.update")
    assert "Not answered in time" in json.dumps(update["blocks"])
    # Escalation is required: PagerDuty keeps escalating (no resolve_on_timeout here).
    assert [e["event_action"] for e in rig.fakes.pagerduty_events()] == ["trigger"]


async def test_failed_updates_are_retried_and_never_block_the_answer(rig: Rig) -> None:
    from tests.support.http_receiver import Reply

    nid = await rig.send("update-retry")
    await rig.deliver()
    async with httpx.AsyncClient() as http:
        assert (
            await click(http, email_links(rig.smtp.messages[0])["Acknowledge"], "ack")
        ).status_code == 303
    assert (await rig.get(nid)).ack_state == t.ACK_STATE_ACKED
    answer = rig.fakes.receiver.responder
    assert answer is not None
    rig.fakes.receiver.responder = lambda r: (
        Reply.json({"ok": False, "error": "ratelimited"})
        if r.path.endswith("chat.update")
        else answer(r)
    )
    first = await rig.server.app.message_updater.run_once()
    assert (first.done, first.retried) == (2, 1)  # PagerDuty, webhook done; Slack to retry
    rig.fakes.receiver.responder = answer
    rig.clock.advance(minutes=10)
    second = await rig.server.app.message_updater.run_once()
    assert (second.done, second.retried) == (1, 0)
    assert len(rig.fakes.slack("chat.update")) == 2


async def test_a_withdrawal_updates_slack_with_its_own_icon_and_words(rig: Rig) -> None:
    nid = await rig.send("withdrawn-updates")
    await rig.deliver()
    await rig.server.stub("alice").WithdrawNotification(
        pb.WithdrawNotificationRequest(notification_id=nid, reason="cleared")
    )
    await rig.server.app.message_updater.run_once()
    [update] = rig.fakes.slack("chat.update")
    [context] = [b for b in update["blocks"] if b["type"] == "context"]
    text = context["elements"][0]["text"]
    assert text.startswith(":leftwards_arrow_with_hook: Withdrawn by ")
    assert "no answer needed" in text
    assert ":alarm_clock:" not in json.dumps(update["blocks"])


class FailOnce:
    """A settle hook (``AckService.settle_hooks``: run inside the settling transaction) that
    raises the first time: a real fault in the middle of the settle, rolled back."""

    def __init__(self) -> None:
        self.failed = 0

    async def __call__(self, *_args: object) -> None:
        if not self.failed:
            self.failed += 1
            raise RuntimeError("injected: the settle fails once")


async def test_a_callback_whose_settle_failed_is_served_when_the_provider_retries(
    rig: Rig,
) -> None:
    """The receipt is written with the settle: a failed settle (500) leaves none, so
    the provider's retry of the very same signed request settles, once."""
    slack_nid = await rig.send("slack-retried")
    pd_nid = await rig.send("pd-retried")
    await rig.deliver()
    slack_body = slack_request("uns_ack", slack_button(rig, "uns_ack"))
    slack_signed = slack_headers(slack_body)
    trigger = next(e for e in rig.fakes.pagerduty_events() if e["dedup_key"].startswith(pd_nid))
    pd_body = pagerduty_body(trigger["dedup_key"])
    pd_signed = {"X-PagerDuty-Signature": pagerduty_signature(PAGERDUTY_WEBHOOK_SECRET, pd_body)}
    async with httpx.AsyncClient(base_url=rig.base_url) as http:
        for nid, path, body, headers in (
            (slack_nid, SLACK_PATH, slack_body, slack_signed),
            (pd_nid, PAGERDUTY_PATH, pd_body, pd_signed),
        ):
            fault = FailOnce()
            rig.server.app.acks.settle_hooks.append(fault)
            try:
                failed = await http.post(path, content=body, headers=headers)
                assert (failed.status_code, fault.failed) == (500, 1)
                assert (await rig.get(nid)).ack_state == t.ACK_STATE_PENDING
                assert await rig.ack_records(nid) == []
                retried = await http.post(path, content=body, headers=headers)
                assert retried.status_code == 200, retried.text
                replayed = await http.post(path, content=body, headers=headers)
                assert replayed.status_code == 401
            finally:
                rig.server.app.acks.settle_hooks.remove(fault)
            assert (await rig.get(nid)).ack_state == t.ACK_STATE_ACKED
            assert len(await rig.ack_records(nid)) == 1

"""Provider callbacks come from the right party, once, in the right shape: a PagerDuty
webhook verifies only with the secret of the channel that opened the incident, a Slack
callback only with the secret of the Slack channel that posted the message; concurrent
copies of one signed callback settle once; malformed signed payloads are 400 and
change nothing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest

from tests.http.conftest import (
    LINK_KEY,
    PAGERDUTY_WEBHOOK_SECRET,
    SLACK_SIGNING_SECRET,
    Rig,
    channels_yaml,
)
from tests.http.helpers import click
from tests.http.test_provider_callbacks import (
    PAGERDUTY_PATH,
    SLACK_PATH,
    pagerduty_body,
    slack_button,
    slack_headers,
    slack_request,
)
from tests.support.http_receiver import HttpReceiver
from tests.support.policies import activate_policy
from tests.support.providers import SLACK_CHANNEL_ID, ProviderFakes, SmtpFake
from tests.support.server import ShiftableClock, start_server
from uns.v1 import types_pb2 as t
from uns_server.domain.enums import DeliveryMode
from uns_server.domain.signatures import pagerduty_signature

OTHER_SLACK_SECRET = "the-other-slack-apps-secret"
OTHER_PAGERDUTY_SECRET = "the-other-pagerduty-subscription"


@pytest.fixture
async def two(db_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    """Tenant A's channels (the shared rig's) and tenant B's, with their own secrets."""
    async with HttpReceiver() as receiver, SmtpFake() as smtp:
        fakes = ProviderFakes(receiver)
        channels = tmp_path / "channels.yaml"
        channels.write_text(
            channels_yaml(fakes, smtp)
            + f"""
slack-b:
  type: slack
  token: xoxb-other-token
  channel: "#b"
  base_url: {fakes.slack_base_url}
  signing_secret: {OTHER_SLACK_SECRET}
pager-b:
  type: pagerduty
  routing_key: OTHERKEY
  base_url: {fakes.pagerduty_base_url}
  webhook_secret: {OTHER_PAGERDUTY_SECRET}
"""
        )
        for name, chans in (
            ("ops.a", ["alerts-slack", "pager"]),
            ("ops.b", ["slack-b", "pager-b"]),
            ("ops.hook", ["hook"]),
        ):
            await activate_policy(
                db_url,
                name,
                channels=chans,
                delivery_mode=DeliveryMode.GUARANTEED,
                require_ack=True,
                ack_timeout_minutes=30,
            )
        clock = ShiftableClock()
        server = await start_server(
            db_url,
            tmp_path,
            clock=clock,
            channels_file=str(channels),
            dispatch_enabled=False,
            http_listen="127.0.0.1:0",
            action_link_keys=LINK_KEY,
        )
        try:
            yield Rig(server, fakes, smtp, clock)
        finally:
            await server.stop()


async def test_a_pagerduty_webhook_verifies_only_with_the_opening_channels_secret(
    two: Rig,
) -> None:
    nid = await two.send("pd-b", notification_type="ops.b")
    await two.deliver()
    [trigger] = two.fakes.pagerduty_events()
    assert trigger["routing_key"] == "OTHERKEY"
    body = pagerduty_body(trigger["dedup_key"])
    async with httpx.AsyncClient(base_url=two.base_url) as http:
        wrong = await http.post(
            PAGERDUTY_PATH,
            content=body,
            headers={"X-PagerDuty-Signature": pagerduty_signature(PAGERDUTY_WEBHOOK_SECRET, body)},
        )
        assert wrong.status_code == 401
        assert (await two.get(nid)).ack_state == t.ACK_STATE_PENDING
        right = await http.post(
            PAGERDUTY_PATH,
            content=body,
            headers={"X-PagerDuty-Signature": pagerduty_signature(OTHER_PAGERDUTY_SECRET, body)},
        )
    assert right.json() == {"outcome": "settled"}
    assert (await two.get(nid)).ack_state == t.ACK_STATE_ACKED


async def test_a_slack_callback_verifies_only_with_the_posting_channels_secret(two: Rig) -> None:
    nid = await two.send("slack-b", notification_type="ops.b")
    await two.deliver()
    body = slack_request("uns_ack", slack_button(two, "uns_ack"))
    async with httpx.AsyncClient(base_url=two.base_url) as http:
        wrong = await http.post(
            SLACK_PATH, content=body, headers=slack_headers(body, secret=SLACK_SIGNING_SECRET)
        )
        assert wrong.status_code == 401
        assert (await two.get(nid)).ack_state == t.ACK_STATE_PENDING
        assert await two.ack_records(nid) == []
        right = await http.post(
            SLACK_PATH, content=body, headers=slack_headers(body, secret=OTHER_SLACK_SECRET)
        )
    assert right.status_code == 200
    assert (await two.get(nid)).ack_actor == "slack:U0ADA"


def _press(token: str, channel: object, user: object = "U0ADA") -> bytes:
    payload: dict[str, object] = {
        "type": "block_actions",
        "user": {"id": user},
        "actions": [{"action_id": "uns_ack", "value": token, "type": "button"}],
    }
    if channel != "absent":
        payload["channel"] = channel
    return _form(payload)


async def test_a_press_is_verified_by_the_slack_channel_uns_recorded_not_the_payloads(
    two: Rig,
) -> None:
    """A signed press whose ``channel.id`` is forged, null or absent was verified with
    any Slack channel's secret, and settled a webhook message's link "via Slack"."""
    hook_nid = await two.send("hook-only", notification_type="ops.hook")
    b_nid = await two.send("slack-b-only", notification_type="ops.b")
    await two.deliver()
    [delivery] = [r.json() for r in two.fakes.calls("/hook")]
    hook_token = delivery["data"]["links"]["acknowledge"].rsplit("/a/", 1)[1]
    b_token = slack_button(two, "uns_ack")
    channels: list[object] = [{"id": SLACK_CHANNEL_ID}, {"id": "CFORGED"}, {"id": None}, None]
    channels.append("absent")
    async with httpx.AsyncClient(base_url=two.base_url) as http:
        for channel in channels:
            for secret in (SLACK_SIGNING_SECRET, OTHER_SLACK_SECRET):
                # No Slack channel posted the webhook's message: no Slack secret verifies.
                body = _press(hook_token, channel)
                reply = await http.post(
                    SLACK_PATH, content=body, headers=slack_headers(body, secret=secret)
                )
                assert reply.status_code == 401, (channel, secret)
            # slack-b posted ops.b's message: alerts-slack's secret does not verify.
            body = _press(b_token, channel)
            reply = await http.post(
                SLACK_PATH, content=body, headers=slack_headers(body, secret=SLACK_SIGNING_SECRET)
            )
            assert reply.status_code == 401, channel
        for nid in (hook_nid, b_nid):
            assert (await two.get(nid)).ack_state == t.ACK_STATE_PENDING
            assert await two.ack_records(nid) == []
        # Whatever the payload says of the channel, the poster's own secret verifies.
        body = _press(b_token, {"id": "CFORGED"})
        reply = await http.post(
            SLACK_PATH, content=body, headers=slack_headers(body, secret=OTHER_SLACK_SECRET)
        )
        assert reply.status_code == 200
    assert (await two.get(b_nid)).ack_actor == "slack:U0ADA"
    # The webhook's own link still answers, as its link does.
    async with httpx.AsyncClient() as http:
        await click(http, delivery["data"]["links"]["acknowledge"], "ack")
    assert (await two.get(hook_nid)).ack_state == t.ACK_STATE_ACKED


async def test_concurrent_copies_of_one_signed_callback_are_processed_once(two: Rig) -> None:
    slack_nid = await two.send("copies-slack", notification_type="ops.a")
    pd_nid = await two.send("copies-pd", notification_type="ops.b")
    await two.deliver()
    body = slack_request("uns_dismiss", slack_button(two, "uns_dismiss"))
    headers = slack_headers(body)
    [pd_trigger] = [e for e in two.fakes.pagerduty_events() if e["routing_key"] == "OTHERKEY"]
    pd_body = pagerduty_body(pd_trigger["dedup_key"])
    pd_headers = {"X-PagerDuty-Signature": pagerduty_signature(OTHER_PAGERDUTY_SECRET, pd_body)}
    async with httpx.AsyncClient(base_url=two.base_url) as http:
        replies = await asyncio.gather(
            *(http.post(SLACK_PATH, content=body, headers=headers) for _ in range(6)),
            *(http.post(PAGERDUTY_PATH, content=pd_body, headers=pd_headers) for _ in range(6)),
        )
    slack_codes = sorted(r.status_code for r in replies[:6])
    pd_codes = sorted(r.status_code for r in replies[6:])
    assert slack_codes == [200] + [401] * 5
    assert pd_codes == [200] + [401] * 5
    assert len(await two.ack_records(slack_nid)) == 1
    assert len(await two.ack_records(pd_nid)) == 1


def _form(payload: object) -> bytes:
    return urlencode({"payload": json.dumps(payload)}).encode()


async def test_malformed_signed_payloads_are_400_and_change_nothing(two: Rig) -> None:
    nid = await two.send("malformed", notification_type="ops.a")
    await two.deliver()
    token = slack_button(two, "uns_ack")
    action = {"action_id": "uns_ack", "value": token, "type": "button"}
    user = {"id": "U0ADA"}
    shapes: list[bytes] = [
        _form({"type": "block_actions", "user": user, "actions": 5}),
        _form({"type": "block_actions", "user": user, "actions": ["uns_ack"]}),
        _form({"type": "block_actions", "user": user, "actions": {"0": action}}),
        _form({"type": "block_actions", "user": "U0ADA", "actions": [action]}),
        _form({"type": "block_actions", "user": user, "actions": [{**action, "value": 7}]}),
        _form({"type": "block_actions", "user": user, "channel": 3, "actions": [action]}),
        _form([action]),
        # user.id (and the other fields UNS reads) must have Slack's types: a press was
        # once settled as ``slack:{'x': 1}``.
        *(
            _form({"type": "block_actions", "user": {"id": bad}, "actions": [action]})
            for bad in ({"x": 1}, 5, None, "", "U0\x00", "U0\ud800", "U" * 65, ["U0ADA"])
        ),
        _form({"type": "block_actions", "user": {}, "actions": [action]}),
        _form({"type": "block_actions", "user": {**user, "username": {"x": 1}}, "actions": []}),
        _form({"type": "block_actions", "user": {**user, "team_id": 7}, "actions": [action]}),
        _form({"type": "block_actions", "user": user, "actions": [action], "response_url": 1}),
        _form({"type": {"x": 1}, "user": user, "actions": [action]}),
        _form({"type": "block_actions", "user": user, "actions": [{**action, "action_id": 1}]}),
        urlencode({"payload": "{not json"}).encode(),
        b"no-payload-field=1",
        b"\xff\xfe",
    ]
    pd_shapes = [b"[]", b'{"event": 5}', b"{", b'{"events": {}}']
    [trigger] = [e for e in two.fakes.pagerduty_events() if e["routing_key"] == "R0UTINGKEY"]
    for agent in ({"id": {"x": 1}}, {"id": 5}, {"id": "P\u0000"}, 7, {"summary": ["x"]}):
        envelope = json.loads(pagerduty_body(trigger["dedup_key"]))
        envelope["event"]["agent"] = agent
        pd_shapes.append(json.dumps(envelope).encode())
    for data in ({"incident_key": 5}, {"incident_key": trigger["dedup_key"], "id": {}}, 3):
        envelope = json.loads(pagerduty_body(trigger["dedup_key"]))
        envelope["event"]["data"] = data
        pd_shapes.append(json.dumps(envelope).encode())
    async with httpx.AsyncClient(base_url=two.base_url) as http:
        for body in shapes:
            reply = await http.post(SLACK_PATH, content=body, headers=slack_headers(body))
            assert reply.status_code == 400, body
        for body in pd_shapes:
            reply = await http.post(
                PAGERDUTY_PATH,
                content=body,
                headers={
                    "X-PagerDuty-Signature": pagerduty_signature(PAGERDUTY_WEBHOOK_SECRET, body)
                },
            )
            assert reply.status_code == 400, body
        assert (await two.get(nid)).ack_state == t.ACK_STATE_PENDING
        assert await two.ack_records(nid) == []
        body = slack_request("uns_ack", token)
        assert (
            await http.post(SLACK_PATH, content=body, headers=slack_headers(body))
        ).status_code == 200
    assert (await two.get(nid)).ack_state == t.ACK_STATE_ACKED

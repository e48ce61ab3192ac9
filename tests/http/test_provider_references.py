"""Every accepted message's provider reference is kept: on the notification
(GetNotification) and on its CHANNEL_ATTEMPT_RESULT event."""

from __future__ import annotations

from google.protobuf import json_format

from tests.http.conftest import Rig
from tests.support.providers import SLACK_CHANNEL_ID
from tests.support.watching import events_until
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t


async def test_each_channel_keeps_what_its_provider_handed_back(rig: Rig) -> None:
    nid = await rig.send("refs-1")
    assert await rig.deliver() == 1
    notification = await rig.get(nid)
    assert notification.state == t.NOTIFICATION_STATE_DELIVERED
    refs = {r.channel: r for r in notification.provider_references}
    assert sorted(refs) == ["alerts-slack", "hook", "mail", "pager"]

    [posted] = rig.fakes.slack("chat.postMessage")
    slack = refs["alerts-slack"]
    assert (slack.channel_type, slack.recipient) == ("slack", "slack:#alerts")
    assert slack.slack_channel == SLACK_CHANNEL_ID
    assert slack.slack_ts and slack.slack_ts == slack.message_id
    assert posted["channel"] == "#alerts"

    [event] = rig.fakes.pagerduty_events()
    pager = refs["pager"]
    assert pager.pagerduty_dedup_key == event["dedup_key"] == pager.message_id
    assert pager.recipient == "pagerduty:pager"

    [hook_call] = rig.fakes.calls("/hook")
    assert refs["hook"].webhook_id == hook_call.headers["webhook-id"]

    [mail] = rig.smtp.messages
    assert refs["mail"].email_message_id == mail["Message-ID"]
    assert refs["mail"].recipient == "email:oncall@example.com"
    for ref in refs.values():
        assert (ref.attempt, ref.cycle) == (1, 1)
        assert ref.HasField("accept_time")

    events = await events_until(
        rig.server.stub("oscar"),
        pb.WatchEventsRequest(replay_history=True, notification_ids=[nid]),
        lambda evs: any(e.kind == t.EVENT_KIND_DELIVERY_RESULT for e in evs),
    )
    results = {
        p["channel"]: p
        for e in events
        if e.kind == t.EVENT_KIND_CHANNEL_ATTEMPT_RESULT
        for p in [json_format.MessageToDict(e.payload)]
    }
    assert results["alerts-slack"]["provider_reference"]["slack_ts"] == slack.slack_ts
    assert results["pager"]["provider_reference"]["pagerduty_dedup_key"] == (
        pager.pagerduty_dedup_key
    )
    assert results["mail"]["provider_reference"]["email_message_id"] == mail["Message-ID"]
    assert results["hook"]["provider_reference"]["webhook_id"] == refs["hook"].webhook_id

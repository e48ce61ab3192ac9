"""The Slack "Snooze 30 min" button (SPEC §7 "Quiet on purpose", issue 44 item 4) through a
real server with its HTTP surface, on SQLite and PostgreSQL: a signed press snoozes the
notification for 30 minutes as the person who pressed it (``via`` slack), the pressed
message is replaced through Slack's ``response_url`` with one saying until when (its
buttons still there, issued for the moved deadline), and once the obligation has ended a
press changes nothing and the presser alone is told how it ended."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import httpx
import pytest
from google.protobuf import json_format

from tests.http.conftest import Rig
from tests.http.test_people_delivery import TYPE as PEOPLE_TYPE
from tests.http.test_people_delivery import setup_people
from tests.http.test_provider_callbacks import (
    SLACK_PATH,
    slack_button,
    slack_headers,
    slack_request,
)
from tests.support.watching import events_until, has_kind
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t

SNOOZE = "uns_snooze"


async def _press(rig: Rig, action_id: str, token: str, path: str, user: str = "U0ADA") -> None:
    """``user`` presses the button; the interaction is answered 200 with no body."""
    body = slack_request(action_id, token, user, response_url=rig.fakes.receiver.url(path))
    async with httpx.AsyncClient(base_url=rig.base_url) as http:
        answer = await http.post(SLACK_PATH, content=body, headers=slack_headers(body))
    assert (answer.status_code, answer.text) == (200, "")


async def _replied(rig: Rig, path: str, before: int) -> dict[str, Any]:
    """The one reply UNS posted to the press's ``response_url`` (waited for)."""
    await rig.fakes.receiver.wait_for_requests(before + 1)
    [reply] = [r.json() for r in rig.fakes.calls(path)]
    return reply  # type: ignore[no-any-return]


async def _snoozed_payload(rig: Rig, nid: str) -> dict[str, Any]:
    events = await events_until(
        rig.server.stub("oscar"),
        pb.WatchEventsRequest(replay_history=True, notification_ids=[nid]),
        has_kind(nid, t.EVENT_KIND_SNOOZED),
    )
    [payload] = [
        json_format.MessageToDict(e.payload) for e in events if e.kind == t.EVENT_KIND_SNOOZED
    ]
    return payload


def _buttons(blocks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    [actions] = [b for b in blocks if b["type"] == "actions"]
    return {e["action_id"]: e for e in actions["elements"]}


async def test_the_snooze_button_snoozes_as_the_presser_and_the_message_says_until_when(
    rig: Rig,
) -> None:
    nid = await rig.send("slack-snooze")
    await rig.deliver()
    posted = _buttons(rig.fakes.slack("chat.postMessage")[0]["blocks"])
    assert list(posted) == ["uns_ack", "uns_dismiss", SNOOZE]
    assert posted[SNOOZE]["text"]["text"] == "Snooze 30 min"
    assert posted[SNOOZE]["value"] == posted["uns_ack"]["value"]  # who may ack may snooze
    deadline = (await rig.get(nid)).ack_deadline_time.ToDatetime()

    before = len(rig.fakes.receiver.requests)
    await _press(rig, SNOOZE, slack_button(rig, SNOOZE), "/slack/response/snooze")
    n = await rig.get(nid)
    assert n.ack_state == t.ACK_STATE_SNOOZED
    until = n.snooze_until_time.ToDatetime()
    assert until - n.update_time.ToDatetime() == timedelta(minutes=30)
    assert n.ack_deadline_time.ToDatetime() > deadline  # the deadline paused with it
    [record] = await rig.ack_records(nid)
    assert (record.acked_by, record.via, record.new_state) == (
        "slack:U0ADA",
        "slack",
        t.ACK_STATE_SNOOZED,
    )
    payload = await _snoozed_payload(rig, nid)
    assert (payload["actor"], payload["via"], payload["duration_seconds"]) == (
        "slack:U0ADA",
        "slack",
        1800,
    )
    assert payload["metadata"]["slack_user_name"] == "ada"

    # The pressed message now says who snoozed it until when; the answer is still owed,
    # so its buttons stay, with tokens issued for the moved deadline.
    shown = await _replied(rig, "/slack/response/snooze", before)
    assert shown["replace_original"] is True and "response_type" not in shown
    [context] = [b for b in shown["blocks"] if b["type"] == "context"]
    line = context["elements"][0]["text"]
    assert line.startswith(":zzz: Snoozed by <@U0ADA> until ")
    assert until.strftime("%Y-%m-%d %H:%M") in line
    assert "Disk almost full" in json.dumps(shown["blocks"])
    fresh = _buttons(shown["blocks"])
    assert list(fresh) == ["uns_ack", "uns_dismiss", SNOOZE]
    assert fresh["uns_ack"]["value"] != posted["uns_ack"]["value"]
    assert all("url" not in button for button in fresh.values())  # answered in Slack
    assert not rig.fakes.slack("chat.update")  # nothing ended: no message update queued

    # Past the first deadline (and its tokens' own expiry), before the moved one: a
    # button sent before the snooze still answers (links follow the moved deadline).
    rig.clock.advance(minutes=45)
    await _press(rig, "uns_ack", posted["uns_ack"]["value"], "/slack/response/old")
    n = await rig.get(nid)
    assert (n.ack_state, n.ack_actor) == (t.ACK_STATE_ACKED, "slack:U0ADA")


async def test_a_snooze_press_after_an_answer_changes_nothing_and_is_told_why(rig: Rig) -> None:
    nid = await rig.send("slack-snooze-late")
    await rig.deliver()
    await _press(rig, "uns_ack", slack_button(rig, "uns_ack"), "/slack/response/ack", "U0EVE")
    records = await rig.ack_records(nid)
    assert [r.new_state for r in records] == [t.ACK_STATE_ACKED]

    before = len(rig.fakes.receiver.requests)
    await _press(rig, SNOOZE, slack_button(rig, SNOOZE), "/slack/response/late")
    note = await _replied(rig, "/slack/response/late", before)
    assert (note["response_type"], note["replace_original"]) == ("ephemeral", False)
    assert note["text"].startswith("This notification was already acknowledged by slack:U0EVE")
    n = await rig.get(nid)
    assert (n.ack_state, n.ack_actor) == (t.ACK_STATE_ACKED, "slack:U0EVE")
    assert await rig.ack_records(nid) == records
    assert not rig.fakes.calls("/slack/response/ack")  # an answer that counted: no note


async def test_a_replayed_snooze_press_is_refused(rig: Rig) -> None:
    nid = await rig.send("slack-snooze-replay")
    await rig.deliver()
    body = slack_request(SNOOZE, slack_button(rig, SNOOZE))
    headers = slack_headers(body)
    async with httpx.AsyncClient(base_url=rig.base_url) as http:
        assert (await http.post(SLACK_PATH, content=body, headers=headers)).status_code == 200
        assert (await http.post(SLACK_PATH, content=body, headers=headers)).status_code == 401
        dismiss = slack_request(SNOOZE, slack_button(rig, "uns_dismiss"))  # not an ack token
        assert (
            await http.post(SLACK_PATH, content=dismiss, headers=slack_headers(dismiss))
        ).status_code == 200
    assert len(await rig.ack_records(nid)) == 1
    assert (await rig.get(nid)).ack_state == t.ACK_STATE_SNOOZED


@pytest.mark.parametrize(
    ("user", "actor"), [("U0ALICE", "recipient:alice"), ("U0EVE", "slack:U0EVE")]
)
async def test_a_direct_message_is_snoozed_as_its_person(rig: Rig, user: str, actor: str) -> None:
    """As for Acknowledge: alice's Slack user snoozes her direct message as alice;
    anyone else (a forwarded message) as their Slack user."""
    await setup_people(rig)
    nid = await rig.send("people-slack-snooze", notification_type=PEOPLE_TYPE)
    await rig.deliver()
    await _press(rig, SNOOZE, slack_button(rig, SNOOZE), "/slack/response/dm", user)
    assert (await rig.get(nid)).ack_state == t.ACK_STATE_SNOOZED
    [record] = await rig.ack_records(nid)
    assert record.acked_by == actor
    assert (await _snoozed_payload(rig, nid))["actor"] == actor

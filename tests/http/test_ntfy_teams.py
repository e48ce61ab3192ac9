"""ntfy and Teams through a real server with its HTTP surface, on SQLite
(SPEC §7 "People reached anywhere"): a person's push goes to their ntfy topic with
buttons the phone app answers itself (an ``http`` action to the machine-answer endpoint
of their signed link), the Teams channel gets an Adaptive Card with ``Action.OpenUrl``
buttons; a press settles as the person ``via ntfy`` exactly once (a replayed press
answers the same and changes nothing), and when the obligation ends both are followed
up with the outcome."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import pytest

from tests.http.conftest import LINK_KEY
from tests.support.http_receiver import HttpReceiver, RecordedRequest, Reply
from tests.support.people import acked_spec, put_people, put_policy
from tests.support.server import KEYS, RunningServer, send_request, start_server
from tests.support.watching import events_until, has_kind
from uns.v1 import audit_service_pb2 as audit_pb
from uns.v1 import audit_service_pb2_grpc as audit_grpc
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t

TYPE = "ops.push"
NTFY_TOKEN = "tk_ntfy-token-for-tests"


@dataclass
class PushRig:
    server: RunningServer
    rx: HttpReceiver

    def calls(self, path: str) -> list[RecordedRequest]:
        return [r for r in self.rx.requests if r.path.split("?")[0] == path]


def _answer(request: RecordedRequest) -> Reply:
    """ntfy answers the published message (its id), a workflow 202 with its run id."""
    if request.path == "/ntfy":
        topic = request.json()["topic"]
        return Reply.json({"id": "msg-" + topic, "event": "message", "topic": topic})
    return Reply(status=202, headers={"x-ms-workflow-run-id": "run-1"})


@pytest.fixture
async def rig(db_url: str, tmp_path: Path) -> AsyncIterator[PushRig]:
    async with HttpReceiver() as rx:
        rx.responder = _answer
        channels = tmp_path / "channels.yaml"
        channels.write_text(
            f"""
push:
  type: ntfy
  base_url: {rx.url("/ntfy")}
  token: {NTFY_TOKEN}
ops-teams:
  type: teams
  url: {rx.url("/teams?sig=workflow-signature")}
"""
        )
        server = await start_server(
            db_url,
            tmp_path,
            channels_file=str(channels),
            dispatch_enabled=False,
            http_listen="127.0.0.1:0",
            action_link_keys=LINK_KEY,
        )
        try:
            await put_people(server, {"alice": [("push", "alice-pager")]})
            spec = acked_spec(channels=["ops-teams"], targets=[t.Target(recipient_id="alice")])
            await put_policy(server, TYPE, spec)
            yield PushRig(server, rx)
        finally:
            await server.stop()


async def _send(rig: PushRig, key: str) -> str:
    sent = await rig.server.stub("alice").SendNotification(
        send_request(notification_type=TYPE, idempotency_key=key)
    )
    assert (await rig.server.app.dispatcher.run_once()).claimed == 1
    return str(sent.notification_id)


async def _get(rig: PushRig, nid: str) -> t.Notification:
    reply = await rig.server.stub("oscar").GetNotification(
        pb.GetNotificationRequest(notification_id=nid)
    )
    return reply.notification


async def _ack_records(rig: PushRig, nid: str) -> list[audit_pb.AckAuditRecord]:
    channel = grpc.aio.insecure_channel(rig.server.target)
    try:
        reply = await audit_grpc.AuditServiceStub(channel).ListAckAuditRecords(
            audit_pb.ListAckAuditRecordsRequest(notification_id=nid),
            metadata=(("authorization", f"Bearer {KEYS['oscar']}"),),
        )
    finally:
        await channel.close()
    return list(reply.records)


def _buttons(publish: RecordedRequest) -> dict[str, dict[str, object]]:
    return {a["label"]: a for a in publish.json()["actions"]}


async def test_a_push_answered_from_the_phone_settles_as_the_person_once(rig: PushRig) -> None:
    nid = await _send(rig, "push-1")

    # alice's push: her topic, the channel's token, three buttons.
    [publish] = rig.calls("/ntfy")
    assert publish.headers["authorization"] == f"Bearer {NTFY_TOKEN}"
    body = publish.json()
    assert (body["topic"], body["title"]) == ("alice-pager", "Disk almost full")
    buttons = _buttons(publish)
    assert [(a["action"], a.get("method")) for a in buttons.values()] == [
        ("http", "POST"),
        ("http", "POST"),
        ("http", "POST"),
    ]
    assert body["click"] == str(buttons["Acknowledge"]["url"]).removesuffix("/answer?via=ntfy")
    ack_url = str(buttons["Acknowledge"]["url"])
    assert ack_url.startswith(rig.server.app.public_url + "/a/")
    assert ack_url.endswith("/answer?via=ntfy")
    # The Teams channel's card, its buttons opening the channel's own links.
    [post] = rig.calls("/teams")
    card = post.json()["attachments"][0]["content"]
    assert [a["type"] for a in card["actions"]] == ["Action.OpenUrl", "Action.OpenUrl"]
    n = await _get(rig, nid)
    [person] = n.recipients
    [push_ref] = person.provider_references
    assert (push_ref.channel, push_ref.recipient) == ("push", "ntfy:alice-pager")
    assert push_ref.message_id == "msg-alice-pager"  # ntfy's message id
    refs = {r.channel: r for r in n.provider_references}
    assert refs["ops-teams"].recipient == "teams:ops-teams"
    assert refs["ops-teams"].message_id == "run-1"

    # The phone's POST: no cookie, no Origin, no body. Settles as alice, via ntfy.
    async with httpx.AsyncClient() as http:
        first = await http.post(ack_url)
        again = await http.post(ack_url)  # a second press (or a retried request)
        dismiss = await http.post(str(buttons["Dismiss"]["url"]))
    assert first.status_code == 200, first.text
    assert first.json() == {
        "notification_id": nid,
        "ack_state": "ACKED",
        "actor": "recipient:alice",
        "repeat": False,
    }
    assert again.status_code == 200 and again.json() == {**first.json(), "repeat": True}
    assert dismiss.status_code == 409 and dismiss.json() == {"error": "another answer came first"}
    n = await _get(rig, nid)
    assert (n.ack_state, n.ack_actor) == (t.ACK_STATE_ACKED, "recipient:alice")
    [record] = await _ack_records(rig, nid)  # settled once
    assert (record.acked_by, record.recipient_id, record.via) == (
        "recipient:alice",
        "alice",
        "ntfy",
    )
    events = await events_until(
        rig.server.stub("oscar"),
        pb.WatchEventsRequest(replay_history=True, notification_ids=[nid]),
        has_kind(nid, t.EVENT_KIND_ACKED),
    )
    assert len([e for e in events if e.kind == t.EVENT_KIND_ACKED]) == 1

    # The loop closes: a follow-up push to alice's topic and a follow-up card.
    result = await rig.server.app.message_updater.run_once()
    assert (result.done, result.failed) == (2, 0)
    follow_up = rig.calls("/ntfy")[-1].json()
    assert follow_up["topic"] == "alice-pager" and "actions" not in follow_up
    assert follow_up["message"].startswith("Acknowledged by recipient:alice")
    outcome_card = rig.calls("/teams")[-1].json()["attachments"][0]["content"]
    assert "actions" not in outcome_card
    assert outcome_card["body"][1]["text"].startswith("Acknowledged by recipient:alice")


async def test_the_answer_endpoint_refuses_what_it_cannot_verify(rig: PushRig) -> None:
    nid = await _send(rig, "push-2")
    ack_url = str(_buttons(rig.calls("/ntfy")[0])["Acknowledge"]["url"])
    base, _, _ = ack_url.partition("/answer")
    token = base.rsplit("/", 1)[1]
    tampered = base[: -len(token)] + token[:-2] + ("AA" if token[-2:] != "AA" else "BB")
    async with httpx.AsyncClient() as http:
        forged = await http.post(tampered + "/answer?via=ntfy")
        other_via = await http.post(base + "/answer?via=slack")
        get = await http.get(ack_url)
    assert forged.status_code == 404
    assert other_via.status_code == 400
    assert get.status_code == 405  # only a POST answers
    n = await _get(rig, nid)
    assert n.ack_state == t.ACK_STATE_PENDING
    assert not await _ack_records(rig, nid)


async def test_the_snooze_button_snoozes_as_the_person(rig: PushRig) -> None:
    nid = await _send(rig, "push-snooze")
    buttons = _buttons(rig.calls("/ntfy")[0])
    snooze_url = str(buttons["Snooze 30 min"]["url"])
    assert snooze_url == str(buttons["Acknowledge"]["url"]) + "&action=snooze"
    dismiss_snooze = str(buttons["Dismiss"]["url"]) + "&action=snooze"
    async with httpx.AsyncClient() as http:
        refused = await http.post(dismiss_snooze)  # only a link that acknowledges snoozes
        snoozed = await http.post(snooze_url)
    assert refused.status_code == 400
    assert snoozed.status_code == 200, snoozed.text
    assert (snoozed.json()["ack_state"], snoozed.json()["actor"]) == ("SNOOZED", None)
    n = await _get(rig, nid)
    assert n.ack_state == t.ACK_STATE_SNOOZED
    events = await events_until(
        rig.server.stub("oscar"),
        pb.WatchEventsRequest(replay_history=True, notification_ids=[nid]),
        has_kind(nid, t.EVENT_KIND_SNOOZED),
    )
    [event] = [e for e in events if e.kind == t.EVENT_KIND_SNOOZED]
    assert (event.payload["actor"], event.payload["via"]) == ("recipient:alice", "ntfy")


async def test_a_press_after_the_obligation_ended_is_refused_and_changes_nothing(
    rig: PushRig,
) -> None:
    nid = await _send(rig, "push-3")
    ack_url = str(_buttons(rig.calls("/ntfy")[0])["Acknowledge"]["url"])
    await rig.server.stub("alice").WithdrawNotification(
        pb.WithdrawNotificationRequest(notification_id=nid, reason="cleared")
    )
    async with httpx.AsyncClient() as http:
        late = await http.post(ack_url)
    assert late.status_code == 409 and late.json() == {"error": "not waiting for an answer"}
    n = await _get(rig, nid)
    assert n.ack_state == t.ACK_STATE_WITHDRAWN
    [record] = await _ack_records(rig, nid)  # the withdrawal's, nothing after it
    assert record.via != "ntfy"
